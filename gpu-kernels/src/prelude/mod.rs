//! The device prelude: the only place that touches intrinsics, inline PTX and shared memory.
//!
//! Kernels import `crate::prelude::*` and stay free of `core::arch`, `asm!` and `llvm.*` names.
//! Unstable features and intrinsic names move with rustc releases; keeping them here means one
//! file to fix when the kernel toolchain moves.

#[macro_use]
pub mod shared;
#[macro_use]
pub mod unroll;
pub mod block;
pub mod half;
pub mod index;
pub mod math;
pub mod memory;
pub mod rows;
pub mod sync;
pub mod tensor_core;
pub mod warp;
#[cfg(feature = "sm90a")]
pub mod wgmma;
#[cfg(feature = "sm90a")]
pub mod wgmma_operands;
#[cfg(feature = "sm90a")]
pub mod wgmma_tile;

pub use block::{
    block_reduce, block_welford, grid_reduce_in_last_block, last_block_to_finish, last_of_blocks,
    welford_combine, Max, Min, ReduceOp, Sum,
};
pub use half::{HalfFloat, BF16, F16};
pub use index::*;
pub use math::*;
pub use memory::*;
pub use rows::*;
pub use shared::{dynamic_shared, shared_ptr};
pub use sync::*;
pub use tensor_core::*;
pub use warp::*;
#[cfg(feature = "sm90a")]
pub use wgmma::*;
#[cfg(feature = "sm90a")]
pub use wgmma_operands::*;
#[cfg(feature = "sm90a")]
pub use wgmma_tile::*;
