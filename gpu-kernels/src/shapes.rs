//! Launch geometry that kernels and their host launchers must agree on.
//!
//! This file is compiled into the kernels and, through `#[path]`, into the host crate, so each
//! number lives in one place.

/// Threads per block of the 1-D elementwise, fill and random kernels.
pub const ELEMENTWISE_BLOCK: usize = 256;
/// 16-byte vectors each elementwise thread loads before it stores any: a block covers
/// `ELEMENTWISE_BLOCK * ELEMENTWISE_UNROLL * 4` elements per step of its grid-stride loop.
pub const ELEMENTWISE_UNROLL: usize = 4;
/// Threads per block of the whole-tensor reductions.
pub const REDUCE_ALL_BLOCK: usize = 512;
/// Threads per block of the row reductions (one warp per row when a row is short, the whole
/// block per row otherwise).
pub const REDUCE_ROWS_BLOCK: usize = 256;
/// Side of the square tile a transpose block moves through shared memory.
pub const TRANSPOSE_TILE: usize = 64;
/// Threads per transpose block; each moves `TILE² / 4 / BLOCK` 16-byte vectors in and out.
pub const TRANSPOSE_BLOCK: usize = 256;
/// Shared-memory words a transpose tile takes: one padding column, so that the column-wise
/// reads stay within 2-way bank conflicts.
pub const TRANSPOSE_TILE_WORDS: usize = TRANSPOSE_TILE * (TRANSPOSE_TILE + 1);
