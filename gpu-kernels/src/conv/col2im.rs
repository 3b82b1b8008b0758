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
//!
//! A block takes one row of dx (image, channel, y) and its threads walk the row's columns by
//! phase: thread `j` does columns `j·sw + b` for b = 0..sw. Neighbouring threads then share the
//! phase, so the same taps exist for all of them and their reads of a tap's row of cols are
//! consecutive (one 128-byte line a warp); in column order, neighbours alternated between tap
//! sets and read lines apart. The row's taps along y are the same for every thread.
//! Launch: grid `(N·C·H, 1, 1)`, block `CONV_COL2IM_BLOCK`.
use super::backward_data::source;
use crate::prelude::*;
use crate::shapes::FastDiv;

#[no_mangle]
pub unsafe extern "ptx-kernel" fn conv2d_col2im_f32(
    cols: *const f32,
    dx: *mut f32,
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
    let (rs, pq) = ((r * s) as u32, (p * q) as u32);
    let (w, s, q) = (w as u32, s as u32, q as u32);
    let (stride_h, stride_w) = (FastDiv::new(stride_h as u32), FastDiv::new(stride_w as u32));
    let row = block_x() as u32;
    // `plane` = image · C + channel, the row block of cols that feeds it.
    let (plane, y) = (row / h as u32, row % h as u32);
    let hp = y + pad_h as u32;
    let taps = cols.add((plane * rs * pq) as usize);
    let out = dx.add(row as usize * w as usize);
    let sw = stride_w.divisor;
    let mut j = thread_x() as u32;
    while j * sw < w {
        for b in 0..sw {
            let x = j * sw + b;
            if x >= w {
                break;
            }
            let wp = x + pad_w as u32;
            let mut acc = 0.0f32;
            for tr in 0..r as u32 {
                let Some(op) = source(hp, tr * dil_h as u32, stride_h, p as u32) else { continue };
                for ts in 0..s {
                    if let Some(oq) = source(wp, ts * dil_w as u32, stride_w, q) {
                        acc += load_nc_f32(taps.add(((tr * s + ts) * pq + op * q + oq) as usize));
                    }
                }
            }
            store_f32(out.add(x as usize), acc);
        }
        j += block_dim_x() as u32;
    }
}
