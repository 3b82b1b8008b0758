//! `conv2d_col2im_f32`: `dx[n, c, h, w] = Σ_{r,s} cols[n, (c·R + r)·S + s, p, q]` over the taps
//! with `h = p·sh − ph + r·dh`, `w = q·sw − pw + s·dw`: the second half of the backward data
//! gradient when it runs as `cols = Wᵀ · dy` (a plain batched GEMM) and this gather. That form
//! does only the taps that exist, where the implicit GEMM spends a product on every tap (all but
//! 1/(sh·sw) of them zero under a stride) and pads C to its tile width (64 or 128): ResNet's stem
//! (C = 3, stride 2) wastes over 99% there. Each dx element sums its taps in a fixed order
//! (deterministic, no atomics); neighbouring threads read neighbouring q.
//!
//! Floor: cols read once (N·C·R·S·P·Q floats) and dx written once; the stem's gradient
//! (32, 3, 224, 224) ⊛ 7×7 / 2 reads 236 MB: ~80 µs at 3 TB/s.
//! Launch: grid-stride over the N·C·H·W elements of dx, `ELEMENTWISE_BLOCK` threads.
use super::backward_data::source;
use crate::prelude::*;

#[no_mangle]
pub unsafe extern "ptx-kernel" fn conv2d_col2im_f32(
    cols: *const f32,
    dx: *mut f32,
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    r: usize,
    s: usize,
    p: usize,
    q: usize,
    stride_h: usize,
    stride_w: usize,
    pad_h: usize,
    pad_w: usize,
    dil_h: usize,
    dil_w: usize,
) {
    let (hw, rs, pq) = ((h * w) as u32, (r * s) as u32, (p * q) as u32);
    for i in grid_stride(n * c * h * w) {
        let i = i as u32;
        // `plane` = image · C + channel, the row block of cols that feeds it.
        let (plane, pixel) = (i / hw, i % hw);
        let (hp, wp) = (pixel / w as u32 + pad_h as u32, pixel % w as u32 + pad_w as u32);
        let taps = cols.add((plane * rs * pq) as usize);
        let mut acc = 0.0f32;
        for tr in 0..r as u32 {
            let Some(op) = source(hp, tr * dil_h as u32, stride_h as u32, p as u32) else { continue };
            for ts in 0..s as u32 {
                if let Some(oq) = source(wp, ts * dil_w as u32, stride_w as u32, q as u32) {
                    acc += load_nc_f32(taps.add(((tr * s as u32 + ts) * pq + op * q as u32 + oq) as usize));
                }
            }
        }
        store_f32(dx.add(i as usize), acc);
    }
}
