//! `conv2d_fwd_*`: `y[n, k, p, q] = bias[k] + Σ_{c,r,s} x[n, c, p·sh − ph + r·dh, q·sw − pw + s·dw] ·
//! w[k, c, r, s]`, an implicit GEMM with M = N·P·Q (rows: output pixels), N = K, reduced over
//! C·R·S; the bias is added as each output is stored. When even the small tiles leave SMs idle the
//! reduction is split over `gridDim.z` (partial sums to `y[z]`, bias added by the split sum).
//!
//! Floor: 2·N·K·P·Q·C·R·S flops: (32,64,128,128)⊛(128,64,3,3) is 77.3 GFLOP, ≥ 1.15 ms on the FP32
//! pipes (67 TFLOP/s), ≥ 0.16 ms at the TF32 dense peak (~495 TFLOP/s; `mma.sync` reaches about
//! half of it). Bytes (x 134 MB, y 268 MB) take ~0.13 ms at 3 TB/s and hide under the math.
//! Launch: see the module `conv`.
use super::{implicit_gemm_kernels, Geometry, ImplicitGemm, ZERO};
use crate::matmul::gemm_tf32::Operand;
use crate::prelude::*;
use crate::shapes::FastDiv;

#[derive(Clone, Copy)]
pub(crate) struct Forward {
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    y: *mut f32,
    g: Geometry,
    /// Divisions by P·Q (output pixels to image and plane position), R·S and S (reduced index
    /// to channel and tap, every k-step).
    pq: FastDiv,
    rs: FastDiv,
    s: FastDiv,
    crs: u32,
}

/// Four output pixels: their image's offset in x and the input coordinates of their (0, 0) tap.
#[derive(Clone, Copy)]
pub(crate) struct Pixels {
    valid: [bool; 4],
    image: [u32; 4],
    h0: [i32; 4],
    w0: [i32; 4],
}

impl Forward {
    #[inline(always)]
    fn new(x: *const f32, w: *const f32, bias: *const f32, y: *mut f32, g: Geometry) -> Self {
        let (pq, rs, s) = (FastDiv::new(g.p * g.q), FastDiv::new(g.r * g.s), FastDiv::new(g.s));
        Forward { x, w, bias, y, g, pq, rs, s, crs: g.c * g.r * g.s }
    }
}

impl ImplicitGemm for Forward {
    type Rows = Pixels;

    #[inline(always)]
    fn dims(&self) -> (usize, usize, usize) {
        ((self.g.n * self.pq.divisor) as usize, self.g.k as usize, self.crs as usize)
    }

    #[inline(always)]
    fn sources(&self) -> (*const f32, *const f32) {
        (self.x, self.w)
    }

    #[inline(always)]
    fn rows(&self, m: u32) -> Pixels {
        let g = &self.g;
        let mut px = Pixels { valid: [false; 4], image: [0; 4], h0: [0; 4], w0: [0; 4] };
        unroll!(i in [0, 1, 2, 3] => {
            let row = m + i as u32;
            let (image, pq) = self.pq.divmod(row);
            px.valid[i] = image < g.n;
            px.image[i] = image * g.c * g.h * g.w;
            px.h0[i] = (pq / g.q * g.stride.0) as i32 - g.pad.0 as i32;
            px.w0[i] = (pq % g.q * g.stride.1) as i32 - g.pad.1 as i32;
        });
        px
    }

    #[inline(always)]
    fn a(&self, px: &Pixels, k: u32) -> [u32; 4] {
        let g = &self.g;
        let (c, rs) = self.rs.divmod(k);
        let (r, s) = self.s.divmod(rs);
        let (dh, dw) = ((r * g.dilation.0) as i32, (s * g.dilation.1) as i32);
        let plane = c * g.h * g.w;
        let mut p = [ZERO; 4];
        unroll!(i in [0, 1, 2, 3] => {
            // A negative coordinate wraps to a huge one and fails the bound too.
            let (h, w) = ((px.h0[i] + dh) as u32, (px.w0[i] + dw) as u32);
            if px.valid[i] && h < g.h && w < g.w {
                p[i] = px.image[i] + plane + h * g.w + w;
            }
        });
        p
    }

    #[inline(always)]
    fn b(&self, k: u32, n: u32) -> [u32; 4] {
        let mut p = [ZERO; 4];
        unroll!(i in [0, 1, 2, 3] => {
            if n < self.g.k && k + (i as u32) < self.crs {
                p[i] = n * self.crs + k + i as u32;
            }
        });
        p
    }

    #[inline(always)]
    unsafe fn out(&self, m: u32, n: u32) -> *mut f32 {
        let (image, pq) = self.pq.divmod(m);
        let split = block_z() * (self.g.n * self.g.k * self.pq.divisor) as usize;
        self.y.add(split + ((image * self.g.k + n) * self.pq.divisor + pq) as usize)
    }

    #[inline(always)]
    fn run(&self) -> u32 {
        self.pq.divisor
    }

    #[inline(always)]
    fn bias(&self, n: u32) -> f32 {
        // SAFETY: bias, when present, holds K floats and n < K.
        if self.bias.is_null() {
            0.0
        } else {
            unsafe { load_nc_f32(self.bias.add(n as usize)) }
        }
    }

    #[inline(always)]
    fn dense_b(&self) -> Option<Operand> {
        let crs = self.crs as usize;
        Some(Operand {
            src: self.w,
            ld: crs,
            rows: self.g.k as usize,
            k: crs,
            k_contiguous: true,
            vector_ok: crs % 4 == 0 && self.w as usize % 16 == 0,
        })
    }
}

implicit_gemm_kernels!(Forward: conv2d_fwd_f32_large, conv2d_fwd_f32_medium, conv2d_fwd_f32_small, conv2d_fwd_tf32);
