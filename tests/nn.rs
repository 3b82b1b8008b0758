//! Neural-network ops on the GPU against the CPU backend (f64), backward passes against finite
//! differences of an f64 reference at small sizes, and typed errors for bad input.
mod common;
use common::*;
use ferrocuda::{
    batch_norm2d_backward, batch_norm2d_eval, batch_norm2d_train, binary_cross_entropy,
    binary_cross_entropy_with_logits, cross_entropy, cross_entropy_labels, cross_entropy_labels_in_place,
    dropout, dropout_add, dropout_backward, layer_norm, layer_norm_backward, layer_norm_backward_add,
    mse_loss, Context, DType, Error, Tensor,
};

const TOL: f64 = 1e-5;
/// Rows of 1, 31, 1000 and 50257 columns; in-register rows up to 8192; longer and unaligned ones;
/// rows split over a cluster (64 × 50257).
const SHAPES: [&[usize]; 10] = [
    &[1, 1],
    &[1, 31],
    &[7, 1000],
    &[3, 50257],
    &[64, 50257],
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

/// Cross-entropy shapes: one row of one class, narrow rows (teams of lanes), one block per row
/// (the row kept in shared memory, or read again when it does not fit: 70001 f32), rows split
/// across blocks (64 × 50257, 3 × (256K+3)), and widths that are not whole 16-byte vectors.
fn cross_entropy_shapes() -> Vec<(usize, usize)> {
    if under_sanitizer() {
        return vec![(1, 1), (31, 1000), (5, 73), (2, 40000), (264, 30001)];
    }
    vec![
        (1, 1),
        (31, 1000),
        (1000, 31),
        (64, 50257),
        (3, (1 << 18) + 3),
        ((1 << 16) + 1, 73),
        (3, 8196),
        (257, 300),
        (270, 70001),
    ]
}

/// Gradient tolerance of a dtype (norm-wise relative).
fn tol_of(dtype: DType) -> f64 {
    if dtype == DType::F32 {
        TOL
    } else {
        1e-2
    }
}

/// Every cross-entropy form on the GPU against the CPU backend, for each dtype: the loss (f32,
/// from the same 16-bit logits) and the gradient (in the logits' dtype), outputs poisoned first;
/// the in-place form gives the same bits and leaves a clone's logits intact.
fn cross_entropy_matches_cpu(gpu: &Context) {
    for (s, (rows, cols)) in cross_entropy_shapes().into_iter().enumerate() {
        let (xg, xc) = shaped(gpu, &[rows, cols], 1300 + s as u64, 3.0);
        let labels: Vec<u32> = (0..rows).map(|r| ((r * 7919 + s) % cols) as u32).collect();
        let dev_labels = gpu.labels(&labels, cols).unwrap();
        for dtype in DTYPES {
            let what = format!("cross_entropy {rows}x{cols} {dtype:?}");
            let (xg, xc) = (xg.to_dtype(dtype).unwrap(), xc.to_dtype(dtype).unwrap());
            drop(gpu.full_as(&[rows, cols], f32::NAN, dtype).unwrap());
            poison_pool(gpu, &[rows]);
            let (lg, gg) = cross_entropy(&xg, &labels).unwrap();
            let (lc, gc) = cross_entropy(&xc, &labels).unwrap();
            assert_eq!(
                (gg.dtype(), gg.shape(), lg.dtype(), lg.shape()),
                (dtype, xg.shape(), DType::F32, &[][..])
            );
            let (l, want) = (lg.to_scalar().unwrap(), lc.to_scalar().unwrap());
            assert!((l - want).abs() <= 1e-5 * want.abs().max(1.0), "{what} loss: {l} vs {want}");
            let grad = gg.to_vec().unwrap();
            assert_close(&format!("{what} grad"), &grad, &gc.to_vec().unwrap(), tol_of(dtype));
            let (l2, g2) = cross_entropy_labels(&xg, &dev_labels).unwrap();
            assert_same(&format!("{what} labels on the device"), &g2.to_vec().unwrap(), &grad);
            let kept = xg.clone();
            let (l3, g3) = cross_entropy_labels_in_place(xg, &dev_labels).unwrap();
            assert_same(&format!("{what} in place"), &g3.to_vec().unwrap(), &grad);
            let losses = [l2.to_scalar().unwrap(), l3.to_scalar().unwrap()];
            assert_eq!(losses.map(f32::to_bits), [l.to_bits(); 2], "{what}: loss differs between forms");
            assert_same(&format!("{what} clone kept"), &kept.to_vec().unwrap(), &xc.to_vec().unwrap());
        }
    }
}

/// The gradient written over the logits: the same bits on every run (split rows, narrow rows).
fn cross_entropy_in_place_is_deterministic(gpu: &Context) {
    for (rows, cols) in [(3, (1 << 18) + 3), (1000, 73)] {
        let x = randn_host(rows * cols, 1390);
        let labels: Vec<u32> = (0..rows).map(|r| (r * 31 % cols) as u32).collect();
        let dev_labels = gpu.labels(&labels, cols).unwrap();
        let run = || {
            let xg = gpu.from_slice(&x, &[rows, cols]).unwrap().to_dtype(DType::BF16).unwrap();
            let (l, g) = cross_entropy_labels_in_place(xg, &dev_labels).unwrap();
            (l.to_vec().unwrap(), g.to_vec().unwrap())
        };
        let ((l1, g1), (l2, g2)) = (run(), run());
        assert_same("loss run to run", &l1, &l2);
        assert_same("gradient run to run", &g1, &g2);
    }
}

/// The CPU backend's cross-entropy on 16-bit logits against a plain f64 loop over the rounded
/// values, and its in-place form.
fn cpu_cross_entropy_16bit() {
    let cpu = Context::cpu();
    let (rows, cols) = (5, 37);
    let x =
        cpu.from_slice(&randn_host(rows * cols, 1391), &[rows, cols]).unwrap().to_dtype(DType::BF16).unwrap();
    let labels: Vec<u32> = (0..rows as u32).map(|r| r * 7 % cols as u32).collect();
    let (loss, grad) = cross_entropy(&x, &labels).unwrap();
    assert_eq!(grad.dtype(), DType::BF16);
    let (xv, gv) = (x.to_vec().unwrap(), grad.to_vec().unwrap());
    let mut want = 0.0;
    for r in 0..rows {
        let row: Vec<f64> = xv[r * cols..(r + 1) * cols].iter().map(|&v| v as f64).collect();
        let p = softmax64(&row);
        want -= p[labels[r] as usize].ln() / rows as f64;
        for (i, &pi) in p.iter().enumerate() {
            let g = (pi - f64::from(i == labels[r] as usize)) / rows as f64;
            assert_eq!(gv[r * cols + i], DType::BF16.round(g), "grad[{r},{i}]");
        }
    }
    assert!((loss.to_scalar().unwrap() as f64 - want).abs() < 1e-6 * want.abs(), "loss");
    let kept = x.clone();
    let (l2, g2) = cross_entropy_labels_in_place(x, &cpu.labels(&labels, cols).unwrap()).unwrap();
    assert_eq!(l2.to_scalar().unwrap(), loss.to_scalar().unwrap());
    assert_same("in place", &g2.to_vec().unwrap(), &grad.to_vec().unwrap());
    assert_same("clone kept", &kept.to_vec().unwrap(), &xv);
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
    let err = cross_entropy(&ctx.zeros(&[0, 10]).unwrap(), &[]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "cross_entropy", .. }), "{err}");
    let labels = ctx.labels(&[1, 2, 3, 9], 10).unwrap();
    let err = cross_entropy_labels_in_place(ctx.zeros(&[4, 9]).unwrap(), &labels).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "cross_entropy_labels_in_place", .. }), "{err}");
    let err = cross_entropy_labels_in_place(ctx.zeros(&[3, 10]).unwrap(), &labels).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "cross_entropy_labels_in_place", .. }), "{err}");
    if ctx.is_cuda() {
        let err = cross_entropy_labels(&x, &Context::cpu().labels(&[1, 2, 3, 4], 10).unwrap()).unwrap_err();
        assert!(matches!(err, Error::DeviceMismatch { op: "cross_entropy_labels", .. }), "{err}");
    }
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

