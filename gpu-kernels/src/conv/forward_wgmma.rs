//! The TF32 forward on Hopper (sm_90a module): an implicit GEMM on the `wgmma` GEMM's pipeline
//! (`matmul::gemm_wgmma`: persistent blocks, a TMA producer warpgroup, two consumers), whose
//! operands TMA reads straight from the convolution's tensors.
//!
//! | GEMM | convolution |
//! | --- | --- |
//! | M (tile rows) | output pixels: a tile is a box of `Nb × Pb × Qb` pixels (images × rows × columns, powers of two) |
//! | N (tile columns) | output channels K |
//! | k-steps | taps (r, s) × 32-channel pieces of C |
//! | A, K-major | x in NHWC: one 4-D TMA box (32 channels, Qb, Pb, Nb) at the tap's offset |
//! | B, K-major | w as `[K, R·S, C]`: one 3-D TMA box (32 channels, 1 tap, the tile's K) |
//!
//! TF32 `wgmma` reads both operands K-major only, so the host first transposes x from NCHW to
//! NHWC and w from `[K, C, R, S]` to `[K, R·S, C]`. TMA fills whatever lies outside the tensors
//! with zeros, which is the convolution's padding (negative or past-the-edge coordinates), the
//! channels past C, and the images past N; so any padding, dilation, C (a multiple of 4: NHWC rows
//! must be 16-byte multiples for TMA) and pixel count work at stride 1. Pixels of a box past the
//! output's P × Q are computed from real inputs and dropped at the store.
//!
//! f32 (`_f32x3`) runs as 3xTF32: the host splits x and w into their TF32 roundings and the
//! remainders (`transpose_split_f32`), and each k-step multiplies x_lo·w + x·w_lo + x·w (the
//! remainders' own product, below 2^-22 of the terms', dropped) into fresh accumulators, which
//! the consumers add to the sums in f32 (`Operands::PROMOTE`: the tensor cores truncate each
//! addition to their accumulators): f32 accuracy at three TF32 products' cost, in stages twice
//! the size, on the tiles with registers for both sets of sums (128×128 and 128×64).
//!
//! Floor: 2·N·K·P·Q·C·R·S flops at the H100's ~495 TFLOP/s dense TF32 (three times that for
//! f32); boxes that overhang the
//! output (Q = 56 in boxes of 64: 12.5%) spend their share of it for nothing.
//!
//! Epilogue: straight from registers, `out[n, k, p, q] = acc + bias[k]` (bias may be null): a
//! warp's store covers 8 consecutive pixels of 4 channels, four 32-byte runs.
//! Launch: as the `wgmma` GEMM (block `WGMMA_THREADS`, dynamic shared memory
//! `WGMMA_SHARED_BYTES`, a persistent grid of at most one block an SM, no clusters); `maps` holds
//! A's and B's tensor maps; m = boxes × tile rows, n = K, k = R·S·⌈C/32⌉·32.
use crate::matmul::gemm_wgmma::{for_each_pair, gemm, Operands, NO_STREAM_K};
use crate::prelude::*;
use crate::shapes::TensorMaps;

/// Channels per k-step: one 128-byte row of f32.
pub const CHANNELS: u32 = 32;

/// A forward convolution as the `wgmma` pipeline's operands (see the module documentation);
/// `SPLIT`: 3xTF32 (f32), with the low parts' maps after x's and w's.
#[derive(Clone, Copy)]
pub struct ForwardTaps<const SPLIT: bool> {
    /// k-steps per tap (⌈C / 32⌉) and taps per filter row (S).
    c_steps: u32,
    taps_s: u32,
    /// Dilation and padding, (height, width).
    dilation: (u32, u32),
    padding: (u32, u32),
    /// log2 of a pixel box's width Qb and height Pb; boxes along Q and along P of an image.
    box_shift: (u32, u32),
    boxes: (u32, u32),
    /// The output: images N, channels K, rows P, columns Q.
    out: (u32, u32, u32, u32),
}

/// Where the producer stands in a tile's k-steps: the tile's first pixel (n, p, q) and output
/// channel, the tap (r, s) and the 32-channel piece of C.
#[derive(Clone, Copy)]
pub struct ForwardWalk {
    pixel: (u32, u32, u32),
    k0: u32,
    r: u32,
    s: u32,
    c_step: u32,
}

impl<const SPLIT: bool> ForwardTaps<SPLIT> {
    /// The first output pixel (n, p, q) of box `tile` of a tile of `rows` pixels.
    #[inline(always)]
    fn pixel_origin(&self, tile: u32, rows: u32) -> (u32, u32, u32) {
        let (bq, bp) = self.boxes;
        let (qs, ps) = self.box_shift;
        let (tq, rest) = (tile % bq, tile / bq);
        let (tp, tn) = (rest % bp, rest / bp);
        ((tn * rows) >> (qs + ps), tp << ps, tq << qs)
    }
}

impl<const SPLIT: bool> Operands for ForwardTaps<SPLIT> {
    const CONV: bool = true;
    const STORES: bool = true;
    const SPLIT: bool = SPLIT;
    const PROMOTE: bool = SPLIT;
    type Walk = ForwardWalk;

