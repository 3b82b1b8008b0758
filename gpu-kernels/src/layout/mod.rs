//! Layout kernels: data moved, not computed.
pub mod gather;
pub mod pad;
pub mod transpose;