/// Element counts for the elementwise losses and dropout: tiny, odd, and more than 2^20.
fn loss_sizes() -> [usize; 5] {
    [1, 7, 31, 1000, (1 << 20) + 3]
}

type LossFn = fn(&Tensor, &Tensor) -> ferrocuda::Result<(Tensor, Tensor)>;
type Loss = (&'static str, LossFn, fn(f64, f64) -> f64, fn(f32) -> f32);

/// (name, op, f64 loss term of (input, target), input from a standard normal `z`)
const LOSSES: [Loss; 3] = [
    ("mse_loss", mse_loss, |p, t| (p - t) * (p - t), |z| z),
    (
        "binary_cross_entropy",
        binary_cross_entropy,
        |p, t| -(t * p.ln().max(-100.0) + (1.0 - t) * (1.0 - p).ln().max(-100.0)),
        |z| 1.0 / (1.0 + (-z).exp()),
    ),
    (
        "binary_cross_entropy_with_logits",
        binary_cross_entropy_with_logits,
        |x, t| x.max(0.0) - x * t + (1.0 + (-x.abs()).exp()).ln(),
        |z| 3.0 * z,
    ),
];

/// Inputs for a loss (mapped from normal samples) and targets in [0, 1).
fn loss_inputs(n: usize, seed: u64, input: fn(f32) -> f32) -> (Vec<f32>, Vec<f32>) {
    let x = randn_host(n, seed).into_iter().map(input).collect();
    let t = Context::cpu().rand(&[n], seed + 1).unwrap().to_vec().unwrap();
    (x, t)
}

fn losses_match_cpu(gpu: &Context) {
    for (name, op, _, input) in LOSSES {
        for (s, n) in loss_sizes().into_iter().enumerate() {
            let shape = if n == 1000 { vec![10, 4, 25] } else { vec![n] };
            let (x, t) = loss_inputs(n, 4000 + s as u64, input);
            let (xg, xc) = pair(gpu, &x, &shape);
            let (tg, tc) = pair(gpu, &t, &shape);
            poison_pool(gpu, &shape);
            let (lg, gg) = op(&xg, &tg).unwrap();
            let (lc, gc) = op(&xc, &tc).unwrap();
            assert_eq!(lg.shape(), [0usize; 0]);
            assert_eq!(gg.shape(), shape.as_slice());
            let (lg, lc) = (lg.to_scalar().unwrap(), lc.to_scalar().unwrap());
            // Every term is ≥ 0, so the loss is the sum of magnitudes the tolerance is relative to.
            assert!((lg - lc).abs() <= 1e-5 * lc.abs(), "{name} n={n}: loss {lg} vs {lc}");
            assert_close(&format!("{name} n={n} grad"), &gg.to_vec().unwrap(), &gc.to_vec().unwrap(), TOL);
        }
    }
    // PyTorch's clamps: log 0 counts as -100; the gradient's denominator is at least 1e-12.
    let (pg, tg) =
        (gpu.from_slice(&[0.0f32, 1.0], &[2]).unwrap(), gpu.from_slice(&[1.0f32, 1.0], &[2]).unwrap());
    let (l, g) = binary_cross_entropy(&pg, &tg).unwrap();
    assert_eq!(l.to_scalar().unwrap(), 50.0);
    assert_eq!(g.to_vec().unwrap(), [-0.5e12, 0.0]);
    // Large logits stay finite.
    let xg = gpu.from_slice(&[100.0f32, -100.0], &[2]).unwrap();
    let (l, _) = binary_cross_entropy_with_logits(&xg, &tg).unwrap();
    assert!((l.to_scalar().unwrap() - 50.0).abs() < 1e-4, "{l:?}");
}

fn loss_gradients_on(ctx: &Context) {
    let n = 9;
    for (s, (name, op, term, input)) in LOSSES.into_iter().enumerate() {
        let (x, t) = loss_inputs(n, 4100 + s as u64, input);
        let (xt, tt) = (ctx.from_slice(&x, &[3, 3]).unwrap(), ctx.from_slice(&t, &[3, 3]).unwrap());
        let (loss, grad) = op(&xt, &tt).unwrap();
        let grad = grad.to_vec().unwrap();
        let mean = |bump: Option<(usize, f64)>| {
            (0..n)
                .map(|i| term(x[i] as f64 + bump.filter(|b| b.0 == i).map_or(0.0, |b| b.1), t[i] as f64))
                .sum::<f64>()
                / n as f64
        };
        let l = loss.to_scalar().unwrap() as f64;
        assert!((l - mean(None)).abs() < 1e-5 * mean(None), "{name}: {l} vs {}", mean(None));
        let h = 1e-6;
        for (i, &g) in grad.iter().enumerate() {
            let numeric = (mean(Some((i, h))) - mean(Some((i, -h)))) / (2.0 * h);
            assert!(
                (g as f64 - numeric).abs() < 1e-4 * (1.0 + numeric.abs()),
                "{name} d/dx[{i}]: {g} vs {numeric}"
            );
        }
    }
}

fn gpu_loss_gradients(gpu: &Context) {
    loss_gradients_on(gpu);
}

fn cpu_loss_gradients() {
    loss_gradients_on(&Context::cpu());
}

fn dropout_matches_cpu(gpu: &Context) {
    for (s, n) in loss_sizes().into_iter().enumerate() {
        let shape = [n];
        let (xg, xc) = shaped(gpu, &shape, 4200 + s as u64, 1.0);
        let (dg, dc) = shaped(gpu, &shape, 4300 + s as u64, 1.0);
        for (k, p) in [0.0f32, 0.3, 0.9].into_iter().enumerate() {
            let seed = 77 + k as u64;
            poison_pool(gpu, &shape);
            let yg = dropout(&xg, p, seed).unwrap().to_vec().unwrap();
            let yc = dropout(&xc, p, seed).unwrap().to_vec().unwrap();
            let bits = |v: &[f32]| v.iter().map(|e| e.to_bits()).collect::<Vec<_>>();
            assert!(bits(&yg) == bits(&yc), "dropout n={n} p={p}: GPU and CPU differ");
            poison_pool(gpu, &shape);
            let bg = dropout_backward(&dg, p, seed).unwrap().to_vec().unwrap();
            let bc = dropout_backward(&dc, p, seed).unwrap().to_vec().unwrap();
            assert!(bits(&bg) == bits(&bc), "dropout_backward n={n} p={p}: GPU and CPU differ");
            // The backward mask is the forward one: dy kept (and scaled) exactly where x was
            // (the mask read from dropout of ones: x itself may hold exact zeros).
            let (x, d) = (xc.to_vec().unwrap(), dc.to_vec().unwrap());
            let mask = dropout(&gpu.full(&shape, 1.0).unwrap(), p, seed).unwrap().to_vec().unwrap();
            let scale = 1.0 / (1.0 - p);
            if n > 1 << 20 {
                // 16 random bits an element: the kept share within 6 standard deviations of 1 - p.
                let kept = mask.iter().filter(|m| **m != 0.0).count() as f64 / n as f64;
                let sd = (p as f64 * (1.0 - p as f64) / n as f64).sqrt();
                assert!((kept - (1.0 - p as f64)).abs() <= 6.0 * sd + 1e-9, "dropout p={p}: kept {kept}");
            }
            for i in 0..n {
                let kept = mask[i] != 0.0;
                assert_eq!(yg[i], if kept { x[i] * scale } else { 0.0 });
                assert_eq!(
                    bg[i],
                    if kept { d[i] * scale } else { 0.0 },
                    "dropout_backward n={n} p={p} [{i}]"
                );
            }
        }
    }
    // Another seed, another mask.
    let x = gpu.full(&[1000], 1.0).unwrap();
    assert_ne!(
        dropout(&x, 0.5, 1).unwrap().to_vec().unwrap(),
        dropout(&x, 0.5, 2).unwrap().to_vec().unwrap()
    );
}

fn cpu_dropout_statistics() {
    let n = (1 << 20) + 3;
    let x = Context::cpu().full(&[n], 1.0).unwrap();
    for p in [0.0f32, 0.1, 0.5, 0.9] {
        let y = dropout(&x, p, 5).unwrap().to_vec().unwrap();
        let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
        // 1M draws: the standard deviation of the kept fraction is below 5e-4.
        assert!((kept - (1.0 - p as f64)).abs() < 3e-3, "p={p}: kept {kept}");
        assert!(y.iter().all(|&v| v == 0.0 || v == 1.0 / (1.0 - p)), "p={p}");
    }
    let x = Context::cpu().full(&[4], f32::NAN).unwrap();
    assert!(dropout(&x, 0.5, 3).unwrap().to_vec().unwrap().iter().all(|v| v.is_nan()), "NaN stays NaN");
}

/// Batch-norm shapes: odd NCHW, 1×1 planes, `[N, C]`, planes of a multiple of 4 (16-byte path),
/// and two of more than 2^20 elements (one per path). (Not two values per channel: there
/// `x̂ = ±1` and dx is 0 up to rounding, so its relative error measures only noise.)
fn batch_norm_shapes() -> Vec<Vec<usize>> {
    let mut v = vec![vec![1, 3, 7, 13], vec![3, 3, 1, 1], vec![4, 5], vec![3, 4, 8, 8], vec![5, 3, 31, 33]];
    if under_sanitizer() {
        v.push(vec![2, 4, 64, 36]);
    } else {
        v.push(vec![8, 16, 96, 96]);
        v.push(vec![3, 7, 211, 229]);
    }
    v
}

fn channels(shape: &[usize]) -> usize {
    shape[1]
}

fn batch_norm_matches_cpu(gpu: &Context) {
    for (s, shape) in batch_norm_shapes().into_iter().enumerate() {
        let c = channels(&shape);
        let seed = 4400 + 10 * s as u64;
        let (xg, xc) = shaped(gpu, &shape, seed, 2.0);
        let (xg, xc) = (xg.add_scalar(3.0).unwrap(), xc.add_scalar(3.0).unwrap());
        let (gg, gc) = shaped(gpu, &[c], seed + 1, 1.0);
        let (bg, bc) = shaped(gpu, &[c], seed + 2, 1.0);
        let (mut rmg, mut rmc) = shaped(gpu, &[c], seed + 3, 1.0);
        let (rv, _) = shaped(gpu, &[c], seed + 4, 1.0);
        let rv: Vec<f32> = rv.to_vec().unwrap().iter().map(|v| v.abs() + 0.5).collect();
        let (mut rvg, mut rvc) = pair(gpu, &rv, &[c]);
        let what = format!("batch_norm {shape:?}");
        poison_pool(gpu, &shape);
        let (yg, sg) = batch_norm2d_train(&xg, &gg, &bg, &mut rmg, &mut rvg, 0.1, 1e-5).unwrap();
        let (yc, sc) = batch_norm2d_train(&xc, &gc, &bc, &mut rmc, &mut rvc, 0.1, 1e-5).unwrap();
        assert_close(&what, &yg.to_vec().unwrap(), &yc.to_vec().unwrap(), TOL);
        assert_close(&format!("{what} mean"), &sg.mean.to_vec().unwrap(), &sc.mean.to_vec().unwrap(), TOL);
        assert_close(&format!("{what} rstd"), &sg.rstd.to_vec().unwrap(), &sc.rstd.to_vec().unwrap(), TOL);
        assert_close(&format!("{what} running_mean"), &rmg.to_vec().unwrap(), &rmc.to_vec().unwrap(), TOL);
        assert_close(&format!("{what} running_var"), &rvg.to_vec().unwrap(), &rvc.to_vec().unwrap(), TOL);
        poison_pool(gpu, &shape);
        let eg = batch_norm2d_eval(&xg, &gg, &bg, &rmg, &rvg, 1e-5).unwrap();
        let ec = batch_norm2d_eval(&xc, &gc, &bc, &rmc, &rvc, 1e-5).unwrap();
        assert_close(&format!("{what} eval"), &eg.to_vec().unwrap(), &ec.to_vec().unwrap(), TOL);
        let (dg, dc) = shaped(gpu, &shape, seed + 5, 1.0);
        poison_pool(gpu, &shape);
        let (dxg, dgg, dbg) = batch_norm2d_backward(&dg, &xg, &gg, &sg).unwrap();
        let (dxc, dgc, dbc) = batch_norm2d_backward(&dc, &xc, &gc, &sc).unwrap();
        assert_close(&format!("{what} dx"), &dxg.to_vec().unwrap(), &dxc.to_vec().unwrap(), 1e-4);
        assert_close(&format!("{what} dgamma"), &dgg.to_vec().unwrap(), &dgc.to_vec().unwrap(), 1e-4);
        assert_close(&format!("{what} dbeta"), &dbg.to_vec().unwrap(), &dbc.to_vec().unwrap(), 1e-4);
    }
}

/// Per-channel (mean, biased variance) of an NCHW / `[N, C]` buffer, in f64.
fn channel_stats(x: &[f32], shape: &[usize]) -> Vec<(f64, f64)> {
    let (n, c) = (shape[0], shape[1]);
    let hw: usize = shape[2..].iter().product();
    (0..c)
        .map(|ch| {
            let vals: Vec<f64> = (0..n)
                .flat_map(|s| (0..hw).map(move |k| (s * c + ch) * hw + k))
                .map(|i| x[i] as f64)
                .collect();
            let mean = vals.iter().sum::<f64>() / vals.len() as f64;
            (mean, vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / vals.len() as f64)
        })
        .collect()
}

/// Several training steps on fresh batches against the textbook update
/// `r ← (1 - m) r + m · stat` (variance unbiased); a clone of the running mean taken before the
/// steps keeps its values (copy-on-share).
fn batch_norm_running_stats_on(ctx: &Context) {
    let shape = [4, 3, 5, 7];
    let (c, m) = (3, 4.0 * 35.0);
    let (gamma, beta) = (ctx.full(&[c], 1.0).unwrap(), ctx.zeros(&[c]).unwrap());
    let (mut rm, mut rv) = (ctx.zeros(&[c]).unwrap(), ctx.full(&[c], 1.0).unwrap());
    let before = rm.clone();
    let (mut want_mean, mut want_var) = (vec![0.0f64; c], vec![1.0f64; c]);
    let momentum = 0.25;
    for step in 0..4 {
        let x: Vec<f32> =
            randn_host(shape.iter().product(), 4500 + step).iter().map(|v| v * 1.5 + step as f32).collect();
        let xt = ctx.from_slice(&x, &shape).unwrap();
        batch_norm2d_train(&xt, &gamma, &beta, &mut rm, &mut rv, momentum as f32, 1e-5).unwrap();
        for (ch, (mean, var)) in channel_stats(&x, &shape).into_iter().enumerate() {
            want_mean[ch] = (1.0 - momentum) * want_mean[ch] + momentum * mean;
            want_var[ch] = (1.0 - momentum) * want_var[ch] + momentum * var * m / (m - 1.0);
        }
    }
    let to32 = |v: &[f64]| v.iter().map(|&e| e as f32).collect::<Vec<_>>();
    assert_close("running_mean", &rm.to_vec().unwrap(), &to32(&want_mean), 1e-5);
    assert_close("running_var", &rv.to_vec().unwrap(), &to32(&want_var), 1e-5);
    assert_eq!(before.to_vec().unwrap(), [0.0; 3], "the clone kept its values");
}

fn gpu_batch_norm_running_stats(gpu: &Context) {
    batch_norm_running_stats_on(gpu);
}

fn cpu_batch_norm_running_stats() {
    batch_norm_running_stats_on(&Context::cpu());
}

/// `L = Σ w ⊙ batch_norm(x)` in f64, batch statistics, for finite differences.
fn batch_norm_loss(x: &[f64], g: &[f64], b: &[f64], w: &[f32], shape: &[usize]) -> f64 {
    let (n, c) = (shape[0], shape[1]);
    let hw: usize = shape[2..].iter().product();
    let mut total = 0.0;
    for ch in 0..c {
        let idx: Vec<usize> = (0..n).flat_map(|s| (0..hw).map(move |k| (s * c + ch) * hw + k)).collect();
        let mean = idx.iter().map(|&i| x[i]).sum::<f64>() / idx.len() as f64;
        let var = idx.iter().map(|&i| (x[i] - mean).powi(2)).sum::<f64>() / idx.len() as f64;
        for &i in &idx {
            total += w[i] as f64 * ((x[i] - mean) / (var + 1e-5).sqrt() * g[ch] + b[ch]);
        }
    }
    total
}

fn batch_norm_gradients_on(ctx: &Context) {
    for (s, shape) in [vec![2, 3, 2, 3], vec![5, 2]].into_iter().enumerate() {
        let (len, c) = (shape.iter().product::<usize>(), shape[1]);
        let seed = 4600 + 10 * s as u64;
        let x = randn_host(len, seed);
        let (g, b, w) = (randn_host(c, seed + 1), randn_host(c, seed + 2), randn_host(len, seed + 3));
        let (xt, gt, bt, wt) = (
            ctx.from_slice(&x, &shape).unwrap(),
            ctx.from_slice(&g, &[c]).unwrap(),
            ctx.from_slice(&b, &[c]).unwrap(),
            ctx.from_slice(&w, &shape).unwrap(),
        );
        let (mut rm, mut rv) = (ctx.zeros(&[c]).unwrap(), ctx.full(&[c], 1.0).unwrap());
        let (_, saved) = batch_norm2d_train(&xt, &gt, &bt, &mut rm, &mut rv, 0.1, 1e-5).unwrap();
        let (dx, dg, db) = batch_norm2d_backward(&wt, &xt, &gt, &saved).unwrap();
        let (dx, dg, db) = (dx.to_vec().unwrap(), dg.to_vec().unwrap(), db.to_vec().unwrap());
        let f64s = |v: &[f32]| v.iter().map(|&e| e as f64).collect::<Vec<_>>();
        let (x64, g64, b64) = (f64s(&x), f64s(&g), f64s(&b));
        let h = 1e-6;
        let numeric = |which: usize, i: usize| {
            let bump = |d: f64| {
                let (mut xs, mut gs, mut bs) = (x64.clone(), g64.clone(), b64.clone());
                [&mut xs, &mut gs, &mut bs][which][i] += d;
                batch_norm_loss(&xs, &gs, &bs, &w, &shape)
            };
            (bump(h) - bump(-h)) / (2.0 * h)
        };
        for (i, &d) in dx.iter().enumerate() {
            let n = numeric(0, i);
            assert!(
                (d as f64 - n).abs() < 1e-3 * (1.0 + n.abs()),
                "batch_norm {shape:?} dx[{i}]: {d} vs {n}"
            );
        }
        for ch in 0..c {
            let (ng, nb) = (numeric(1, ch), numeric(2, ch));
            assert!((dg[ch] as f64 - ng).abs() < 1e-4 * (1.0 + ng.abs()), "dgamma[{ch}]: {} vs {ng}", dg[ch]);
            assert!((db[ch] as f64 - nb).abs() < 1e-4 * (1.0 + nb.abs()), "dbeta[{ch}]: {} vs {nb}", db[ch]);
        }
    }
}

fn gpu_batch_norm_gradients(gpu: &Context) {
    batch_norm_gradients_on(gpu);
}

fn cpu_batch_norm_gradients() {
    batch_norm_gradients_on(&Context::cpu());
}

fn layer_ops_bad_input_on(ctx: &Context) {
    let (a, b) = (ctx.zeros(&[4, 5]).unwrap(), ctx.zeros(&[4, 6]).unwrap());
    for (name, op, _, _) in LOSSES {
        let err = op(&a, &b).unwrap_err();
        assert!(
            matches!(&err, Error::ShapeMismatch { op: o, lhs, rhs } if *o == name && lhs == &[4, 5] && rhs == &[4, 6]),
            "{err}"
        );
        let empty = ctx.zeros(&[0, 5]).unwrap();
        assert!(matches!(op(&empty, &empty).unwrap_err(), Error::InvalidArgument { op: o, .. } if o == name));
    }
    for p in [1.0f32, -0.1, f32::NAN] {
        let err = dropout(&a, p, 1).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { op: "dropout", shape, .. } if shape == &[4, 5]),
            "{err}"
        );
        assert!(matches!(
            dropout_backward(&a, p, 1).unwrap_err(),
            Error::InvalidArgument { op: "dropout_backward", .. }
        ));
    }
    let x = ctx.zeros(&[2, 3, 4, 4]).unwrap();
    let (g3, g4) = (ctx.full(&[3], 1.0).unwrap(), ctx.full(&[4], 1.0).unwrap());
    let (mut rm, mut rv) = (ctx.zeros(&[3]).unwrap(), ctx.full(&[3], 1.0).unwrap());
    const TRAIN: &str = "batch_norm2d_train";
    let err = batch_norm2d_train(&ctx.zeros(&[2, 3, 4]).unwrap(), &g3, &g3, &mut rm, &mut rv, 0.1, 1e-5)
        .unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument { op: TRAIN, shape, .. } if shape == &[2, 3, 4]), "{err}");
    let err = batch_norm2d_train(&x, &g4, &g3, &mut rm, &mut rv, 0.1, 1e-5).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: TRAIN, lhs, rhs } if lhs == &[4] && rhs == &[3]),
        "{err}"
    );
    let (mut rm4, mut rv4) = (ctx.zeros(&[4]).unwrap(), ctx.full(&[4], 1.0).unwrap());
    let err = batch_norm2d_train(&x, &g3, &g3, &mut rm4, &mut rv, 0.1, 1e-5).unwrap_err();
    assert!(matches!(&err, Error::ShapeMismatch { op: TRAIN, .. }), "{err}");
    let err = batch_norm2d_train(&x, &g3, &g3, &mut rm, &mut rv4, 0.1, 1e-5).unwrap_err();
    assert!(matches!(&err, Error::ShapeMismatch { op: TRAIN, .. }), "{err}");
    let err = batch_norm2d_train(&ctx.zeros(&[1, 3, 1, 1]).unwrap(), &g3, &g3, &mut rm, &mut rv, 0.1, 1e-5)
        .unwrap_err();
    assert!(err.to_string().contains("more than one value per channel"), "{err}");
    let err = batch_norm2d_eval(&x, &g3, &g3, &rm, &rv4, 1e-5).unwrap_err();
    assert!(matches!(&err, Error::ShapeMismatch { op: "batch_norm2d_eval", .. }), "{err}");
    let err = batch_norm2d_eval(&ctx.zeros(&[0, 3, 2, 2]).unwrap(), &g3, &g3, &rm, &rv, 1e-5).unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument { op: "batch_norm2d_eval", .. }), "{err}");
    let (_, saved) = batch_norm2d_train(&x, &g3, &g3, &mut rm, &mut rv, 0.1, 1e-5).unwrap();
    let err = batch_norm2d_backward(&ctx.zeros(&[2, 3, 4, 5]).unwrap(), &x, &g3, &saved).unwrap_err();
    assert!(matches!(&err, Error::ShapeMismatch { op: "batch_norm2d_backward", .. }), "{err}");
    let err = batch_norm2d_backward(&x, &x, &g4, &saved).unwrap_err();
    assert!(matches!(&err, Error::ShapeMismatch { op: "batch_norm2d_backward", .. }), "{err}");
}

