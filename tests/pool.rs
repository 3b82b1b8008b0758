//! 2-D pooling on the GPU against the CPU backend (f64), backward passes against finite
//! differences of an f64 reference at small sizes, NaN propagation, and typed errors.
mod common;
use common::*;
use ferrocuda::{
    avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward, Context, Error, Pool2dParams, Tensor,
};

const TOL: f64 = 1e-5;

/// Odd shapes (batch 1, 3 channels, 7×13, 1×1), the 16-byte 2×2 path (W % 4 == 0, even and odd
/// H), overlapping and non-square windows, and two of more than 2^20 elements (2×2 path and
/// general path).
fn cases() -> Vec<(Vec<usize>, Pool2dParams)> {
    let p = Pool2dParams::new;
    let mut v = vec![
        (vec![1, 3, 7, 13], p(3).stride(2).padding(1)),
        (vec![1, 3, 7, 13], p(2)),
        (vec![2, 3, 8, 16], p(2)),
        (vec![2, 3, 9, 12], p(2)),
        (vec![1, 1, 1, 1], p(1)),
        (vec![2, 3, 1, 1], p(2).padding(1)),
        (vec![1, 2, 5, 5], p(3).stride(1).padding(1)),
        (vec![2, 3, 11, 17], Pool2dParams { kernel: (3, 5), stride: (2, 3), padding: (1, 2) }),
        (vec![3, 1, 6, 7], p(16).padding(8).stride(1)),
    ];
    if under_sanitizer() {
        v.push((vec![1, 2, 64, 68], p(2)));
    } else {
        v.push((vec![4, 16, 128, 128], p(2)));
        v.push((vec![2, 8, 255, 257], p(3).stride(2).padding(1)));
    }
    v
}

fn seeded(gpu: &Context, shape: &[usize], seed: u64) -> (Tensor, Tensor) {
    let n: usize = shape.iter().product();
    pair(gpu, &randn_host(n, seed), shape)
}

fn max_pool_matches_cpu(gpu: &Context) {
    for (s, (shape, p)) in cases().into_iter().enumerate() {
        let (xg, xc) = seeded(gpu, &shape, 3000 + s as u64);
        let (yc, sc) = max_pool2d(&xc, p).unwrap();
        poison_pool(gpu, yc.shape());
        let (yg, sg) = max_pool2d(&xg, p).unwrap();
        assert_eq!(yg.shape(), yc.shape());
        let what = format!("max_pool2d {shape:?} {p:?}");
        assert_eq!(yg.to_vec().unwrap(), yc.to_vec().unwrap(), "{what}: values");
        assert_eq!(sg.argmax().unwrap(), sc.argmax().unwrap(), "{what}: argmax");
        assert_eq!(sg.input_shape().as_slice(), shape.as_slice());
        let (dg, dc) = seeded(gpu, yc.shape(), 3100 + s as u64);
        poison_pool(gpu, &shape);
        let bg = max_pool2d_backward(&dg, &sg).unwrap();
        let bc = max_pool2d_backward(&dc, &sc).unwrap();
        assert_close(&format!("{what} backward"), &bg.to_vec().unwrap(), &bc.to_vec().unwrap(), TOL);
    }
}

fn avg_pool_matches_cpu(gpu: &Context) {
    for (s, (shape, p)) in cases().into_iter().enumerate() {
        let (xg, xc) = seeded(gpu, &shape, 3200 + s as u64);
        let yc = avg_pool2d(&xc, p).unwrap();
        poison_pool(gpu, yc.shape());
        let yg = avg_pool2d(&xg, p).unwrap();
        let what = format!("avg_pool2d {shape:?} {p:?}");
        assert_close(&what, &yg.to_vec().unwrap(), &yc.to_vec().unwrap(), TOL);
        let (dg, dc) = seeded(gpu, yc.shape(), 3300 + s as u64);
        poison_pool(gpu, &shape);
        let bg = avg_pool2d_backward(&dg, &shape, p).unwrap();
        let bc = avg_pool2d_backward(&dc, &shape, p).unwrap();
        assert_close(&format!("{what} backward"), &bg.to_vec().unwrap(), &bc.to_vec().unwrap(), TOL);
    }
}

