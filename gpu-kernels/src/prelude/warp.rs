//! Warp shuffles and warp-wide reductions (every lane of a full warp takes part).
use super::block::ReduceOp;

const FULL_MASK: u32 = 0xffff_ffff;

unsafe extern "C" {
    #[link_name = "llvm.nvvm.shfl.sync.bfly.f32"]
    fn shfl_sync_bfly_f32(mask: u32, val: f32, lane_mask: u32, clamp: u32) -> f32;
    #[link_name = "llvm.nvvm.shfl.sync.down.f32"]
    fn shfl_sync_down_f32(mask: u32, val: f32, delta: u32, clamp: u32) -> f32;
    #[link_name = "llvm.nvvm.shfl.sync.idx.f32"]
    fn shfl_sync_idx_f32(mask: u32, val: f32, src_lane: u32, clamp: u32) -> f32;
    #[link_name = "llvm.nvvm.bar.warp.sync"]
    fn bar_warp_sync(mask: u32);
}

/// Every lane of the warp arrives before any continues; its shared-memory accesses before it are
/// ordered before the others' after it (one lane may then speak for the warp).
#[inline(always)]
pub fn sync_warp() {
    // SAFETY: a barrier that all 32 lanes execute (FULL_MASK).
    unsafe { bar_warp_sync(FULL_MASK) }
}

/// The value of `v` on lane `lane ^ lane_mask`.
#[inline(always)]
pub fn shfl_xor(v: f32, lane_mask: u32) -> f32 {
    // SAFETY: all 32 lanes execute it (FULL_MASK); pure register exchange.
    unsafe { shfl_sync_bfly_f32(FULL_MASK, v, lane_mask, 0x1f) }
}

/// The value of `v` on lane `lane + delta` (own value past the warp's end).
#[inline(always)]
pub fn shfl_down(v: f32, delta: u32) -> f32 {
    // SAFETY: as above.
    unsafe { shfl_sync_down_f32(FULL_MASK, v, delta, 0x1f) }
}

/// The value of `v` on lane `src`.
#[inline(always)]
pub fn shfl_idx(v: f32, src: u32) -> f32 {
    // SAFETY: as above.
    unsafe { shfl_sync_idx_f32(FULL_MASK, v, src, 0x1f) }
}

/// Butterfly reduction: every lane gets the result, combined in the same order on every run.
#[inline(always)]
pub fn warp_reduce<R: ReduceOp>(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v = R::combine(v, shfl_xor(v, m));
        m >>= 1;
    }
    v
}