fn gpu_layer_ops_bad_input(gpu: &Context) {
    layer_ops_bad_input_on(gpu);
    // Running statistics on another backend.
    let cpu = Context::cpu();
    let x = gpu.zeros(&[2, 3, 2, 2]).unwrap();
    let g = gpu.full(&[3], 1.0).unwrap();
    let (mut rm, mut rv) = (cpu.zeros(&[3]).unwrap(), cpu.full(&[3], 1.0).unwrap());
    let err = batch_norm2d_train(&x, &g, &g, &mut rm, &mut rv, 0.1, 1e-5).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "batch_norm2d_train", .. }), "{err}");
}

fn cpu_layer_ops_bad_input() {
    layer_ops_bad_input_on(&Context::cpu());
}

/// Softmax, log-softmax, their backward passes and layer norm (forward and backward) in every
/// dtype, at a shape of each dispatch branch, against the CPU backend (f64, rounded once to the
/// dtype); the backward passes take the CPU's forward output, so that only the op under test
/// differs.
fn row_ops_every_dtype_and_branch_match_cpu(gpu: &Context) {
    for (s, [rows, cols]) in row_dispatch_shapes().into_iter().enumerate() {
        let shape = [rows, cols];
        let n = rows * cols;
        let x: Vec<f32> = randn_host(n, 5000 + s as u64).iter().map(|v| 3.0 * v + 1.0).collect();
        let d = randn_host(n, 5100 + s as u64);
        let (g, b) = (randn_host(cols, 5200 + s as u64), randn_host(cols, 5300 + s as u64));
        for dtype in DTYPES {
            let tol = tol_of(dtype);
            let (xg, xc) = pair_as(gpu, &x, &shape, dtype);
            let (dg, dc) = pair_as(gpu, &d, &shape, dtype);
            let what = |op: &str| format!("{op} {dtype:?} {shape:?}");
            for log in [false, true] {
                let op = if log { "log_softmax" } else { "softmax" };
                poison_pool_as(gpu, &shape, dtype);
                let (yg, yc) =
                    if log { (xg.log_softmax(), xc.log_softmax()) } else { (xg.softmax(), xc.softmax()) };
                let (yg, yc) = (yg.unwrap(), yc.unwrap());
                assert_eq!(yg.dtype(), dtype);
                assert_close(&what(op), &yg.to_vec().unwrap(), &yc.to_vec().unwrap(), tol);
                let y_same = yc.to_context(gpu).unwrap();
                poison_pool_as(gpu, &shape, dtype);
                let (bg, bc) = if log {
                    (y_same.log_softmax_backward(&dg), yc.log_softmax_backward(&dc))
                } else {
                    (y_same.softmax_backward(&dg), yc.softmax_backward(&dc))
                };
                let bwd_tol = if dtype == DType::F32 { 1e-4 } else { tol };
                assert_close(
                    &what(&format!("{op}_backward")),
                    &bg.unwrap().to_vec().unwrap(),
                    &bc.unwrap().to_vec().unwrap(),
                    bwd_tol,
                );
            }
            let (gg, gc) = pair_as(gpu, &g, &[cols], dtype);
            let (bg, bc) = pair_as(gpu, &b, &[cols], dtype);
            poison_pool_as(gpu, &shape, dtype);
            let (yg, sg) = layer_norm(&xg, Some(&gg), Some(&bg), 1e-5).unwrap();
            let (yc, sc) = layer_norm(&xc, Some(&gc), Some(&bc), 1e-5).unwrap();
            assert_eq!((yg.dtype(), sg.mean.dtype(), sg.rstd.dtype()), (dtype, DType::F32, DType::F32));
            assert_close(&what("layer_norm"), &yg.to_vec().unwrap(), &yc.to_vec().unwrap(), tol);
            let stat_tol = if dtype == DType::F32 { 1e-5 } else { 1e-4 };
            assert_close(
                &what("layer_norm mean"),
                &sg.mean.to_vec().unwrap(),
                &sc.mean.to_vec().unwrap(),
                stat_tol,
            );
            assert_close(
                &what("layer_norm rstd"),
                &sg.rstd.to_vec().unwrap(),
                &sc.rstd.to_vec().unwrap(),
                stat_tol,
            );
            let saved = ferrocuda::LayerNormSaved {
                mean: sc.mean.to_context(gpu).unwrap(),
                rstd: sc.rstd.to_context(gpu).unwrap(),
            };
            poison_pool_as(gpu, &shape, dtype);
            let (dxg, dgg, dbg) = layer_norm_backward(&xg, Some(&gg), &dg, &saved).unwrap();
            let (dxc, dgc, dbc) = layer_norm_backward(&xc, Some(&gc), &dc, &sc).unwrap();
            assert_eq!((dxg.dtype(), dgg.dtype(), dbg.dtype()), (dtype, dtype, dtype));
            let bwd_tol = if dtype == DType::F32 { 1e-4 } else { tol };
            assert_close(&what("layer_norm dx"), &dxg.to_vec().unwrap(), &dxc.to_vec().unwrap(), bwd_tol);
            assert_close(&what("layer_norm dgamma"), &dgg.to_vec().unwrap(), &dgc.to_vec().unwrap(), bwd_tol);
            assert_close(&what("layer_norm dbeta"), &dbg.to_vec().unwrap(), &dbc.to_vec().unwrap(), bwd_tol);
        }
    }
}

