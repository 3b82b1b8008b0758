//! The TF32 weight gradient on Hopper (sm_90a module): for each tap (r, s) of the filter, a GEMM
//! over the output pixels on the `wgmma` GEMM's pipeline (`matmul::gemm_wgmma`), whose operands
//! TMA reads straight from dy and x in NCHW: their rows are already pixel-contiguous, the K-major
//! layout TF32 `wgmma` needs when the reduction runs over pixels.
//!
//! Exact f32 (`_f32x3_*`, the 128×128 and 128×64 tiles) is 3xTF32 with promoted sums, as the
//! forward's, but the low parts of dy and x are made in shared memory by the producer
//! warpgroup from each k-step's pieces (`Operands::SPLIT_HERE`): a copy of them in global memory
//! would double what crosses L2 (the TF32 kernel is bound there, every tap reading dy again)
//! and cost a splitting pass over dy and x first.
//!
//! | GEMM | convolution |
//! | --- | --- |
//! | M (tile rows) | output channels K |
//! | N (tile columns) | input channels C |
//! | batch | taps (r, s), each split into `slices` parts of its reduction (split-K) |
//! | k-steps | images × output rows × 32-column pieces of a row |
//! | A, K-major | dy: one 4-D TMA box (32 columns, 1 row, the tile's K, 1 image) |
//! | B, K-major | x: one 4-D TMA box (32 columns, 1 row, the tile's C, 1 image) at the tap's offset |
//!
//! TMA fills with zeros whatever lies outside the tensors: the padding (negative or past-the-edge
//! coordinates of x), the columns past Q of dy (so x's values there count for nothing) and the
//! channels past K or C; so any padding, dilation, K and C work at stride 1, with W and Q
//! multiples of 4 (rows of 16-byte multiples for TMA). A TMA box starts only on a 16-byte
//! boundary of its row, and a tap shifts x's columns by `s·dilation − padding`: shifts that are
//! not multiples of 4 read copies of x whose rows start 1, 2 or 3 columns later
//! (`conv2d_shift_rows_f32`), so `maps` holds dy's map, x's, then those of the three copies
//! (x's again in place of a copy no tap needs). Layer z = tap · slices + slice writes its
//! raw sums `[K, C]` to the workspace `ws[z]` (without a split, straight to `out[tap]`); the host
//! adds the slices in order (`gemm_reduce_f32`) and transposes `[R·S, K·C]` to `[K, C, R, S]`.
//!
//! Floor: 2·N·K·P·Q·C·R·S flops at the H100's ~495 TFLOP/s dense TF32 (3xTF32: three times
//! those); rows of Q = 56 in 32-column pieces spend an eighth of it on the zeros past Q.
//! Launch: as the `wgmma` GEMM (block `WGMMA_THREADS`, dynamic shared memory `WGMMA_SHARED_BYTES`,
//! a persistent grid of at most one block an SM, no clusters); `maps` holds the five tensor maps
//! above; m = K, n = C, k = the k-steps × 32, `k_steps` per slice, `layers` = R·S · slices.
use super::forward_wgmma::CHANNELS as COLUMNS;
use crate::matmul::gemm_wgmma::{gemm, Operands, NO_STREAM_K};
use crate::prelude::*;
use crate::shapes::TensorMaps;

/// A weight gradient as the `wgmma` pipeline's operands (see the module documentation);
/// `SPLIT`: exact f32 as 3xTF32, the low parts made in shared memory.
#[derive(Clone, Copy)]
pub struct WeightTaps<const SPLIT: bool> {
    /// 32-column pieces of an output row (⌈Q / 32⌉), output rows P, taps per filter row S.
    q_steps: u32,
    rows: u32,
    taps_s: u32,
    /// Dilation and padding, (height, width).
    dilation: (u32, u32),
    padding: (u32, u32),
}

/// Where the producer stands in a unit's k-steps: the tap (r, s), the tile's first output and
/// input channel, and the image, output row and 32-column piece.
#[derive(Clone, Copy)]
pub struct WeightWalk {
    r: u32,
    s: u32,
    k0: u32,
    c0: u32,
    n: u32,
    p: u32,
    q_step: u32,
}

