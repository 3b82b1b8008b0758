//! Block-wide reductions: warp butterflies, then one value per warp through shared memory.
use super::index::{block_dim_x, block_dim_y, block_x, grid_dim_x, lane, thread_x, warp_in_block};
use super::math::rcp_approx;
use super::memory::load_l2_f32;
use super::shared::shared_ptr;
use super::sync::{atomic_add_u32, fence_gpu, sync_threads};
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

shared_array!(static LAST_BLOCK_FLAG: [u32; 1]);

/// Whether this block is the last of the grid to get here, for a reduction whose last block folds
/// every block's partial: thread 0 makes this block's global writes visible to the whole GPU,
/// then counts it on `counter` (a GPU-scope integer counter, no float atomics); in the last
/// block the function returns true in every thread, after a fence that makes the other blocks'
/// writes visible to its reads. The last block must reset `counter` to zero for the next launch.
/// Every thread of the block must call it (it holds a barrier).
///
/// # Safety
/// `counter` (zero on entry) is one u32 in global memory that no other running kernel uses;
/// 1-D grid.
#[inline(always)]
pub unsafe fn last_block_to_finish(counter: *mut u32) -> bool {
    last_of_blocks(counter, grid_dim_x())
}

/// [`last_block_to_finish`] among `blocks` blocks that count on `counter` (e.g. the blocks of
/// one column of a 2-D grid, each column with its own counter).
///
/// # Safety
/// `counter` (zero on entry) is one u32 in global memory that only these `blocks` blocks of
/// the running kernels use, each once.
#[inline(always)]
pub unsafe fn last_of_blocks(counter: *mut u32, blocks: usize) -> bool {
    let is_last = shared_ptr(&raw mut LAST_BLOCK_FLAG);
    // Every thread's partial writes happen before thread 0's fence and count.
    sync_threads();
    if thread_x() == 0 {
        fence_gpu();
        let finished = atomic_add_u32(counter, 1);
        *is_last = (finished as usize == blocks - 1) as u32;
    }
    sync_threads();
    if *is_last == 0 {
        return false;
    }
    fence_gpu();
    true
}

/// A whole-grid reduction in one launch, deterministic: each block stores its `block_total` in
/// `partials[block]`; the last block to finish ([`last_block_to_finish`]) folds every partial in
/// block order and gets the grid's total in its thread 0 (`None` in every other thread and
/// block). Resets `counter` to zero for the next launch on the stream. Every thread of the block
/// must call it (it holds barriers). A grid of one block skips the partials and the counter: its
/// total is the block's (a small reduction, like a mini-batch's mean loss, saves the fence, the
/// atomic and the second pass, ~1 µs).
///
/// # Safety
/// `partials` holds `gridDim.x` floats and `counter` (zero on entry) one u32, in global memory
/// that no other running kernel uses; 1-D blocks of up to 1024 threads.
#[inline(always)]
pub unsafe fn grid_reduce_in_last_block<R: ReduceOp>(
    block_total: f32,
    partials: *mut f32,
    counter: *mut u32,
) -> Option<f32> {
    if grid_dim_x() == 1 {
        return (thread_x() == 0).then_some(block_total);
    }
    if thread_x() == 0 {
        *partials.add(block_x()) = block_total;
    }
    if !last_block_to_finish(counter) {
        return None;
    }
    let mut acc = R::IDENTITY;
    let mut i = thread_x();
    while i < grid_dim_x() {
        acc = R::combine(acc, load_l2_f32(partials.add(i)));
        i += block_dim_x();
    }
    let total = block_reduce::<R>(acc);
    if thread_x() != 0 {
        return None;
    }
    *counter = 0;
    Some(total)
}

shared_array!(static BLOCK_WELFORD_SCRATCH: [f32; 3 * 32]);

/// Chan's combination of two Welford states `(count, mean, M2)`.
#[inline(always)]
pub fn welford_combine(a: (f32, f32, f32), b: (f32, f32, f32)) -> (f32, f32, f32) {
    let n = a.0 + b.0;
    if n == 0.0 {
        return a;
    }
    let delta = b.1 - a.1;
    // Counts are small exact integers: a reciprocal within an ulp, without the slow-path branch
    // of an IEEE division at every level of a team's merge.
    let wb = b.0 * rcp_approx(n);
    (n, a.1 + delta * wb, a.2 + b.2 + delta * delta * a.0 * wb)
}

/// Combine every thread's Welford state `(count, mean, M2)` over the block; every thread gets the
/// total, combined in a fixed order. Every thread of the block must call it.
#[inline(always)]
pub fn block_welford(state: (f32, f32, f32)) -> (f32, f32, f32) {
    use super::warp::shfl_xor;
    let warp_combine = |mut s: (f32, f32, f32)| {
        let mut m = 16;
        while m > 0 {
            let other = (shfl_xor(s.0, m), shfl_xor(s.1, m), shfl_xor(s.2, m));
            s = welford_combine(s, other);
            m >>= 1;
        }
        s
    };
    let scratch = shared_ptr(&raw mut BLOCK_WELFORD_SCRATCH);
    let s = warp_combine(state);
    let warps = (block_dim_x() * block_dim_y()).div_ceil(32);
    if lane() == 0 {
        // SAFETY: warp_in_block() < 32 for blocks of at most 1024 threads.
        unsafe {
            *scratch.add(warp_in_block()) = s.0;
            *scratch.add(32 + warp_in_block()) = s.1;
            *scratch.add(64 + warp_in_block()) = s.2;
        }
    }
    sync_threads();
    let partial = if lane() < warps {
        // SAFETY: lane() < warps <= 32, written before the barrier.
        unsafe { (*scratch.add(lane()), *scratch.add(32 + lane()), *scratch.add(64 + lane())) }
    } else {
        (0.0, 0.0, 0.0)
    };
    let total = warp_combine(partial);
    sync_threads();
    total
}
