//! `conv2d_bwd_weight_*`: `dw[k, c, r, s] = Σ_{n,p,q} dy[n, k, p, q] · x[n, c, p·sh − ph + r·dh,
//! q·sw − pw + s·dw]`, an implicit GEMM with M = C·R·S (rows: filter taps), N = K, reduced over
//! N·P·Q. The reduction is long and the output small, so it is split over `gridDim.z` (partial
//! sums `[splits, K, C·R·S]`, added by `conv2d_split_sum_f32`). One split writes dw directly.
//!
//! Floor: 2·N·K·P·Q·C·R·S flops, as the forward (≥ 1.15 ms f32 for the benchmark shape); the
//! partial sums are splits × K·C·R·S floats, noise beside x and dy.
//! Launch: see the module `conv`; grid z = splits, `k_chunk` a multiple of `MMA_BK`.
use super::{implicit_gemm_kernels, Geometry, ImplicitGemm, ZERO};
use crate::prelude::*;
use crate::shapes::FastDiv;

#[derive(Clone, Copy)]
pub(crate) struct BackwardWeight {
    x: *const f32,
    dy: *const f32,
    out: *mut f32,
    g: Geometry,
    /// Divisions by P·Q and Q (reduced index to image and output pixel, every k-step) and R·S.
    pq: FastDiv,
    q: FastDiv,
    rs: FastDiv,
    crs: u32,
}

/// Four filter taps: their channel's offset in an image of x, and their offsets from an output
/// pixel's scaled coordinates.
#[derive(Clone, Copy)]
pub(crate) struct Taps {
    valid: [bool; 4],
    plane: [u32; 4],
    dh: [i32; 4],
    dw: [i32; 4],
}

impl BackwardWeight {
    #[inline(always)]
    fn new(x: *const f32, dy: *const f32, _bias: *const f32, out: *mut f32, g: Geometry) -> Self {
        let (pq, q, rs) = (FastDiv::new(g.p * g.q), FastDiv::new(g.q), FastDiv::new(g.r * g.s));
        BackwardWeight { x, dy, out, g, pq, q, rs, crs: g.c * g.r * g.s }
    }
}

impl ImplicitGemm for BackwardWeight {
    type Rows = Taps;

    #[inline(always)]
    fn dims(&self) -> (usize, usize, usize) {
        (self.crs as usize, self.g.k as usize, (self.g.n * self.pq.divisor) as usize)
    }

    #[inline(always)]
    fn sources(&self) -> (*const f32, *const f32) {
        (self.x, self.dy)
    }

    #[inline(always)]
    fn rows(&self, m: u32) -> Taps {
        let g = &self.g;
        let mut taps = Taps { valid: [false; 4], plane: [0; 4], dh: [0; 4], dw: [0; 4] };
        unroll!(i in [0, 1, 2, 3] => {
            let row = m + i as u32;
            let (c, rs) = self.rs.divmod(row);
            taps.valid[i] = c < g.c;
            taps.plane[i] = c * g.h * g.w;
            taps.dh[i] = (rs / g.s * g.dilation.0) as i32 - g.pad.0 as i32;
            taps.dw[i] = (rs % g.s * g.dilation.1) as i32 - g.pad.1 as i32;
        });
        taps
    }

    #[inline(always)]
    fn a(&self, taps: &Taps, k: u32) -> [u32; 4] {
        let g = &self.g;
        let (image, pq) = self.pq.divmod(k);
        let (p, q) = self.q.divmod(pq);
        let (h0, w0) = ((p * g.stride.0) as i32, (q * g.stride.1) as i32);
        let origin = image * g.c * g.h * g.w;
        let mut p = [ZERO; 4];
        unroll!(i in [0, 1, 2, 3] => {
            // A negative coordinate wraps to a huge one and fails the bound too.
            let (h, w) = ((h0 + taps.dh[i]) as u32, (w0 + taps.dw[i]) as u32);
            if taps.valid[i] && h < g.h && w < g.w {
                p[i] = origin + taps.plane[i] + h * g.w + w;
            }
        });
        p
    }

    #[inline(always)]
    fn b(&self, k: u32, n: u32) -> [u32; 4] {
        let g = &self.g;
        let (mut image, mut pq) = self.pq.divmod(k);
        let mut p = [ZERO; 4];
        unroll!(i in [0, 1, 2, 3] => {
            if n < g.k && image < g.n {
                p[i] = (image * g.k + n) * self.pq.divisor + pq;
            }
            pq += 1;
            if pq == self.pq.divisor {
                pq = 0;
                image += 1;
            }
        });
        p
    }

    #[inline(always)]
    unsafe fn out(&self, m: u32, n: u32) -> *mut f32 {
        let split = block_z() * (self.g.k * self.crs) as usize;
        self.out.add(split + (n * self.crs + m) as usize)
    }

    #[inline(always)]
    fn run(&self) -> u32 {
        self.crs
    }
}

implicit_gemm_kernels!(BackwardWeight: conv2d_bwd_weight_f32_large, conv2d_bwd_weight_f32_medium, conv2d_bwd_weight_f32_small, conv2d_bwd_weight_tf32);

/// `out[i] = Σ_z partial[z·len + i] + bias[i / plane % channels]`, z in order (deterministic);
/// `bias` may be null. Grid-stride over `len`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn conv2d_split_sum_f32(
    partial: *const f32,
    bias: *const f32,
    out: *mut f32,
    len: usize,
    splits: usize,
    plane: usize,
    channels: usize,
) {
    for i in grid_stride(len) {
        let mut total = 0.0f32;
        for z in 0..splits {
            total += load_nc_f32(partial.add(z * len + i));
        }
        if !bias.is_null() {
            total += load_nc_f32(bias.add(i / plane % channels));
        }
        store_f32(out.add(i), total);
    }
}