/// f64 pooling of one `[1, 1, h, w]` plane: max (padding −∞) or mean (divisor kh·kw).
fn pool64(x: &[f64], h: usize, w: usize, p: Pool2dParams, max: bool) -> Vec<f64> {
    let ((kh, kw), (sh, sw), (ph, pw)) = (p.kernel, p.stride, p.padding);
    let (oh, ow) = ((h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1);
    let mut out = Vec::new();
    for r in 0..oh {
        for c in 0..ow {
            let mut acc = if max { f64::NEG_INFINITY } else { 0.0 };
            for i in 0..kh {
                for j in 0..kw {
                    let (ih, iw) = ((r * sh + i) as isize - ph as isize, (c * sw + j) as isize - pw as isize);
                    if ih >= 0 && iw >= 0 && (ih as usize) < h && (iw as usize) < w {
                        let e = x[ih as usize * w + iw as usize];
                        acc = if max { acc.max(e) } else { acc + e };
                    }
                }
            }
            out.push(if max { acc } else { acc / (kh * kw) as f64 });
        }
    }
    out
}

fn gradients_match_finite_differences(ctx: &Context) {
    let p = Pool2dParams::new;
    for (s, (h, w, params)) in
        [(5, 7, p(3).stride(2).padding(1)), (4, 8, p(2)), (5, 6, p(2).stride(1))].into_iter().enumerate()
    {
        let x = randn_host(h * w, 3400 + s as u64);
        let xt = ctx.from_slice(&x, &[1, 1, h, w]).unwrap();
        let (y, saved) = max_pool2d(&xt, params).unwrap();
        let wv = randn_host(y.len(), 3500 + s as u64);
        let wt = ctx.from_slice(&wv, y.shape()).unwrap();
        let dmax = max_pool2d_backward(&wt, &saved).unwrap().to_vec().unwrap();
        let davg = avg_pool2d_backward(&wt, &[1, 1, h, w], params).unwrap().to_vec().unwrap();
        let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let step = 1e-6;
        for (max, got) in [(true, &dmax), (false, &davg)] {
            let loss = |d: f64, i: usize| {
                let mut xs = x64.clone();
                xs[i] += d;
                pool64(&xs, h, w, params, max).iter().zip(&wv).map(|(a, &b)| a * b as f64).sum::<f64>()
            };
            for (i, &g) in got.iter().enumerate() {
                let numeric = (loss(step, i) - loss(-step, i)) / (2.0 * step);
                assert!(
                    (g as f64 - numeric).abs() < 1e-4 * (1.0 + numeric.abs()),
                    "{} {h}x{w} {params:?} dx[{i}]: {g} vs {numeric}",
                    if max { "max" } else { "avg" },
                );
            }
        }
    }
}

fn gpu_gradients_match_finite_differences(gpu: &Context) {
    gradients_match_finite_differences(gpu);
}

fn cpu_gradients_match_finite_differences() {
    gradients_match_finite_differences(&Context::cpu());
}

/// NaN wins its window (and takes the gradient); −∞ inputs keep the first valid position.
fn nan_propagates_on(ctx: &Context) {
    for (w, p) in [(4, Pool2dParams::new(2)), (6, Pool2dParams::new(3).stride(3).padding(1))] {
        let mut x: Vec<f32> = (0..2 * w).map(|i| i as f32).collect();
        x[1] = f32::NAN;
        x[w + 1] = f32::NAN;
        let (y, saved) = max_pool2d(&ctx.from_slice(&x, &[1, 1, 2, w]).unwrap(), p).unwrap();
        let y = y.to_vec().unwrap();
        assert!(y[0].is_nan(), "{y:?}");
        assert!(y[1..].iter().all(|v| !v.is_nan()), "{y:?}");
        let dy = ctx.full(&[1, 1, 1, y.len()], 1.0).unwrap();
        let dx = max_pool2d_backward(&dy, &saved).unwrap().to_vec().unwrap();
        // PyTorch's rule: the last NaN of the window takes the gradient.
        assert_eq!(dx[w + 1], 1.0, "{dx:?}");
        assert_eq!(dx[1], 0.0, "{dx:?}");
    }
    let x = ctx.full(&[1, 1, 3, 3], f32::NEG_INFINITY).unwrap();
    let (y, saved) = max_pool2d(&x, Pool2dParams::new(2).padding(1)).unwrap();
    assert!(y.to_vec().unwrap().iter().all(|&v| v == f32::NEG_INFINITY));
    // Window (0, 0) holds only input (0, 0), at position 3 of the 2×2 kernel window.
    assert_eq!(saved.argmax().unwrap()[0], 3);
}

fn gpu_nan_propagates(gpu: &Context) {
    nan_propagates_on(gpu);
}

fn cpu_nan_propagates() {
    nan_propagates_on(&Context::cpu());
}

fn bad_input_on(ctx: &Context) {
    let x = ctx.zeros(&[2, 3, 7, 13]).unwrap();
    let invalid = |r: ferrocuda::Result<Tensor>, op: &str, needle: &str| {
        let err = r.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { op: o, .. } if *o == op)
                && err.to_string().contains(needle),
            "{err}"
        );
    };
    let p = Pool2dParams::new;
    invalid(avg_pool2d(&ctx.zeros(&[3, 7, 13]).unwrap(), p(2)), "avg_pool2d", "rank 3");
    invalid(max_pool2d(&ctx.zeros(&[3, 7, 13]).unwrap(), p(2)).map(|r| r.0), "max_pool2d", "rank 3");
    invalid(avg_pool2d(&x, p(2).stride(0)), "avg_pool2d", "positive");
    invalid(avg_pool2d(&x, p(0)), "avg_pool2d", "positive");
    invalid(max_pool2d(&x, p(3).padding(2)).map(|r| r.0), "max_pool2d", "exceeds half");
    invalid(avg_pool2d(&x, p(8)), "avg_pool2d", "larger than the padded input");
    invalid(
        max_pool2d(&ctx.zeros(&[1, 1, 20, 20]).unwrap(), p(17)).map(|r| r.0),
        "max_pool2d",
        "more than 256",
    );
    invalid(avg_pool2d(&ctx.zeros(&[1, 1, 0, 4]).unwrap(), p(1)), "avg_pool2d", "empty");
    let err = avg_pool2d(&x, p(8)).unwrap_err();
    assert!(err.to_string().contains("[2, 3, 7, 13]"), "{err}");
    let (y, saved) = max_pool2d(&x, p(2)).unwrap();
    assert_eq!(y.shape(), [2, 3, 3, 6]);
    let err = max_pool2d_backward(&ctx.zeros(&[2, 3, 3, 7]).unwrap(), &saved).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "max_pool2d_backward", lhs, rhs } if lhs == &[2, 3, 3, 7] && rhs == &[2, 3, 3, 6]),
        "{err}"
    );
    let err = avg_pool2d_backward(&ctx.zeros(&[2, 3, 3, 7]).unwrap(), &[2, 3, 7, 13], p(2)).unwrap_err();
    assert!(matches!(&err, Error::ShapeMismatch { op: "avg_pool2d_backward", .. }), "{err}");
    invalid(avg_pool2d_backward(&y, &[3, 7, 13], p(2)), "avg_pool2d_backward", "rank 3");
    let half = x.to_dtype(ferrocuda::DType::F16).unwrap();
    assert!(matches!(avg_pool2d(&half, p(2)).unwrap_err(), Error::UnsupportedDType { op: "avg_pool2d", .. }));
}