impl<const SPLIT: bool> Operands for WeightTaps<SPLIT> {
    const CONV: bool = true;
    const STORES: bool = false;
    /// dy's, then x's and its three shifted copies' (see the module documentation).
    const SPLIT: bool = SPLIT;
    const PROMOTE: bool = SPLIT;
    const SPLIT_HERE: bool = SPLIT;
    type Walk = WeightWalk;

    #[inline(always)]
    fn start(&self, tap: usize, first_step: usize, (m0, n0, _): (usize, usize, usize)) -> WeightWalk {
        let (tap, first) = (tap as u32, first_step as u32);
        let (q_step, row) = (first % self.q_steps, first / self.q_steps);
        WeightWalk {
            r: tap / self.taps_s,
            s: tap % self.taps_s,
            k0: m0 as u32,
            c0: n0 as u32,
            n: row / self.rows,
            p: row % self.rows,
            q_step,
        }
    }

    /// dy's box at the piece; x's box at the piece shifted by the tap (a shift of 4a + b, b > 0,
    /// from shifted copy b at 4(a + 1): TMA boxes start on 16-byte boundaries); then the next
    /// piece, row or image.
    #[inline(always)]
    unsafe fn load(&self, w: WeightWalk, dst: (u32, u32, u32), maps: *const u8, bar: u32) -> WeightWalk {
        let q0 = (w.q_step * COLUMNS) as i32;
        tma_load_4d(dst.0, maps, bar, (q0, w.p as i32, w.k0 as i32, w.n as i32));
        let shift = (w.s * self.dilation.1) as i32 - self.padding.1 as i32;
        let residue = shift & 3;
        let q = if residue == 0 { q0 + shift } else { q0 + shift - residue + 4 };
        let p = (w.p + w.r * self.dilation.0) as i32 - self.padding.0 as i32;
        let map_x = maps.add(128 * (1 + residue as usize));
        tma_load_4d(dst.1, map_x, bar, (q, p, w.c0 as i32, w.n as i32));
        let mut next = w;
        next.q_step += 1;
        if next.q_step == self.q_steps {
            next.q_step = 0;
            next.p += 1;
            if next.p == self.rows {
                next.p = 0;
                next.n += 1;
            }
        }
        next
    }
}

macro_rules! conv_wgmma_weight_kernels {
    ($($name:ident: $tile:literal, $split:literal;)*) => {$(
        /// TF32 (or exact f32 as 3xTF32) weight gradient at stride 1 on `wgmma` (see the module
        /// documentation): `maps` holds dy's map, x's and its shifted copies'; `ws` is null
        /// without a split (then `out` gets `[R·S, K, C]`).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            _maps: TensorMaps, out: *mut f32, ws: *mut f32, m: usize, n: usize, k: usize,
            k_steps: usize, layers: usize, q_steps: u32, rows: u32, taps_s: u32, dilation_h: u32,
            dilation_w: u32, padding_h: u32, padding_w: u32,
        ) {
            let taps = WeightTaps {
                q_steps,
                rows,
                taps_s,
                dilation: (dilation_h, dilation_w),
                padding: (padding_h, padding_w),
            };
            let none = core::ptr::null::<f32>();
            let maps = kernel_param_address!($name, 0);
            gemm::<Tf32, false, true, $tile, WeightTaps<$split>>(
                maps, (none, none, out), (m, n, k), 0, (1.0, 0.0, 0), (0, 0), (k_steps, ws),
                (layers, false, 1), NO_STREAM_K, taps,
            )
        }
    )*};
}

conv_wgmma_weight_kernels! {
    conv2d_bwd_weight_wgmma_tf32: 0, false;
    conv2d_bwd_weight_wgmma_tf32_256x128: 1, false;
    conv2d_bwd_weight_wgmma_tf32_128x64: 3, false;
    conv2d_bwd_weight_wgmma_f32x3_128x128: 4, true;
    conv2d_bwd_weight_wgmma_f32x3_128x64: 3, true;
}
