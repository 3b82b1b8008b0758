//! Neural-network kernels: softmax and log-softmax, layer norm (forward and backward; each row
//! of the last axis is one block of `NN_ROW_BLOCK` threads), cross-entropy (rows of any length,
//! f32/f16/bf16), embedding lookup and backward, batch norm, dropout, and the elementwise losses
//! (MSE, binary cross-entropy). Softmax and layer norm are built into the `rows` module of
//! `kernels.rs` (with the row reductions), the rest into `nn`.
#[cfg(feature = "nn")]
pub mod activation;
#[cfg(feature = "nn")]
pub mod batchnorm;
#[cfg(feature = "nn")]
pub mod cross_entropy;
#[cfg(feature = "nn")]
pub mod dropout;
pub mod element;
#[cfg(feature = "nn")]
pub mod embedding;
#[cfg(feature = "rows")]
pub mod layernorm;
#[cfg(feature = "nn")]
pub mod loss;
#[cfg(feature = "rows")]
pub mod softmax;
