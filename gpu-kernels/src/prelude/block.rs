//! Block-wide reductions: warp butterflies, then one value per warp through shared memory.
use super::index::{block_dim_x, block_dim_y, lane, warp_in_block};
use super::shared::shared_ptr;
use super::sync::sync_threads;
use super::warp::warp_reduce;

shared_array!(static BLOCK_REDUCE_SCRATCH: [f32; 32]);

/// An associative combine with its identity. Results are deterministic because every reduction in
/// the crate combines in a fixed order that depends only on the launch shape.
pub trait ReduceOp {
    const IDENTITY: f32;
    fn combine(a: f32, b: f32) -> f32;
}

/// Addition.
pub struct Sum;
/// Maximum; NaN wins (as in PyTorch).
pub struct Max;
/// Minimum; NaN wins.
pub struct Min;

impl ReduceOp for Sum {
    const IDENTITY: f32 = 0.0;
    #[inline(always)]
    fn combine(a: f32, b: f32) -> f32 {
        a + b
    }
}
impl ReduceOp for Max {
    const IDENTITY: f32 = f32::NEG_INFINITY;
    #[inline(always)]
    fn combine(a: f32, b: f32) -> f32 {
        if a > b || a.is_nan() {
            a
        } else {
            b
        }
    }
}
impl ReduceOp for Min {
    const IDENTITY: f32 = f32::INFINITY;
    #[inline(always)]
    fn combine(a: f32, b: f32) -> f32 {
        if a < b || a.is_nan() {
            a
        } else {
            b
        }
    }
}

/// Reduce `v` over the whole block; every thread gets the result. Every thread of the block must
/// call it (it holds two barriers). Blocks of up to 1024 threads.
#[inline(always)]
pub fn block_reduce<R: ReduceOp>(v: f32) -> f32 {
    let scratch = shared_ptr(&raw mut BLOCK_REDUCE_SCRATCH);
    let v = warp_reduce::<R>(v);
    let warps = (block_dim_x() * block_dim_y()).div_ceil(32);
    if lane() == 0 {
        // SAFETY: warp_in_block() < 32 for blocks of at most 1024 threads.
        unsafe { *scratch.add(warp_in_block()) = v };
    }
    sync_threads();
    let partial = if lane() < warps {
        // SAFETY: lane() < warps <= 32, written before the barrier.
        unsafe { *scratch.add(lane()) }
    } else {
        R::IDENTITY
    };
    let total = warp_reduce::<R>(partial);
    // The scratch is reused by the next call: nobody may overwrite it before all have read it.
    sync_threads();
    total
}
