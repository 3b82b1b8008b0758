//! Hopper pieces of the attention backward beside `wgmma.rs` and `wgmma_tile.rs`: the bulk copy
//! (TMA without a tensor map) that moves per-row statistics, the `wgmma.fence` that orders
//! register A operands.
//!
//! Compiled only into sm_90a modules (cargo feature `sm90a`).
use core::arch::asm;

use core::ops::IndexMut;

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

/// A register A operand of k = 16·N (N k16 blocks, each in the layout
/// [`WgmmaTile::mma_rs`](super::WgmmaTile::mma_rs) takes): implemented for N = 4 and 8 (the
/// probabilities of a 64×64 or a 64×128 tile).
pub trait RegisterOperand: Copy + IndexMut<usize, Output = [u32; 4]> {
    const ZERO: Self;
    /// `wgmma.fence` with the operand's registers tied: their computation cannot move below it,
    /// so the `wgmma` that reads them sees the values.
    fn fence(&mut self);
}

impl RegisterOperand for [[u32; 4]; 4] {
    const ZERO: Self = [[0; 4]; 4];
    #[inline(always)]
    fn fence(&mut self) {
        // SAFETY: a fence; the registers are tied so that no write of them moves across it.
        unsafe {
            asm!("wgmma.fence.sync.aligned; // {0} {1} {2} {3} {4} {5} {6} {7} {8} {9} {10} {11} {12} {13} {14} {15}", inout(reg32) self[0][0], inout(reg32) self[0][1], inout(reg32) self[0][2], inout(reg32) self[0][3], inout(reg32) self[1][0], inout(reg32) self[1][1], inout(reg32) self[1][2], inout(reg32) self[1][3], inout(reg32) self[2][0], inout(reg32) self[2][1], inout(reg32) self[2][2], inout(reg32) self[2][3], inout(reg32) self[3][0], inout(reg32) self[3][1], inout(reg32) self[3][2], inout(reg32) self[3][3], options(nostack))
        }
    }
}

impl RegisterOperand for [[u32; 4]; 8] {
    const ZERO: Self = [[0; 4]; 8];
    #[inline(always)]
    fn fence(&mut self) {
        // SAFETY: a fence; the registers are tied so that no write of them moves across it.
        unsafe {
            asm!("wgmma.fence.sync.aligned; // {0} {1} {2} {3} {4} {5} {6} {7} {8} {9} {10} {11} {12} {13} {14} {15} {16} {17} {18} {19} {20} {21} {22} {23} {24} {25} {26} {27} {28} {29} {30} {31}", inout(reg32) self[0][0], inout(reg32) self[0][1], inout(reg32) self[0][2], inout(reg32) self[0][3], inout(reg32) self[1][0], inout(reg32) self[1][1], inout(reg32) self[1][2], inout(reg32) self[1][3], inout(reg32) self[2][0], inout(reg32) self[2][1], inout(reg32) self[2][2], inout(reg32) self[2][3], inout(reg32) self[3][0], inout(reg32) self[3][1], inout(reg32) self[3][2], inout(reg32) self[3][3], inout(reg32) self[4][0], inout(reg32) self[4][1], inout(reg32) self[4][2], inout(reg32) self[4][3], inout(reg32) self[5][0], inout(reg32) self[5][1], inout(reg32) self[5][2], inout(reg32) self[5][3], inout(reg32) self[6][0], inout(reg32) self[6][1], inout(reg32) self[6][2], inout(reg32) self[6][3], inout(reg32) self[7][0], inout(reg32) self[7][1], inout(reg32) self[7][2], inout(reg32) self[7][3], options(nostack))
        }
    }
}
