//! Launch geometry that kernels and their host launchers must agree on.
//!
//! This file is compiled into the kernels and, through `#[path]`, into the host crate, so each
//! number lives in one place.

/// Threads per block of the 1-D elementwise, fill and random kernels.
pub const ELEMENTWISE_BLOCK: usize = 256;
/// Threads per block of the whole-tensor reductions.
pub const REDUCE_ALL_BLOCK: usize = 512;
/// Threads per block of the row reductions (one warp per row when a row is short, the whole
/// block per row otherwise).
pub const REDUCE_ROWS_BLOCK: usize = 256;
/// Side of the square tile a transpose block moves through shared memory.
pub const TRANSPOSE_TILE: usize = 32;
/// Tile rows a transpose block handles per pass (its `blockDim.y`).
pub const TRANSPOSE_ROWS_PER_PASS: usize = 8;
/// Shared-memory words a transpose tile takes: one padding column, so that the column-wise
/// reads of the second half fall in 32 different banks.
pub const TRANSPOSE_TILE_WORDS: usize = TRANSPOSE_TILE * (TRANSPOSE_TILE + 1);
