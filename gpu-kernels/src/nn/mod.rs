//! Neural-network kernels: softmax and log-softmax, cross-entropy, layer norm (forward and
//! backward; each row of the last axis is one block of `NN_ROW_BLOCK` threads), batch norm,
//! dropout, and the elementwise losses (MSE, binary cross-entropy).
pub mod activation;
pub mod batchnorm;
pub mod dropout;
pub mod layernorm;
pub mod loss;
pub mod softmax;
