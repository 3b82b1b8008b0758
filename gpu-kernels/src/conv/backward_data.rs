//! `conv2d_bwd_data_*`: `dx[n, c, h, w] = Σ_{k,r,s} dy[n, k, p, q] · w[k, c, r, s]` over the taps
//! with `h = p·sh − ph + r·dh`, `w = q·sw − pw + s·dw` (an implicit GEMM with M = N·H·W, N = C,
//! reduced over K·R·S; a tap whose output coordinate is fractional or outside reads zero, so
//! stride s wastes all but 1/s² of the reduction).
//!
//! Floor: 2·N·C·H·W·K·R·S / (sh·sw) useful flops, like the forward's; at stride 1 the same
//! ≥ 1.15 ms (f32) for the benchmark shape. Launch: see the module `conv`.
use super::{implicit_gemm_kernels, Geometry, ImplicitGemm, ZERO};
use crate::prelude::*;
use crate::shapes::FastDiv;

#[derive(Clone, Copy)]
pub(crate) struct BackwardData {
    dy: *const f32,
    w: *const f32,
    dx: *mut f32,
    g: Geometry,
    pq: u32,
    /// Divisions by H·W (rows to image and pixel), R·S and S (reduced index to output channel
    /// and tap, every k-step).
    hw: FastDiv,
    rs: FastDiv,
    s: FastDiv,
    stride: (FastDiv, FastDiv),
}

/// Four input pixels: their image's offset in dy and their padded coordinates.
#[derive(Clone, Copy)]
pub(crate) struct Pixels {
    valid: [bool; 4],
    image: [u32; 4],
    hp: [u32; 4],
    wp: [u32; 4],
}

impl BackwardData {
    #[inline(always)]
    fn new(dy: *const f32, w: *const f32, _bias: *const f32, dx: *mut f32, g: Geometry) -> Self {
        let (hw, rs, s) = (FastDiv::new(g.h * g.w), FastDiv::new(g.r * g.s), FastDiv::new(g.s));
        let stride = (FastDiv::new(g.stride.0), FastDiv::new(g.stride.1));
        BackwardData { dy, w, dx, g, pq: g.p * g.q, hw, rs, s, stride }
    }
}

/// The output coordinate `o` with `o·stride = padded − tap`, if it exists and is `< len`.
#[inline(always)]
pub(crate) fn source(padded: u32, tap: u32, stride: FastDiv, len: u32) -> Option<u32> {
    let d = padded.checked_sub(tap)?;
    let (o, rest) = stride.divmod(d);
    (rest == 0 && o < len).then_some(o)
}

impl ImplicitGemm for BackwardData {
    type Rows = Pixels;

    #[inline(always)]
    fn dims(&self) -> (usize, usize, usize) {
        ((self.g.n * self.hw.divisor) as usize, self.g.c as usize, (self.g.k * self.rs.divisor) as usize)
    }

    #[inline(always)]
    fn sources(&self) -> (*const f32, *const f32) {
        (self.dy, self.w)
    }

    #[inline(always)]
    fn rows(&self, m: u32) -> Pixels {
        let g = &self.g;
        let mut px = Pixels { valid: [false; 4], image: [0; 4], hp: [0; 4], wp: [0; 4] };
        unroll!(i in [0, 1, 2, 3] => {
            let row = m + i as u32;
            let (image, hw) = self.hw.divmod(row);
            px.valid[i] = image < g.n;
            px.image[i] = image * g.k * self.pq;
            px.hp[i] = hw / g.w + g.pad.0;
            px.wp[i] = hw % g.w + g.pad.1;
        });
        px
    }

    #[inline(always)]
    fn a(&self, px: &Pixels, k: u32) -> [u32; 4] {
        let g = &self.g;
        let (kk, rs) = self.rs.divmod(k);
        let (r, s) = self.s.divmod(rs);
        let (th, tw) = (r * g.dilation.0, s * g.dilation.1);
        let mut p = [ZERO; 4];
        unroll!(i in [0, 1, 2, 3] => {
            if px.valid[i] {
                if let (Some(oh), Some(ow)) =
                    (source(px.hp[i], th, self.stride.0, g.p), source(px.wp[i], tw, self.stride.1, g.q))
                {
                    p[i] = px.image[i] + kk * self.pq + oh * g.q + ow;
                }
            }
        });
        p
    }

    #[inline(always)]
    fn b(&self, k: u32, n: u32) -> [u32; 4] {
        let g = &self.g;
        let (mut kk, mut rs) = self.rs.divmod(k);
        let mut p = [ZERO; 4];
        unroll!(i in [0, 1, 2, 3] => {
            if n < g.c && kk < g.k {
                p[i] = (kk * g.c + n) * self.rs.divisor + rs;
            }
            rs += 1;
            if rs == self.rs.divisor {
                rs = 0;
                kk += 1;
            }
        });
        p
    }

    #[inline(always)]
    unsafe fn out(&self, m: u32, n: u32) -> *mut f32 {
        let (image, hw) = self.hw.divmod(m);
        let split = block_z() * (self.g.n * self.g.c * self.hw.divisor) as usize;
        self.dx.add(split + ((image * self.g.c + n) * self.hw.divisor + hw) as usize)
    }

    #[inline(always)]
    fn run(&self) -> u32 {
        self.hw.divisor
    }
}

implicit_gemm_kernels!(BackwardData: conv2d_bwd_data_f32_large, conv2d_bwd_data_f32_medium, conv2d_bwd_data_f32_small, conv2d_bwd_data_tf32);