fn gpu_bad_input(gpu: &Context) {
    bad_input_on(gpu);
    // The argmax of a CPU forward pass cannot meet a CUDA gradient.
    let (_, saved) = max_pool2d(&Context::cpu().zeros(&[1, 1, 2, 2]).unwrap(), Pool2dParams::new(2)).unwrap();
    let err = max_pool2d_backward(&gpu.zeros(&[1, 1, 1, 1]).unwrap(), &saved).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "max_pool2d_backward", .. }), "{err}");
}

fn cpu_bad_input() {
    bad_input_on(&Context::cpu());
}

fn main() {
    run(&[
        ("gpu_max_pool_matches_cpu", Case::Gpu(max_pool_matches_cpu)),
        ("gpu_avg_pool_matches_cpu", Case::Gpu(avg_pool_matches_cpu)),
        ("gpu_gradients_match_finite_differences", Case::Gpu(gpu_gradients_match_finite_differences)),
        ("gpu_nan_propagates", Case::Gpu(gpu_nan_propagates)),
        ("gpu_bad_input", Case::Gpu(gpu_bad_input)),
        ("cpu_gradients_match_finite_differences", Case::Cpu(cpu_gradients_match_finite_differences)),
        ("cpu_nan_propagates", Case::Cpu(cpu_nan_propagates)),
        ("cpu_bad_input", Case::Cpu(cpu_bad_input)),
    ]);
}