/// Layer norm's parameter gradients come out bit for bit the same on every run (row groups added
/// in a fixed order, no atomics).
fn layer_norm_gradients_are_deterministic(gpu: &Context) {
    let (rows, cols) = (5000, 384);
    let x = gpu.randn(&[rows, cols], 31).unwrap();
    let dy = gpu.randn(&[rows, cols], 32).unwrap();
    let (_, saved) = layer_norm(&x, None, None, 1e-5).unwrap();
    let first = layer_norm_backward(&x, None, &dy, &saved).unwrap();
    let bits = |t: &Tensor| t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for _ in 0..3 {
        let again = layer_norm_backward(&x, None, &dy, &saved).unwrap();
        assert!(bits(&again.1) == bits(&first.1) && bits(&again.2) == bits(&first.2), "dgamma/dbeta changed");
    }
}

/// Split rows (a partial launch, then an apply launch that merges each row's chunks in a fixed
/// order) give the same bits on every run: softmax and layer norm, forward and backward, rows of
/// 513 chunks and of 640 unaligned ones (scalar loads); the longest also against the CPU.
fn split_rows_are_deterministic(gpu: &Context) {
    let shapes: &[[usize; 2]] =
        if under_sanitizer() { &[[5, 1 << 15]] } else { &[[5, (1 << 22) + 8], [3, (5 << 20) + 5]] };
    for &shape in shapes {
        let x = gpu.randn(&shape, 41).unwrap();
        let dy = gpu.randn(&shape, 42).unwrap();
        let bits = |t: &Tensor| t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let run = || {
            let y = x.softmax().unwrap();
            let dx = y.softmax_backward(&dy).unwrap();
            let (z, saved) = layer_norm(&x, None, None, 1e-5).unwrap();
            let (dz, _, _) = layer_norm_backward(&x, None, &dy, &saved).unwrap();
            (bits(&y), bits(&dx), bits(&z), bits(&dz), bits(&saved.mean), bits(&saved.rstd))
        };
        let first = run();
        for _ in 0..2 {
            assert!(run() == first, "a split row op changed between runs at {shape:?}");
        }
        if shape[1] > 5 << 20 {
            let xc = x.to_context(&Context::cpu()).unwrap();
            let close = |op: &str, g: &Tensor, c: Tensor| {
                assert_close(&format!("{op} {shape:?}"), &g.to_vec().unwrap(), &c.to_vec().unwrap(), 1e-5)
            };
            close("softmax", &x.softmax().unwrap(), xc.softmax().unwrap());
            close(
                "layer_norm",
                &layer_norm(&x, None, None, 1e-5).unwrap().0,
                layer_norm(&xc, None, None, 1e-5).unwrap().0,
            );
        }
    }
}

