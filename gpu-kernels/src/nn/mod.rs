//! Neural-network kernels: softmax and log-softmax, cross-entropy, layer norm (forward and
//! backward). Each row of the last axis is one block of `NN_ROW_BLOCK` threads.
pub mod activation;
pub mod layernorm;
pub mod loss;
pub mod softmax;
