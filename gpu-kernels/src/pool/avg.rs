//! `avg_pool2d_f32` and its backward: the mean of each window of each NCHW plane, padding counted
//! as zeros in the divisor (`count_include_pad`, PyTorch's default: the divisor is always
//! `kh·kw`, since padding ≤ half the kernel keeps every window inside the padded input).
//!
//! Floor: as max pooling without the argmax: 2×2 stride 2 on (32, 64, 128, 128) moves 168 MB
//! (5 B per input element) → ~56 µs at 3.0 TB/s. The backward pass reads dy, writes dx.
//! Launch: `POOL_BLOCK` threads, one per output (forward) or input element (backward gather);
//! the 2×2 kernels one thread per pair of outputs with 16-byte loads (forward) or stores
//! (backward).
use super::Window;
use crate::prelude::*;

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
        let (plane, r, c) = win.output_coords(o);
        let (r0, r1, _) = Window::valid(r, ph, kh, sh, h);
        let (c0, c1, _) = Window::valid(c, pw, kw, sw, w);
        let src = x.add(plane * h * w);
        let mut sum = 0.0f32;
        for i in r0..r1 {
            for j in c0..c1 {
                sum += load_nc_f32(src.add(i * w + j));
            }
        }
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
    let (oh, pairs) = (h / 2, w / 4);
    for q in grid_stride(planes * oh * pairs) {
        let (t, p) = (q / pairs, q % pairs);
        let (plane, r) = (t / oh, t % oh);
        let top = x.add((plane * h + 2 * r) * w + 4 * p);
        let (a, b) = (load_nc_f32x4(top), load_nc_f32x4(top.add(w)));
        let lo = (a.0[0] + a.0[1] + b.0[0] + b.0[1]) * 0.25;
        let hi = (a.0[2] + a.0[3] + b.0[2] + b.0[3]) * 0.25;
        store_f32x2(y.add(t * (w / 2) + 2 * p), [lo, hi]);
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
    let divisor = (kh * kw) as f32;
    for e in grid_stride(planes * h * w) {
        let (t, j) = (e / w, e % w);
        let (plane, i) = (t / h, t % h);
        let (r0, r1) = Window::covering(i, ph, kh, sh, oh);
        let (c0, c1) = Window::covering(j, pw, kw, sw, ow);
        let src = dy.add(plane * oh * ow);
        let mut sum = 0.0f32;
        for r in r0..r1 {
            for c in c0..c1 {
                sum += load_nc_f32(src.add(r * ow + c));
            }
        }
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
    let (oh, pairs) = (h / 2, w / 4);
    for q in grid_stride(planes * oh * pairs) {
        let (t, p) = (q / pairs, q % pairs);
        let (plane, r) = (t / oh, t % oh);
        let [g0, g1] = load_nc_f32x2(dy.add(t * (w / 2) + 2 * p));
        let v = F32x4([g0 * 0.25, g0 * 0.25, g1 * 0.25, g1 * 0.25]);
        let top = dx.add((plane * h + 2 * r) * w + 4 * p);
        store_f32x4(top, v);
        store_f32x4(top.add(w), v);
        if h % 2 == 1 && r + 1 == oh {
            store_f32x4(top.add(2 * w), F32x4([0.0; 4]));
        }
    }
}
