//! Hopper pieces of the attention backward beside `wgmma.rs` and `wgmma_tile.rs`: the bulk copy
//! (TMA without a tensor map) that moves per-row statistics, the `wgmma.fence` that orders
//! register A operands, and the one-instruction f32 pair → 16-bit pair rounding that builds them.
//!
//! Compiled only into sm_90a modules (cargo feature `sm90a`).
use core::arch::asm;

use super::WgmmaHalf;

/// Copy `bytes` from global `src` into shared memory at `dst` through the TMA unit; completion
/// adds `bytes` to `bar`'s transaction count.
///
/// # Safety
/// `src` is 16-byte aligned global memory with `bytes` (a multiple of 16) readable; `dst` is a
/// 16-byte-aligned shared buffer of `bytes`; `bar` is an initialised shared `mbarrier`.
#[inline(always)]
pub unsafe fn bulk_load(dst: u32, src: *const u8, bytes: u32, bar: u32) {
    asm!("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
         d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) bar, options(nostack));
}

/// `wgmma.fence` over four k16 blocks of register A operands (a 64×64 tile as
/// [`WgmmaTile::mma_rs`](super::WgmmaTile::mma_rs) takes them): their computation cannot move
/// below it, so the `wgmma` that reads them sees the values.
#[inline(always)]
pub fn wgmma_fence_operands(a: &mut [[u32; 4]; 4]) {
    // SAFETY: a fence; the registers are tied so that no write of them moves across it.
    unsafe {
        asm!("wgmma.fence.sync.aligned; // {0} {1} {2} {3} {4} {5} {6} {7} {8} {9} {10} {11} {12} {13} {14} {15}", inout(reg32) a[0][0], inout(reg32) a[0][1], inout(reg32) a[0][2], inout(reg32) a[0][3], inout(reg32) a[1][0], inout(reg32) a[1][1], inout(reg32) a[1][2], inout(reg32) a[1][3], inout(reg32) a[2][0], inout(reg32) a[2][1], inout(reg32) a[2][2], inout(reg32) a[2][3], inout(reg32) a[3][0], inout(reg32) a[3][1], inout(reg32) a[3][2], inout(reg32) a[3][3], options(nostack))
    }
}

/// Two f32 rounded to nearest into the two 16-bit halves of a register (`lo` in the low half) in
/// one `cvt.rn.{bf16x2,f16x2}.f32`: a register A operand element pair. Two scalar conversions
/// and a byte permute cost three instructions, two of them on the pipe that also runs `ex2`.
#[inline(always)]
pub fn pack_rn<E: WgmmaHalf>(lo: f32, hi: f32) -> u32 {
    let d: u32;
    // SAFETY: a register-only conversion.
    unsafe {
        if E::IS_BF16 {
            asm!("cvt.rn.bf16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi, lo = in(reg32) lo,
                 options(pure, nomem, nostack));
        } else {
            asm!("cvt.rn.f16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi, lo = in(reg32) lo,
                 options(pure, nomem, nostack));
        }
    }
    d
}