/// Mixed dtypes are `DTypeMismatch`; the saved statistics must be f32.
fn row_ops_dtype_errors_on(ctx: &Context) {
    let h = ctx.full_as(&[4, 10], 1.0, DType::F16).unwrap();
    let b = ctx.full_as(&[4, 10], 1.0, DType::BF16).unwrap();
    let err = h.softmax_backward(&b).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "softmax_backward", .. }), "{err}");
    let err = b.log_softmax_backward(&h).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "log_softmax_backward", .. }), "{err}");
    let g32 = ctx.full(&[10], 1.0).unwrap();
    let err = layer_norm(&b, Some(&g32), None, 1e-5).unwrap_err();
    assert!(
        matches!(err, Error::DTypeMismatch { op: "layer_norm", lhs: DType::BF16, rhs: DType::F32 }),
        "{err}"
    );
    let (_, saved) = layer_norm(&b, None, None, 1e-5).unwrap();
    let err = layer_norm_backward(&b, None, &h, &saved).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "layer_norm_backward", .. }), "{err}");
    let bad = ferrocuda::LayerNormSaved {
        mean: ctx.full_as(&[4], 0.0, DType::BF16).unwrap(),
        rstd: ctx.full(&[4], 1.0).unwrap(),
    };
    let err = layer_norm_backward(&b, None, &b, &bad).unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { op: "layer_norm_backward", .. }), "{err}");
    let err = layer_norm(&ctx.full_as(&[4, 0], 1.0, DType::F16).unwrap(), None, None, 1e-5).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "layer_norm", .. }), "{err}");
    let wrong = ctx.full_as(&[9], 1.0, DType::BF16).unwrap();
    let err = layer_norm(&b, None, Some(&wrong), 1e-5).unwrap_err();
    assert!(matches!(&err, Error::ShapeMismatch { op: "layer_norm", lhs, .. } if lhs == &[9]), "{err}");
    let err = h.softmax_backward(&ctx.full_as(&[4, 9], 1.0, DType::F16).unwrap()).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "softmax_backward", .. }), "{err}");
    let err = ctx.full_as(&[], 1.0, DType::BF16).unwrap().log_softmax().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "log_softmax", .. }), "{err}");
}

