//! Layout kernels: data moved, not computed.
pub mod transpose;
