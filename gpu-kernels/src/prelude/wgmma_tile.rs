//! `wgmma` on 64×N tiles of any width the attention kernels use (N = 64, 128, 256), with A from
//! shared memory (SS) or from registers (RS), and a flag that starts a product chain from zero
//! instead of adding to the accumulators (the `scale-d` predicate).
//!
//! Compiled only into sm_90a modules (cargo feature `sm90a`).
use core::arch::asm;

use super::{HalfFloat, BF16, F16};

/// A 16-bit `wgmma` input type.
pub trait WgmmaHalf: HalfFloat {
    /// bf16 (else f16): picks the instruction's type suffix.
    const IS_BF16: bool;
}

impl WgmmaHalf for F16 {
    const IS_BF16: bool = false;
}

impl WgmmaHalf for BF16 {
    const IS_BF16: bool = true;
}

/// The per-thread f32 accumulators of a 64×N warpgroup tile, N/2 of them: for each 8-column block
/// `i` (warp `w` of the warpgroup, lane = 4g + t), `self[4i..4i+4]` = (16w + g, 8i + 2t),
/// (16w + g, 8i + 2t + 1), (16w + g + 8, 8i + 2t), (16w + g + 8, 8i + 2t + 1). Implemented for
/// `[f32; 32]` (N = 64), `[f32; 64]` (N = 128) and `[f32; 128]` (N = 256).
pub trait WgmmaTile {
    /// N: the tile's columns.
    const COLS: usize;
    /// `wgmma.fence`: order this warpgroup's register accesses to the tile (and to RS A operands
    /// written since) before the next `wgmma` that reads or writes them.
    fn fence(&mut self);
    /// Wait until at most `PENDING` `wgmma` groups of this warpgroup are in flight; no read of
    /// the tile moves above the wait.
    fn wait<const PENDING: u32>(&mut self);
    /// `self = A · B (+ self when accumulate)` over k = 16: A 64×16 and B 16×N from shared memory
    /// through the descriptors `a` and `b`; `TA` / `TB` = 1 when A / B is stored M- / N-major
    /// (0: K-major).
    ///
    /// # Safety
    /// The descriptors describe shared memory holding the operands, written and made visible to
    /// the async proxy before the call; every thread of the warpgroup calls it, after
    /// [`WgmmaTile::fence`].
    unsafe fn mma_ss<E: WgmmaHalf, const TA: u32, const TB: u32>(&mut self, a: u64, b: u64, accumulate: bool);
    /// `self = A · B (+ self when accumulate)` over k = 16 with A from registers: `a` is this
    /// thread's fragment of the 64×16 A tile in `mma.m16n8k16`'s A layout for the 16 rows of its
    /// warp (`a[0]` = (g, 2t..2t+2), `a[1]` = (g + 8, 2t..), `a[2]` = (g, 2t + 8..),
    /// `a[3]` = (g + 8, 2t + 8..), two elements a register, the lower column in the low half);
    /// B from shared memory as in [`WgmmaTile::mma_ss`].
    ///
    /// # Safety
    /// As [`WgmmaTile::mma_ss`]; the registers of `a` must not be written until the `wgmma` has
    /// completed ([`WgmmaTile::wait`]).
    unsafe fn mma_rs<E: WgmmaHalf, const TB: u32>(&mut self, a: [u32; 4], b: u64, accumulate: bool);
}

/// Two f32 rounded to nearest into the two 16-bit halves of a register (`lo` in the low half), an
/// RS A-operand element pair, in one `cvt.rn.{bf16x2,f16x2}.f32`: two scalar conversions and a
/// byte permute would take three instructions, two of them on the pipe that also runs `ex2`.
#[inline(always)]
pub fn pack_half2<E: WgmmaHalf>(lo: f32, hi: f32) -> u32 {
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

/// `asm!` with the tile's registers bound as the positional operands `{0}`, `{1}`, … (listed in
/// `$regs`), read and written, inside `$prefix {0, 1, …} $suffix`, plus the named `$operands`.
macro_rules! asm_on_tile {
    ($tile:ident, [$first:literal $(, $i:literal)*], $prefix:expr, $suffix:expr, [$($operands:tt)*]) => {
        asm!(concat!($prefix, "{{{", $first, "}", $(", {", $i, "}",)* "}}", $suffix),
             inout(reg32) $tile[$first], $(inout(reg32) $tile[$i],)*
             $($operands)* options(nostack))
    };
}

macro_rules! wgmma_tile {
    ($n:literal, $regs:literal, $list:tt) => {
        impl WgmmaTile for [f32; $regs] {
            const COLS: usize = $n;
            #[inline(always)]
            fn fence(&mut self) {
                // SAFETY: a fence; the registers are tied so that no access moves across it.
                unsafe { asm_on_tile!(self, $list, "wgmma.fence.sync.aligned; // ", "", []) }
            }
            #[inline(always)]
            fn wait<const PENDING: u32>(&mut self) {
                // SAFETY: a wait; the registers are only tied.
                unsafe {
                    asm_on_tile!(self, $list, "wgmma.wait_group.sync.aligned {n}; // ", "", [n = const PENDING,])
                }
            }
            #[inline(always)]
            unsafe fn mma_ss<E: WgmmaHalf, const TA: u32, const TB: u32>(&mut self, a: u64, b: u64, accumulate: bool) {
                let scale_d = accumulate as u32;
                if E::IS_BF16 {
                    asm_on_tile!(self, $list,
                        concat!("{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.bf16.bf16 "),
                        ", {a}, {b}, p, 1, 1, {ta}, {tb}; }}",
                        [sd = in(reg32) scale_d, a = in(reg64) a, b = in(reg64) b, ta = const TA, tb = const TB,])
                } else {
                    asm_on_tile!(self, $list,
                        concat!("{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.f16.f16 "),
                        ", {a}, {b}, p, 1, 1, {ta}, {tb}; }}",
                        [sd = in(reg32) scale_d, a = in(reg64) a, b = in(reg64) b, ta = const TA, tb = const TB,])
                }
            }
            #[inline(always)]
            unsafe fn mma_rs<E: WgmmaHalf, const TB: u32>(&mut self, a: [u32; 4], b: u64, accumulate: bool) {
                let scale_d = accumulate as u32;
                if E::IS_BF16 {
                    asm_on_tile!(self, $list,
                        concat!("{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.bf16.bf16 "),
                        ", {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1, {tb}; }}",
                        [sd = in(reg32) scale_d, a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2],
                         a3 = in(reg32) a[3], b = in(reg64) b, tb = const TB,])
                } else {
                    asm_on_tile!(self, $list,
                        concat!("{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.f16.f16 "),
                        ", {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1, {tb}; }}",
                        [sd = in(reg32) scale_d, a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2],
                         a3 = in(reg32) a[3], b = in(reg64) b, tb = const TB,])
                }
            }
        }
    };
}

wgmma_tile!(
    64,
    32,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
        28, 29, 30, 31
    ]
);
wgmma_tile!(
    128,
    64,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
        28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52,
        53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63
    ]
);
wgmma_tile!(
    256,
    128,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
        28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52,
        53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77,
        78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101,
        102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121,
        122, 123, 124, 125, 126, 127
    ]
);
