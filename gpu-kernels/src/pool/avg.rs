//! `avg_pool2d_f32` and its backward: the mean of each window of each NCHW plane, padding counted
//! as zeros in the divisor (`count_include_pad`, PyTorch's default: the divisor is always
//! `kh·kw`, since padding ≤ half the kernel keeps every window inside the padded input).
//!
//! Floor: as max pooling without the argmax: 2×2 stride 2 on (32, 64, 128, 128) moves 168 MB
//! (5 B per input element) → ~56 µs at 3.0 TB/s. The backward pass reads dy, writes dx.
//! Launch: `POOL_BLOCK` threads, one per output (forward) or input element (backward gather);
//! the 2×2 kernels one thread per pair of outputs with 16-byte loads (forward) or stores
//! (backward).
use super::{Pair, Window};
use crate::prelude::*;

/// Sum of `src[i·stride + j]` over rows `i` in `r0..r1` and columns `j` in `c0..c1`.
#[inline(always)]
unsafe fn rect_sum(
    src: *const f32,
    stride: usize,
    (r0, r1): (usize, usize),
    (c0, c1): (usize, usize),
) -> f32 {
    let mut sum = 0.0f32;
    for i in r0..r1 {
        for j in c0..c1 {
            sum += load_nc_f32(src.add(i * stride + j));
        }
    }
    sum
}

/// Mean of one window; one thread per output.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn avg_pool2d_f32(
    x: *const f32,
    y: *mut f32,
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
    let divisor = (kh * kw) as f32;
    for o in grid_stride(planes * oh * ow) {
        let (plane, rows, cols) = win.output_window(o);
        let sum = rect_sum(x.add(plane * h * w), w, (rows.start, rows.end), (cols.start, cols.end));
        store_f32(y.add(o), sum / divisor);
    }
}

/// 2×2 windows, stride 2, no padding, `w % 4 == 0`; one thread per pair of outputs.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn avg_pool2d_2x2_f32(
    x: *const f32,
    y: *mut f32,
    planes: usize,
    h: usize,
    w: usize,
) {
    for q in grid_stride(Pair::count(planes, h, w)) {
        let pair = Pair::of(q, h, w);
        let (a, b) = pair.load_rows(x, w);
        let lo = (a.0[0] + a.0[1] + b.0[0] + b.0[1]) * 0.25;
        let hi = (a.0[2] + a.0[3] + b.0[2] + b.0[3]) * 0.25;
        store_f32x2(y.add(pair.output), [lo, hi]);
    }
}

/// Gradient: each input element sums `dy / (kh·kw)` over the windows that contain it; one thread
/// per input element.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn avg_pool2d_bwd_f32(
    dy: *const f32,
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
    let divisor = (kh * kw) as f32;
    for e in grid_stride(planes * h * w) {
        let (plane, i, j) = win.input_coords(e);
        let (rows, cols) = win.covering_outputs(i, j);
        let sum = rect_sum(dy.add(plane * oh * ow), ow, rows, cols);
        store_f32(dx.add(e), sum / divisor);
    }
}

/// Gradient of the 2×2 stride-2 kernel (`w % 4 == 0`): one thread per pair of outputs writes its
/// two 2×4 input blocks (and, for odd `h`, zeros in the last input row).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn avg_pool2d_2x2_bwd_f32(
    dy: *const f32,
    dx: *mut f32,
    planes: usize,
    h: usize,
    w: usize,
) {
    for q in grid_stride(Pair::count(planes, h, w)) {
        let pair = Pair::of(q, h, w);
        let [g0, g1] = load_nc_f32x2(dy.add(pair.output));
        let v = F32x4([g0 * 0.25, g0 * 0.25, g1 * 0.25, g1 * 0.25]);
        pair.store_rows(dx, w, v, v);
    }
}