    /// The tile's pixels and channels, at the tap and channels of k-step `first_step`.
    #[inline(always)]
    fn start(&self, _: usize, first_step: usize, (m0, n0, rows): (usize, usize, usize)) -> ForwardWalk {
        let pixel = self.pixel_origin((m0 / rows) as u32, rows as u32);
        let first = first_step as u32;
        let (tap, c_step) = (first / self.c_steps, first % self.c_steps);
        ForwardWalk { pixel, k0: n0 as u32, r: tap / self.taps_s, s: tap % self.taps_s, c_step }
    }

    /// A's box of x at the tap's offset from the tile's pixels; B's box of w at the tap; then
    /// the next 32 channels, or the next tap.
    #[inline(always)]
    unsafe fn load(&self, w: ForwardWalk, dst: (u32, u32, u32), maps: *const u8, bar: u32) -> ForwardWalk {
        let (map_a, map_b) = (maps, maps.add(128));
        let (n0, p0, q0) = w.pixel;
        let c0 = (w.c_step * CHANNELS) as i32;
        let q = (q0 + w.s * self.dilation.1) as i32 - self.padding.1 as i32;
        let p = (p0 + w.r * self.dilation.0) as i32 - self.padding.0 as i32;
        let tap = (w.r * self.taps_s + w.s) as i32;
        tma_load_4d(dst.0, map_a, bar, (c0, q, p, n0 as i32));
        tma_load_3d(dst.1, map_b, bar, (c0, tap, w.k0 as i32));
        if SPLIT {
            let lo = dst.2;
            tma_load_4d(dst.0 + lo, maps.add(256), bar, (c0, q, p, n0 as i32));
            tma_load_3d(dst.1 + lo, maps.add(384), bar, (c0, tap, w.k0 as i32));
        }
        let mut next = w;
        next.c_step += 1;
        if next.c_step == self.c_steps {
            next.c_step = 0;
            next.s += 1;
            if next.s == self.taps_s {
                next.s = 0;
                next.r += 1;
            }
        }
        next
    }

    /// `out[n, k, p, q] = acc + bias[k]` for the pixels inside the output.
    #[inline(always)]
    unsafe fn store<const TILE: usize>(
        &self,
        acc: &WgmmaAcc,
        (out, bias): (*mut f32, *const f32),
        origin: (usize, usize),
        (m0, rows, _): (usize, usize, usize),
    ) {
        let (n0, p0, q0) = self.pixel_origin((m0 / rows) as u32, rows as u32);
        let (qs, ps) = self.box_shift;
        let (images, channels, height, width) = self.out;
        let plane = (height * width) as usize;
        for_each_pair::<TILE>(acc, origin, |row, col, a0, a1| {
            let i = (row - m0) as u32;
            let (n, p, q) =
                (n0 + (i >> (qs + ps)), p0 + ((i >> qs) & ((1 << ps) - 1)), q0 + (i & ((1 << qs) - 1)));
            if n >= images || p >= height || q >= width {
                return;
            }
            let pixel = out.add(n as usize * channels as usize * plane + (p * width + q) as usize);
            for (k, a) in [(col, a0), (col + 1, a1)] {
                if k < channels as usize {
                    let b = if bias.is_null() { 0.0 } else { load_nc_f32(bias.add(k)) };
                    store_f32(pixel.add(k * plane), a + b);
                }
            }
        });
    }
}

macro_rules! conv_wgmma_kernels {
    ($($name:ident: $tile:literal, $split:literal;)*) => {$(
        /// Convolution forward at stride 1 on `wgmma`, TF32 or 3xTF32 (see the module
        /// documentation): `maps` holds x's NHWC map and w's `[K, R·S, C]` map (for 3xTF32, those
        /// of x's and w's rounded TF32 values, then of their low parts); `bias` may be null.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            _maps: TensorMaps, bias: *const f32, out: *mut f32, m: usize, n: usize, k: usize,
            c_steps: u32, taps_s: u32, dilation_h: u32, dilation_w: u32, padding_h: u32,
            padding_w: u32, box_q_shift: u32, box_p_shift: u32, boxes_q: u32, boxes_p: u32,
            images: u32, channels: u32, rows: u32, cols: u32,
        ) {
            let taps = ForwardTaps::<$split> {
                c_steps,
                taps_s,
                dilation: (dilation_h, dilation_w),
                padding: (padding_h, padding_w),
                box_shift: (box_q_shift, box_p_shift),
                boxes: (boxes_q, boxes_p),
                out: (images, channels, rows, cols),
            };
            let none = core::ptr::null::<f32>();
            let maps = kernel_param_address!($name, 0);
            gemm::<Tf32, false, true, $tile, ForwardTaps<$split>>(
                maps, (none, bias, out), (m, n, k), 0, (1.0, 0.0, 0), (0, 0),
                (k.div_ceil(CHANNELS as usize), core::ptr::null_mut()), (1, false, 1), NO_STREAM_K, taps,
            )
        }
    )*};
}

conv_wgmma_kernels! {
    conv2d_fwd_wgmma_tf32: 0, false;
    conv2d_fwd_wgmma_tf32_256x128: 1, false;
    conv2d_fwd_wgmma_tf32_128x64: 3, false;
    conv2d_fwd_wgmma_f32x3_128x128: 4, true;
    conv2d_fwd_wgmma_f32x3_128x64: 3, true;
}