fn gpu_row_ops_dtype_errors(gpu: &Context) {
    row_ops_dtype_errors_on(gpu);
}

fn cpu_row_ops_dtype_errors() {
    row_ops_dtype_errors_on(&Context::cpu());
}

/// The CPU twins in 16-bit: f64 math on the stored values, rounded once (softmax rows still sum
/// to one within the rounding; layer norm matches an f64 loop).
fn cpu_row_ops_16_bit() {
    let cpu = Context::cpu();
    let x: Vec<f32> = randn_host(3 * 77, 41);
    for dtype in [DType::F16, DType::BF16] {
        let t = cpu.from_slice(&x, &[3, 77]).unwrap().to_dtype(dtype).unwrap();
        let xv = t.to_vec().unwrap();
        let y = t.softmax().unwrap();
        assert_eq!(y.dtype(), dtype);
        let yv = y.to_vec().unwrap();
        for r in 0..3 {
            let row = &xv[r * 77..(r + 1) * 77];
            let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
            let z: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
            for c in 0..77 {
                let want = dtype.round((row[c] as f64 - m).exp() / z);
                assert_eq!(yv[r * 77 + c], want, "{dtype:?} softmax [{r}, {c}]");
            }
        }
        let (ln, _) = layer_norm(&t, None, None, 1e-5).unwrap();
        let lv = ln.to_vec().unwrap();
        let row = &xv[..77];
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / 77.0;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / 77.0;
        for c in 0..77 {
            assert_eq!(
                lv[c],
                dtype.round((row[c] as f64 - mean) / (var + 1e-5).sqrt()),
                "{dtype:?} layer_norm [{c}]"
            );
        }
    }
}

