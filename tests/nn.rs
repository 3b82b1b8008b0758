//! Neural-network ops on the GPU against the CPU backend (f64), backward passes against finite
//! differences of an f64 reference at small sizes, and typed errors for bad input.
mod common;
use common::*;
use ferrocuda::{cross_entropy, layer_norm, layer_norm_backward, Context, DType, Error, Tensor};

const TOL: f64 = 1e-5;
/// Rows of 1, 31, 1000 and 50257 columns; in-register rows up to 8192; longer and unaligned ones.
const SHAPES: [&[usize]; 9] = [
    &[1, 1],
    &[1, 31],
    &[7, 1000],
    &[3, 50257],
    &[64, 8192],
    &[5, 8196],
    &[2, 3, 1023],
    &[4097, 128],
    &[0, 5],
];

fn shaped(gpu: &Context, shape: &[usize], seed: u64, scale: f32) -> (Tensor, Tensor) {
    let n: usize = shape.iter().product();
    let x: Vec<f32> = randn_host(n, seed).iter().map(|v| v * scale).collect();
    pair(gpu, &x, shape)
}

fn softmax_forward_backward_match_cpu(gpu: &Context) {
    for (s, shape) in SHAPES.iter().enumerate() {
        let (xg, xc) = shaped(gpu, shape, 1000 + s as u64, 4.0);
        let (dg, dc) = shaped(gpu, shape, 1100 + s as u64, 1.0);
        for log in [false, true] {
            poison_pool(gpu, shape);
            let (yg, yc) =
                if log { (xg.log_softmax(), xc.log_softmax()) } else { (xg.softmax(), xc.softmax()) };
            let (yg, yc) = (yg.unwrap(), yc.unwrap());
            assert_close(&format!("log={log} {shape:?}"), &yg.to_vec().unwrap(), &yc.to_vec().unwrap(), TOL);
            let (bg, bc) = if log {
                (yg.log_softmax_backward(&dg), yc.log_softmax_backward(&dc))
            } else {
                (yg.softmax_backward(&dg), yc.softmax_backward(&dc))
            };
            assert_close(
                &format!("backward log={log} {shape:?}"),
                &bg.unwrap().to_vec().unwrap(),
                &bc.unwrap().to_vec().unwrap(),
                1e-4,
            );
        }
    }
    // Rows sum to one; extreme logits stay finite.
    let x = gpu.from_slice(&[1000.0f32, -1000.0, 0.0, 999.0], &[1, 4]).unwrap();
    let y = x.softmax().unwrap().to_vec().unwrap();
    assert!(y.iter().all(|v| v.is_finite()) && (y.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{y:?}");
}

/// f64 softmax of one row (for finite differences).
fn softmax64(x: &[f64]) -> Vec<f64> {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

fn gradients_match_finite_differences(ctx: &Context) {
    let cols = 7;
    let x = randn_host(3 * cols, 1200);
    let w = randn_host(3 * cols, 1201);
    let labels = [2u32, 6, 0];
    let xt = ctx.from_slice(&x, &[3, cols]).unwrap();
    let wt = ctx.from_slice(&w, &[3, cols]).unwrap();
    let dsoft = xt.softmax().unwrap().softmax_backward(&wt).unwrap().to_vec().unwrap();
    let dlog = xt.log_softmax().unwrap().log_softmax_backward(&wt).unwrap().to_vec().unwrap();
    let (_, dce) = cross_entropy(&xt, &labels).unwrap();
    let dce = dce.to_vec().unwrap();
    let h = 1e-6;
    for r in 0..3 {
        let row = |bump: Option<(usize, f64)>| -> Vec<f64> {
            let mut v: Vec<f64> = x[r * cols..(r + 1) * cols].iter().map(|&e| e as f64).collect();
            if let Some((i, d)) = bump {
                v[i] += d;
            }
            v
        };
        let wr: Vec<f64> = w[r * cols..(r + 1) * cols].iter().map(|&e| e as f64).collect();
        for i in 0..cols {
            let f_soft = |d| softmax64(&row(Some((i, d)))).iter().zip(&wr).map(|(p, w)| p * w).sum::<f64>();
            let f_log =
                |d| softmax64(&row(Some((i, d)))).iter().zip(&wr).map(|(p, w)| p.ln() * w).sum::<f64>();
            let f_ce = |d| -softmax64(&row(Some((i, d))))[labels[r] as usize].ln() / 3.0;
            for (name, f, got) in [
                ("softmax", &f_soft as &dyn Fn(f64) -> f64, dsoft[r * cols + i]),
                ("log_softmax", &f_log, dlog[r * cols + i]),
                ("cross_entropy", &f_ce, dce[r * cols + i]),
            ] {
                let numeric = (f(h) - f(-h)) / (2.0 * h);
                assert!(
                    (got as f64 - numeric).abs() < 1e-4 * (1.0 + numeric.abs()),
                    "{name} d/dx[{r},{i}]: {got} vs {numeric}"
                );
            }
        }
    }
    // Layer norm: L = Σ w ⊙ layer_norm(x) with γ, β.
    let gamma = randn_host(cols, 1202);
    let beta = randn_host(cols, 1203);
    let (gt, bt) = (ctx.from_slice(&gamma, &[cols]).unwrap(), ctx.from_slice(&beta, &[cols]).unwrap());
    let (_, saved) = layer_norm(&xt, Some(&gt), Some(&bt), 1e-5).unwrap();
    let (dx, dgamma, dbeta) = layer_norm_backward(&xt, Some(&gt), &wt, &saved).unwrap();
    let (dx, dgamma, dbeta) = (dx.to_vec().unwrap(), dgamma.to_vec().unwrap(), dbeta.to_vec().unwrap());
    let ln_loss = |xs: &[f64], g: &[f64], b: &[f64]| -> f64 {
        let mut total = 0.0;
        for r in 0..3 {
            let row = &xs[r * cols..(r + 1) * cols];
            let mean = row.iter().sum::<f64>() / cols as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
            for i in 0..cols {
                total += w[r * cols + i] as f64 * ((row[i] - mean) / (var + 1e-5).sqrt() * g[i] + b[i]);
            }
        }
        total
    };
    let (x64, g64, b64): (Vec<f64>, Vec<f64>, Vec<f64>) = (
        x.iter().map(|&v| v as f64).collect(),
        gamma.iter().map(|&v| v as f64).collect(),
        beta.iter().map(|&v| v as f64).collect(),
    );
    let numeric = |which: usize, i: usize| {
        let bump = |d: f64| {
            let (mut xs, mut gs, mut bs) = (x64.clone(), g64.clone(), b64.clone());
            [&mut xs, &mut gs, &mut bs][which][i] += d;
            ln_loss(&xs, &gs, &bs)
        };
        (bump(h) - bump(-h)) / (2.0 * h)
    };
    for (i, &d) in dx.iter().enumerate() {
        let n = numeric(0, i);
        assert!((d as f64 - n).abs() < 1e-3 * (1.0 + n.abs()), "layer_norm dx[{i}]: {d} vs {n}");
    }
    for i in 0..cols {
        let (ng, nb) = (numeric(1, i), numeric(2, i));
        assert!(
            (dgamma[i] as f64 - ng).abs() < 1e-4 * (1.0 + ng.abs()),
            "dgamma[{i}]: {} vs {ng}",
            dgamma[i]
        );
        assert!((dbeta[i] as f64 - nb).abs() < 1e-4 * (1.0 + nb.abs()), "dbeta[{i}]: {} vs {nb}", dbeta[i]);
    }
}

fn gpu_gradients_match_finite_differences(gpu: &Context) {
    gradients_match_finite_differences(gpu);
}

fn cpu_gradients_match_finite_differences() {
    gradients_match_finite_differences(&Context::cpu());
}

fn cross_entropy_matches_cpu(gpu: &Context) {
    for (s, &(rows, cols)) in [(1, 1), (31, 10), (1000, 31), (64, 50257), (3, 8196)].iter().enumerate() {
        let (xg, xc) = shaped(gpu, &[rows, cols], 1300 + s as u64, 3.0);
        let labels: Vec<u32> = (0..rows).map(|r| ((r * 7919 + s) % cols) as u32).collect();
        let (lg, gg) = cross_entropy(&xg, &labels).unwrap();
        let (lc, gc) = cross_entropy(&xc, &labels).unwrap();
        let (lg, lc) = (lg.to_scalar().unwrap(), lc.to_scalar().unwrap());
        assert!((lg - lc).abs() <= 1e-5 * lc.abs().max(1.0), "loss {rows}x{cols}: {lg} vs {lc}");
        assert_close(
            &format!("cross_entropy grad {rows}x{cols}"),
            &gg.to_vec().unwrap(),
            &gc.to_vec().unwrap(),
            TOL,
        );
    }
}

fn layer_norm_matches_cpu(gpu: &Context) {
    for (s, shape) in SHAPES.iter().enumerate() {
        if shape.last() == Some(&0) || shape[0] == 0 {
            continue;
        }
        let cols = *shape.last().unwrap();
        let (xg, xc) = shaped(gpu, shape, 1400 + s as u64, 2.0);
        let xg = xg.add_scalar(3.0).unwrap();
        let xc = xc.add_scalar(3.0).unwrap();
        let (gg, gc) = shaped(gpu, &[cols], 1500 + s as u64, 1.0);
        let (bg, bc) = shaped(gpu, &[cols], 1600 + s as u64, 1.0);
        let (dg, dc) = shaped(gpu, shape, 1700 + s as u64, 1.0);
        for affine in [false, true] {
            let (g1, b1) = if affine { (Some(&gg), Some(&bg)) } else { (None, None) };
            let (g2, b2) = if affine { (Some(&gc), Some(&bc)) } else { (None, None) };
            let (yg, sg) = layer_norm(&xg, g1, b1, 1e-5).unwrap();
            let (yc, sc) = layer_norm(&xc, g2, b2, 1e-5).unwrap();
            let what = format!("layer_norm {shape:?} affine={affine}");
            assert_close(&what, &yg.to_vec().unwrap(), &yc.to_vec().unwrap(), TOL);
            assert_close(
                &format!("{what} mean"),
                &sg.mean.to_vec().unwrap(),
                &sc.mean.to_vec().unwrap(),
                TOL,
            );
            assert_close(
                &format!("{what} rstd"),
                &sg.rstd.to_vec().unwrap(),
                &sc.rstd.to_vec().unwrap(),
                TOL,
            );
            let (dxg, dgg, dbg) = layer_norm_backward(&xg, g1, &dg, &sg).unwrap();
            let (dxc, dgc, dbc) = layer_norm_backward(&xc, g2, &dc, &sc).unwrap();
            assert_close(&format!("{what} dx"), &dxg.to_vec().unwrap(), &dxc.to_vec().unwrap(), 1e-4);
            assert_close(&format!("{what} dgamma"), &dgg.to_vec().unwrap(), &dgc.to_vec().unwrap(), 1e-4);
            assert_close(&format!("{what} dbeta"), &dbg.to_vec().unwrap(), &dbc.to_vec().unwrap(), 1e-4);
        }
    }
}

type Forward = fn(&Tensor) -> ferrocuda::Result<Tensor>;
type Backward = fn(&Tensor, &Tensor) -> ferrocuda::Result<Tensor>;
type Activation = (&'static str, Forward, Backward, bool, fn(f64) -> f64);

/// (name, forward, backward, whether the backward takes the forward's output instead of its input,
/// f64 reference of the forward)
const ACTIVATIONS: [Activation; 4] = [
    ("relu", Tensor::relu, Tensor::relu_backward, false, |x| x.max(0.0)),
    ("sigmoid", Tensor::sigmoid, Tensor::sigmoid_backward, true, |x| 1.0 / (1.0 + (-x).exp())),
    ("tanh", Tensor::tanh, Tensor::tanh_backward, true, f64::tanh),
    ("gelu", Tensor::gelu, Tensor::gelu_backward, false, |x| {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
    }),
];

fn activation_gradients_on(ctx: &Context) {
    let x = randn_host(101, 1800).iter().map(|v| v * 3.0).collect::<Vec<f32>>();
    let dy = randn_host(101, 1801);
    let (xt, dyt) = (ctx.from_slice(&x, &[101]).unwrap(), ctx.from_slice(&dy, &[101]).unwrap());
    for (name, forward, backward, uses_output, f) in ACTIVATIONS {
        let saved = if uses_output { forward(&xt).unwrap() } else { xt.clone() };
        let got = backward(&saved, &dyt).unwrap().to_vec().unwrap();
        for i in 0..101 {
            let h = 1e-6;
            let numeric = dy[i] as f64 * (f(x[i] as f64 + h) - f(x[i] as f64 - h)) / (2.0 * h);
            // relu has a kink at 0: skip points within h of it.
            if name == "relu" && x[i].abs() < 1e-5 {
                continue;
            }
            assert!(
                (got[i] as f64 - numeric).abs() < 1e-4 * (1.0 + numeric.abs()),
                "{name}' at {}: {} vs {numeric}",
                x[i],
                got[i]
            );
        }
    }
}

fn gpu_activation_gradients(gpu: &Context) {
    activation_gradients_on(gpu);
    for (s, &n) in SIZES_1D.iter().enumerate() {
        let (xg, xc) = shaped(gpu, &[n], 1900 + s as u64, 3.0);
        let (dg, dc) = shaped(gpu, &[n], 2000 + s as u64, 1.0);
        for (name, forward, backward, uses_output, _) in ACTIVATIONS {
            let (sg, sc) = if uses_output {
                (forward(&xg).unwrap(), forward(&xc).unwrap())
            } else {
                (xg.clone(), xc.clone())
            };
            poison_pool(gpu, &[n]);
            let got = backward(&sg, &dg).unwrap().to_vec().unwrap();
            let want = backward(&sc, &dc).unwrap().to_vec().unwrap();
            assert_close(&format!("{name}_backward n={n}"), &got, &want, TOL);
            let (sh, dh) = (sg.to_dtype(DType::BF16).unwrap(), dg.to_dtype(DType::BF16).unwrap());
            let (shc, dhc) = (sc.to_dtype(DType::BF16).unwrap(), dc.to_dtype(DType::BF16).unwrap());
            let got = backward(&sh, &dh).unwrap().to_vec().unwrap();
            let want = backward(&shc, &dhc).unwrap().to_vec().unwrap();
            assert_close(&format!("{name}_backward bf16 n={n}"), &got, &want, 1e-2);
        }
    }
}

fn cpu_activation_gradients() {
    activation_gradients_on(&Context::cpu());
}

/// Elementwise sizes: empty, tiny, odd, and 2^20+3.
const SIZES_1D: [usize; 5] = [0, 1, 31, 1000, (1 << 20) + 3];

fn bad_input_on(ctx: &Context) {
    let x = ctx.zeros(&[4, 10]).unwrap();
    let err = cross_entropy(&x, &[1, 2, 3]).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "cross_entropy", .. }), "{err}");
    let err = cross_entropy(&x, &[1, 2, 3, 10]).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { op: "cross_entropy", shape, .. } if shape == &[4, 10]),
        "{err}"
    );
    assert!(err.to_string().contains("label 10"), "{err}");
    let wrong = ctx.zeros(&[9]).unwrap();
    let err = layer_norm(&x, Some(&wrong), None, 1e-5).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "layer_norm", lhs, rhs } if lhs == &[9] && rhs == &[10]),
        "{err}"
    );
    let err = x.softmax_backward(&ctx.zeros(&[4, 9]).unwrap()).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "softmax_backward", .. }), "{err}");
    let err = ctx.full(&[], 1.0).unwrap().softmax().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "softmax", .. }), "{err}");
}

fn gpu_bad_input(gpu: &Context) {
    bad_input_on(gpu);
}

fn cpu_bad_input() {
    bad_input_on(&Context::cpu());
}

fn main() {
    run(&[
        ("gpu_softmax_forward_backward_match_cpu", Case::Gpu(softmax_forward_backward_match_cpu)),
        ("gpu_gradients_match_finite_differences", Case::Gpu(gpu_gradients_match_finite_differences)),
        ("gpu_cross_entropy_matches_cpu", Case::Gpu(cross_entropy_matches_cpu)),
        ("gpu_layer_norm_matches_cpu", Case::Gpu(layer_norm_matches_cpu)),
        ("gpu_activation_gradients", Case::Gpu(gpu_activation_gradients)),
        ("gpu_bad_input", Case::Gpu(gpu_bad_input)),
        ("cpu_gradients_match_finite_differences", Case::Cpu(cpu_gradients_match_finite_differences)),
        ("cpu_activation_gradients", Case::Cpu(cpu_activation_gradients)),
        ("cpu_bad_input", Case::Cpu(cpu_bad_input)),
    ]);
}
