//! Neural-network kernels: softmax and log-softmax, layer norm (forward and backward; each row
//! of the last axis is one block of `NN_ROW_BLOCK` threads), cross-entropy (rows of any length,
//! f32/f16/bf16), embedding lookup and backward, batch norm, dropout, and the elementwise losses
//! (MSE, binary cross-entropy).
pub mod activation;
pub mod batchnorm;
pub mod cross_entropy;
pub mod dropout;
pub mod element;
pub mod embedding;
pub mod layernorm;
pub mod loss;
pub mod softmax;