/// 16-bit dropout: the f32 mask bits (same seed), the kept values scaled in f32 and rounded once.
fn dropout_16_bit_matches_cpu(gpu: &Context) {
    for (s, n) in loss_sizes().into_iter().enumerate() {
        let x = randn_host(n, 4400 + s as u64);
        let mask = dropout(&gpu.full(&[n], 1.0).unwrap(), 0.3, 9).unwrap().to_vec().unwrap();
        for dtype in [DType::F16, DType::BF16] {
            let (xg, xc) = pair_as(gpu, &x, &[n], dtype);
            poison_pool_as(gpu, &[n], dtype);
            let yg = dropout(&xg, 0.3, 9).unwrap();
            assert_eq!(yg.dtype(), dtype);
            let (yg, yc) = (yg.to_vec().unwrap(), dropout(&xc, 0.3, 9).unwrap().to_vec().unwrap());
            let bits = |v: &[f32]| v.iter().map(|e| e.to_bits()).collect::<Vec<_>>();
            assert!(bits(&yg) == bits(&yc), "dropout {dtype:?} n={n}: GPU and CPU differ");
            assert!(yg.iter().zip(&mask).all(|(y, m)| *m != 0.0 || *y == 0.0), "dropped {dtype:?}");
            let bg = dropout_backward(&xg, 0.3, 9).unwrap().to_vec().unwrap();
            assert!(bits(&bg) == bits(&yg), "dropout_backward {dtype:?} n={n}");
        }
    }
}

/// `layer_norm_backward_add`: dx + residual, GPU against the CPU in every dtype, on rows the
/// one-launch kernels take (257-512 columns: the residual added in them for 16-bit rows, after
/// for f32; the warp-row kernels where 16-bit rows are whole vectors) and on rows they do not; and against `layer_norm_backward`'s dx plus the residual.
fn layer_norm_backward_add_matches_cpu(gpu: &Context) {
    for (i, &(rows, cols)) in
        [(1, 384), (33, 300), (1000, 512), (7, 257), (31, 264), (65, 1000), (3, 4096), (40, 31)]
            .iter()
            .enumerate()
    {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let shape = [rows, cols];
            let tol = if dtype == DType::F32 { 1e-4 } else { 2e-2 };
            let host = |seed: u64, n: usize| randn_host(n, 5000 + 10 * i as u64 + seed);
            let (xg, xc) = pair_as(gpu, &host(0, rows * cols), &shape, dtype);
            let (gg, gc) = pair_as(gpu, &host(1, cols), &[cols], dtype);
            let (dg, dc) = pair_as(gpu, &host(2, rows * cols), &shape, dtype);
            let (rg, rc) = pair_as(gpu, &host(3, rows * cols), &shape, dtype);
            let (_, sg) = layer_norm(&xg, Some(&gg), None, 1e-5).unwrap();
            let (_, sc) = layer_norm(&xc, Some(&gc), None, 1e-5).unwrap();
            poison_pool_as(gpu, &shape, dtype);
            let (ag, agg, abg) = layer_norm_backward_add(&xg, Some(&gg), &dg, &sg, &rg).unwrap();
            let (ac, _, _) = layer_norm_backward_add(&xc, Some(&gc), &dc, &sc, &rc).unwrap();
            let what = format!("layer_norm_backward_add {shape:?} {dtype:?}");
            assert_eq!(ag.dtype(), dtype);
            assert_close(&what, &ag.to_vec().unwrap(), &ac.to_vec().unwrap(), tol);
            let (dx, dgam, dbet) = layer_norm_backward(&xg, Some(&gg), &dg, &sg).unwrap();
            let sum = dx.add(&rg).unwrap().to_vec().unwrap();
            assert_close(&format!("{what} vs dx + residual"), &ag.to_vec().unwrap(), &sum, tol);
            assert!(agg.to_vec().unwrap() == dgam.to_vec().unwrap(), "{what}: dgamma differs");
            assert!(abg.to_vec().unwrap() == dbet.to_vec().unwrap(), "{what}: dbeta differs");
        }
    }
    let (x, r) = (gpu.zeros(&[2, 384]).unwrap(), gpu.zeros(&[2, 383]).unwrap());
    let (_, saved) = layer_norm(&x, None, None, 1e-5).unwrap();
    let e = layer_norm_backward_add(&x, None, &x, &saved, &r).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "layer_norm_backward_add", .. }), "{e}");
}

