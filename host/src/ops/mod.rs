//! Ops: for each family, the launchers with their shape checks and the CPU twins.
//!
//! Every op is a method on [`Tensor`](crate::Tensor) or [`Context`](crate::Context); these modules
//! hold their implementations, one per kernel family in `gpu-kernels/src/`.
pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod embedding;
pub mod layout;
pub mod matmul;
pub mod nn;
pub mod optim;
pub mod pool;
pub mod random;
pub mod reduce;
mod rows;

/// Elements per rayon task on the CPU backend; also the fixed chunking that keeps CPU reductions
/// deterministic.
pub(crate) const CPU_CHUNK: usize = 1 << 14;
