//! `max_pool2d_f32` and its backward: the maximum of each window of each NCHW plane, with the
//! position of that maximum inside its window (row-major in the kernel window, a u8: windows of
//! at most 256 elements) for the backward pass. Padding counts as −∞; NaN wins (PyTorch's rule:
//! a later element replaces the maximum when it is greater or NaN).
//!
//! Floor: the forward pass reads the input once and writes outputs and argmax bytes; 2×2 stride 2
//! on (32, 64, 128, 128): 134 MB + 33.5 MB + 8.4 MB = 176 MB → ~59 µs at 3.0 TB/s (PyTorch's byte
//! count, 5 B per input element: 168 MB). The backward pass reads dy and argmax and writes dx.
//! Launch: `POOL_BLOCK` threads, one per output (forward) or per input element (backward gather,
//! no atomics); the 2×2 kernels take one thread per pair of outputs: two 16-byte loads (one per
//! input row), an 8-byte store of the pair and a 2-byte store of its argmax.
use super::{Pair, Window};
use crate::prelude::*;

/// Running maximum with PyTorch's update rule.
#[inline(always)]
fn take(best: &mut (f32, u8), v: f32, pos: u8) {
    if v > best.0 || v.is_nan() {
        *best = (v, pos);
    }
}

/// Max of one window over its valid (unpadded) part; one thread per output.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn max_pool2d_f32(
    x: *const f32,
    y: *mut f32,
    argmax: *mut u8,
    planes: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
) {
    let win = Window { h, w, oh, ow, kh, kw, sh, sw, ph, pw };
    for o in grid_stride(planes * oh * ow) {
        let (plane, rows, cols) = win.output_window(o);
        let src = x.add(plane * h * w);
        let mut best = (f32::NEG_INFINITY, (rows.offset * kw + cols.offset) as u8);
        for i in rows.start..rows.end {
            let row = src.add(i * w);
            let pos_row = (i - rows.start + rows.offset) * kw + cols.offset;
            for j in cols.start..cols.end {
                take(&mut best, load_nc_f32(row.add(j)), (pos_row + j - cols.start) as u8);
            }
        }
        store_f32(y.add(o), best.0);
        store_u8(argmax.add(o), best.1);
    }
}

/// 2×2 windows, stride 2, no padding, `w % 4 == 0` (so `ow = w / 2` is even); `oh = h / 2`.
/// One thread per pair of outputs.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn max_pool2d_2x2_f32(
    x: *const f32,
    y: *mut f32,
    argmax: *mut u8,
    planes: usize,
    h: usize,
    w: usize,
) {
    for q in grid_stride(Pair::count(planes, h, w)) {
        let pair = Pair::of(q, h, w);
        let (a, b) = pair.load_rows(x, w);
        let pool = |u: f32, v: f32, s: f32, t: f32| {
            let mut best = (u, 0u8);
            take(&mut best, v, 1);
            take(&mut best, s, 2);
            take(&mut best, t, 3);
            best
        };
        let lo = pool(a.0[0], a.0[1], b.0[0], b.0[1]);
        let hi = pool(a.0[2], a.0[3], b.0[2], b.0[3]);
        store_f32x2(y.add(pair.output), [lo.0, hi.0]);
        store_u16(argmax.add(pair.output).cast(), lo.1 as u16 | (hi.1 as u16) << 8);
    }
}

/// Gradient: each input element gathers `dy` of the windows whose argmax is it; one thread per
/// input element.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn max_pool2d_bwd_f32(
    dy: *const f32,
    argmax: *const u8,
    dx: *mut f32,
    planes: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
) {
    let win = Window { h, w, oh, ow, kh, kw, sh, sw, ph, pw };
    for e in grid_stride(planes * h * w) {
        let (plane, i, j) = win.input_coords(e);
        let ((r0, r1), (c0, c1)) = win.covering_outputs(i, j);
        let base = plane * oh * ow;
        let mut acc = 0.0f32;
        for r in r0..r1 {
            let pos_row = (i + ph - r * sh) * kw;
            for c in c0..c1 {
                let o = base + r * ow + c;
                if load_nc_u8(argmax.add(o)) as usize == pos_row + j + pw - c * sw {
                    acc += load_nc_f32(dy.add(o));
                }
            }
        }
        store_f32(dx.add(e), acc);
    }
}

/// Gradient of the 2×2 stride-2 kernel (`w % 4 == 0`): one thread per pair of outputs writes its
/// two 2×4 input blocks (and, for odd `h`, the last input row's zeros under the last output row).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn max_pool2d_2x2_bwd_f32(
    dy: *const f32,
    argmax: *const u8,
    dx: *mut f32,
    planes: usize,
    h: usize,
    w: usize,
) {
    for q in grid_stride(Pair::count(planes, h, w)) {
        let pair = Pair::of(q, h, w);
        let [g0, g1] = load_nc_f32x2(dy.add(pair.output));
        let a = load_nc_u16(argmax.add(pair.output).cast());
        let (a0, a1) = (a & 0xff, a >> 8);
        let pick = |g: f32, a: u16, pos: u16| if a == pos { g } else { 0.0 };
        let top = F32x4([pick(g0, a0, 0), pick(g0, a0, 1), pick(g1, a1, 0), pick(g1, a1, 1)]);
        let bottom = F32x4([pick(g0, a0, 2), pick(g0, a0, 3), pick(g1, a1, 2), pick(g1, a1, 3)]);
        pair.store_rows(dx, w, top, bottom);
    }
}