/// `dropout_add` (a residual's dropout and add in one pass): GPU and CPU the same bits in every
/// dtype; in f32 the bits of `dropout` then `add`, in 16 bits `residual + x·mask·scale` rounded
/// once (within half an ulp of the two-op result's rounding); shape and dtype mismatches typed.
fn dropout_add_matches_cpu(gpu: &Context) {
    let bits = |v: &[f32]| v.iter().map(|e| e.to_bits()).collect::<Vec<_>>();
    for (s, n) in loss_sizes().into_iter().enumerate() {
        let (x, r) = (randn_host(n, 4500 + s as u64), randn_host(n, 4600 + s as u64));
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let (xg, xc) = pair_as(gpu, &x, &[n], dtype);
            let (rg, rc) = pair_as(gpu, &r, &[n], dtype);
            poison_pool_as(gpu, &[n], dtype);
            let yg = dropout_add(&xg, &rg, 0.3, 11).unwrap();
            assert_eq!(yg.dtype(), dtype);
            let (yg, yc) = (yg.to_vec().unwrap(), dropout_add(&xc, &rc, 0.3, 11).unwrap().to_vec().unwrap());
            assert!(bits(&yg) == bits(&yc), "dropout_add {dtype:?} n={n}: GPU and CPU differ");
            let two_ops = dropout(&xg, 0.3, 11).unwrap().add(&rg).unwrap().to_vec().unwrap();
            if dtype == DType::F32 {
                assert!(bits(&yg) == bits(&two_ops), "dropout_add f32 n={n}: not dropout then add");
            } else {
                assert_close(&format!("dropout_add {dtype:?} n={n}"), &yg, &two_ops, 1e-2);
            }
        }
    }
    let (a, b) = (gpu.zeros(&[4]).unwrap(), gpu.zeros(&[5]).unwrap());
    let e = dropout_add(&a, &b, 0.1, 1).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "dropout_add", .. }), "{e}");
    let h = gpu.zeros(&[4]).unwrap().to_dtype(DType::BF16).unwrap();
    let e = dropout_add(&a, &h, 0.1, 1).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "dropout_add", .. }), "{e}");
}

fn main() {
    run(&[
        ("gpu_softmax_forward_backward_match_cpu", Case::Gpu(softmax_forward_backward_match_cpu)),
        ("gpu_gradients_match_finite_differences", Case::Gpu(gpu_gradients_match_finite_differences)),
        ("gpu_cross_entropy_matches_cpu", Case::Gpu(cross_entropy_matches_cpu)),
        ("gpu_cross_entropy_in_place_is_deterministic", Case::Gpu(cross_entropy_in_place_is_deterministic)),
        ("cpu_cross_entropy_16bit", Case::Cpu(cpu_cross_entropy_16bit)),
        ("gpu_layer_norm_matches_cpu", Case::Gpu(layer_norm_matches_cpu)),
        ("gpu_activation_gradients", Case::Gpu(gpu_activation_gradients)),
        ("gpu_bad_input", Case::Gpu(gpu_bad_input)),
        ("cpu_gradients_match_finite_differences", Case::Cpu(cpu_gradients_match_finite_differences)),
        ("cpu_activation_gradients", Case::Cpu(cpu_activation_gradients)),
        ("cpu_bad_input", Case::Cpu(cpu_bad_input)),
        ("gpu_losses_match_cpu", Case::Gpu(losses_match_cpu)),
        ("gpu_loss_gradients_match_finite_differences", Case::Gpu(gpu_loss_gradients)),
        ("cpu_loss_gradients_match_finite_differences", Case::Cpu(cpu_loss_gradients)),
        ("gpu_dropout_mask_matches_cpu", Case::Gpu(dropout_matches_cpu)),
        ("cpu_dropout_keeps_one_minus_p", Case::Cpu(cpu_dropout_statistics)),
        ("gpu_batch_norm_matches_cpu", Case::Gpu(batch_norm_matches_cpu)),
        ("gpu_batch_norm_running_stats", Case::Gpu(gpu_batch_norm_running_stats)),
        ("cpu_batch_norm_running_stats", Case::Cpu(cpu_batch_norm_running_stats)),
        ("gpu_batch_norm_gradients_match_finite_differences", Case::Gpu(gpu_batch_norm_gradients)),
        ("cpu_batch_norm_gradients_match_finite_differences", Case::Cpu(cpu_batch_norm_gradients)),
        ("gpu_nn_layer_ops_bad_input", Case::Gpu(gpu_layer_ops_bad_input)),
        ("gpu_row_ops_every_dtype_and_branch_match_cpu", Case::Gpu(row_ops_every_dtype_and_branch_match_cpu)),
        ("gpu_layer_norm_gradients_are_deterministic", Case::Gpu(layer_norm_gradients_are_deterministic)),
        ("gpu_split_rows_are_deterministic", Case::Gpu(split_rows_are_deterministic)),
        ("gpu_row_ops_dtype_errors", Case::Gpu(gpu_row_ops_dtype_errors)),
        ("cpu_row_ops_dtype_errors", Case::Cpu(cpu_row_ops_dtype_errors)),
        ("cpu_row_ops_16_bit", Case::Cpu(cpu_row_ops_16_bit)),
        ("gpu_dropout_16_bit_matches_cpu", Case::Gpu(dropout_16_bit_matches_cpu)),
        ("gpu_dropout_add_matches_cpu", Case::Gpu(dropout_add_matches_cpu)),
        ("gpu_layer_norm_backward_add_matches_cpu", Case::Gpu(layer_norm_backward_add_matches_cpu)),
        ("cpu_layer_norm_backward_add", Case::Cpu(|| layer_norm_backward_add_matches_cpu(&Context::cpu()))),
        ("cpu_dropout_add_is_dropout_then_add", Case::Cpu(|| dropout_add_matches_cpu(&Context::cpu()))),
        ("cpu_nn_layer_ops_bad_input", Case::Cpu(cpu_layer_ops_bad_input)),
    ]);
}
