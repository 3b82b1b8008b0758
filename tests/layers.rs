//! Layers and `Sequential`: GPU against the CPU backend (outputs, input gradients, every
//! parameter gradient, an SGD step), the CPU backward against finite differences of the
//! loss, train/eval behaviour, and errors that name the layer.
mod common;
use common::*;
use ferrocuda::layers::{
    AvgPool2d, BatchNorm2d, Conv2d, Dropout, Flatten, Gelu, LayerNorm, Linear, MaxPool2d, Relu, Sigmoid, Tanh,
};
use ferrocuda::{Activation, Adam, Context, Error, Layer, Result, Sequential, Sgd, Tensor};

/// A small network of every MLP layer (the final Relu only when `relu`: finite differences
/// across its kink are meaningless), its parameters identical on every backend (the generator
/// is counter-based).
fn mlp(ctx: &Context, (inputs, hidden, outputs): (usize, usize, usize), relu: bool) -> Result<Sequential> {
    let model = Sequential::new()
        .layer(Linear::new(ctx, inputs, hidden, 11)?)
        .layer(LayerNorm::new(ctx, hidden)?)
        .layer(Gelu::new())
        .layer(Linear::new(ctx, hidden, hidden, 15)?.activation(Activation::Gelu))
        .layer(Linear::new(ctx, hidden, hidden, 12)?)
        .layer(Tanh::new())
        .layer(Linear::new(ctx, hidden, hidden, 13)?.without_bias())
        .layer(Sigmoid::new())
        .layer(Linear::new(ctx, hidden, outputs, 14)?);
    Ok(if relu { model.layer(Relu::new()) } else { model })
}

/// Forward, backward with `dy`, and everything that came out: output, input gradient, then each
/// parameter's gradient.
fn forward_backward(model: &mut Sequential, x: &Tensor, dy: &[f32]) -> Vec<Vec<f32>> {
    let y = model.forward(x).unwrap();
    let dy = y.context().from_slice(dy, y.shape()).unwrap();
    let dx = model.backward(&dy).unwrap();
    let mut out = vec![y.to_vec().unwrap(), dx.to_vec().unwrap()];
    out.extend(model.params_mut().iter().map(|p| p.grad().expect("gradient").to_vec().unwrap()));
    out
}

fn gpu_mlp_matches_cpu(gpu: &Context) {
    for (batch, sizes) in [(1, (3, 5, 2)), (31, (64, 33, 10)), (1000, (100, 256, 7))] {
        let cpu = Context::cpu();
        let (mut mg, mut mc) = (mlp(gpu, sizes, true).unwrap(), mlp(&cpu, sizes, true).unwrap());
        let x = randn_host(batch * sizes.0, 5);
        let dy = randn_host(batch * sizes.2, 6);
        let (xg, xc) = pair(gpu, &x, &[batch, sizes.0]);
        poison_pool(gpu, &[batch, sizes.1]);
        let (g, c) = (forward_backward(&mut mg, &xg, &dy), forward_backward(&mut mc, &xc, &dy));
        for (i, (g, c)) in g.iter().zip(&c).enumerate() {
            assert_close(&format!("batch {batch}, {sizes:?}, output {i}"), g, c, 1e-4);
        }
        // SGD: its step is linear in the gradients (Adam's first step is ±lr for any gradient
        // far above eps, so it would magnify rounding differences of near-zero gradients).
        let (mut sg, mut sc) = (Sgd::new(0.1).momentum(0.9), Sgd::new(0.1).momentum(0.9));
        mg.step(&mut sg).unwrap();
        mc.step(&mut sc).unwrap();
        for (pg, pc) in mg.params_mut().iter().zip(mc.params_mut()) {
            assert_close(
                "after one SGD step",
                &pg.value().to_vec().unwrap(),
                &pc.value().to_vec().unwrap(),
                1e-4,
            );
        }
    }
}

/// The CNN layers on `[batch, 3, 7, 13]` images: convolution (padded, then dilated and without
/// bias: the batch norm after it makes a bias's gradient exactly zero, i.e. rounding noise), batch norm, pooling (padded max, then avg), dropout, flatten, linear.
fn cnn(ctx: &Context) -> Result<Sequential> {
    Ok(Sequential::new()
        .layer(Conv2d::new(ctx, 3, 4, 3, 31)?.padding(1))
        .layer(Conv2d::new(ctx, 4, 3, 3, 32)?.padding(2).dilation(2).without_bias())
        .layer(BatchNorm2d::new(ctx, 3)?)
        .layer(Relu::new())
        .layer(MaxPool2d::new(3).stride(2).padding(1))
        .layer(AvgPool2d::new(2))
        .layer(Flatten::new())
        .layer(Dropout::new(0.3, 9))
        .layer(Linear::new(ctx, 3 * 2 * 3, 5, 17)?))
}

fn gpu_cnn_layers_match_cpu(gpu: &Context) {
    let cpu = Context::cpu();
    for batch in [1, 4, 33] {
        let (mut mg, mut mc) = (cnn(gpu).unwrap(), cnn(&cpu).unwrap());
        let x = randn_host(batch * 3 * 7 * 13, 30 + batch as u64);
        let dy = randn_host(batch * 5, 40);
        let (xg, xc) = pair(gpu, &x, &[batch, 3, 7, 13]);
        // Two steps: the second forward sees updated running statistics and a new dropout mask.
        for step in 0..2 {
            let (g, c) = (forward_backward(&mut mg, &xg, &dy), forward_backward(&mut mc, &xc, &dy));
            for (i, (g, c)) in g.iter().zip(&c).enumerate() {
                assert_close(&format!("batch {batch}, step {step}, output {i}"), g, c, 1e-4);
            }
            mg.step(&mut Sgd::new(0.1)).unwrap();
            mc.step(&mut Sgd::new(0.1)).unwrap();
        }
        mg.eval();
        mc.eval();
        let (yg, yc) = (mg.forward(&xg).unwrap(), mc.forward(&xc).unwrap());
        assert_close("eval", &yg.to_vec().unwrap(), &yc.to_vec().unwrap(), 1e-4);
    }
}

/// `backward_params` stores the same parameter gradients as `backward` (bit for bit: the same
/// kernels, minus the input gradient's) for the MLP, the CNN, and a network whose first layer
/// has no parameters (skipped altogether).
fn backward_params_on(ctx: &Context) {
    let leading_relu = |ctx: &Context| -> Result<Sequential> {
        Ok(Sequential::new()
            .layer(Relu::new())
            .layer(Linear::new(ctx, 5, 4, 21)?)
            .layer(Tanh::new())
            .layer(Linear::new(ctx, 4, 3, 22)?))
    };
    type Build = Box<dyn Fn(&Context) -> Result<Sequential>>;
    let nets: [(&str, Build, Vec<usize>, usize); 3] = [
        ("mlp", Box::new(|c: &Context| mlp(c, (64, 33, 10), true)), vec![31, 64], 31 * 10),
        ("cnn", Box::new(cnn), vec![33, 3, 7, 13], 33 * 5),
        ("leading relu", Box::new(leading_relu), vec![7, 5], 7 * 3),
    ];
    for (name, build, shape, outputs) in nets {
        let (mut full, mut params_only) = (build(ctx).unwrap(), build(ctx).unwrap());
        let x = ctx.from_slice(&randn_host(shape.iter().product(), 61), &shape).unwrap();
        let dy = randn_host(outputs, 62);
        let grads = |m: &mut Sequential| -> Vec<Vec<f32>> {
            m.params_mut().iter().map(|p| p.grad().expect("gradient").to_vec().unwrap()).collect()
        };
        let y = full.forward(&x).unwrap();
        let dy = ctx.from_slice(&dy, y.shape()).unwrap();
        full.backward(&dy).unwrap();
        params_only.forward(&x).unwrap();
        params_only.backward_params(&dy).unwrap();
        let (a, b) = (grads(&mut full), grads(&mut params_only));
        assert_eq!(a.len(), b.len(), "{name}: parameters with gradients");
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            assert!(a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()), "{name}: gradient {i} differs");
        }
    }
}

fn gpu_backward_params(gpu: &Context) {
    backward_params_on(gpu);
}

fn cpu_backward_params() {
    backward_params_on(&Context::cpu());
}

/// Eval mode: batch norm normalises with its running statistics (PyTorch's update with momentum
/// and the unbiased variance), dropout is the identity; training-mode dropout zeroes about p.
fn cpu_train_eval_modes() {
    let ctx = Context::cpu();
    let (n, c, hw) = (4, 2, 5);
    let x = randn_host(n * c * hw, 50);
    let xt = ctx.from_slice(&x, &[n, c, 1, hw]).unwrap();
    let mut bn = BatchNorm2d::new(&ctx, c).unwrap();
    bn.forward(&xt).unwrap();
    bn.set_training(false);
    let y = bn.forward(&xt).unwrap().to_vec().unwrap();
    for ch in 0..c {
        let vals: Vec<f64> =
            (0..n).flat_map(|b| (0..hw).map(move |i| (b * c + ch) * hw + i)).map(|i| x[i] as f64).collect();
        let m = vals.iter().sum::<f64>() / vals.len() as f64;
        let var = vals.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (vals.len() - 1) as f64;
        let (rm, rv) = (0.1 * m, 0.9 + 0.1 * var);
        for b in 0..n {
            for i in 0..hw {
                let k = (b * c + ch) * hw + i;
                let want = (x[k] as f64 - rm) / (rv + 1e-5).sqrt();
                assert!((y[k] as f64 - want).abs() < 1e-5, "batch norm eval at {k}: {} vs {want}", y[k]);
            }
        }
    }
    let ones = ctx.full(&[1000], 1.0).unwrap();
    let mut drop = Dropout::new(0.25, 1);
    let kept = drop.forward(&ones).unwrap().to_vec().unwrap().iter().filter(|&&v| v != 0.0).count();
    assert!((700..800).contains(&kept), "kept {kept} of 1000 at p = 0.25");
    drop.set_training(false);
    assert_eq!(drop.forward(&ones).unwrap().to_vec().unwrap(), vec![1.0; 1000]);
}

/// `L = Σ y·r` for a fixed random `r`: its gradient w.r.t. x and every parameter from backward,
/// against central differences on the CPU backend.
/// `model`'s backward at a random `x` of `shape` against central differences of the loss, for
/// the input and every parameter.
fn check_finite_differences(what: &str, model: &mut Sequential, shape: &[usize]) {
    let ctx = Context::cpu();
    let x = randn_host(shape.iter().product(), 21);
    let xt = ctx.from_slice(&x, shape).unwrap();
    let y = model.forward(&xt).unwrap();
    let r = randn_host(y.len(), 22);
    let loss = |model: &mut Sequential, x: &Tensor| -> f64 {
        let y = model.forward(x).unwrap().to_vec().unwrap();
        y.iter().zip(&r).map(|(&a, &b)| a as f64 * b as f64).sum()
    };
    let dx = model.backward(&ctx.from_slice(&r, y.shape()).unwrap()).unwrap().to_vec().unwrap();
    let grads: Vec<Vec<f32>> =
        model.params_mut().iter().map(|p| p.grad().unwrap().to_vec().unwrap()).collect();
    let h = 1e-2f32;
    let numeric = |f: &mut dyn FnMut(f32) -> f64| (f(h) - f(-h)) / (2.0 * h as f64);
    let mut want_dx = Vec::new();
    for i in 0..x.len() {
        want_dx.push(numeric(&mut |d| {
            let mut xd = x.clone();
            xd[i] += d;
            loss(model, &ctx.from_slice(&xd, shape).unwrap())
        }) as f32);
    }
    assert_close(&format!("{what}: dx"), &dx, &want_dx, 2e-2);
    for (k, grad) in grads.iter().enumerate() {
        let value = model.params_mut()[k].value().to_vec().unwrap();
        let pshape = model.params_mut()[k].value().shape().to_vec();
        let mut want = Vec::new();
        for i in 0..value.len() {
            want.push(numeric(&mut |d| {
                let mut v = value.clone();
                v[i] += d;
                model.params_mut()[k].set_value(ctx.from_slice(&v, &pshape).unwrap()).unwrap();
                let l = loss(model, &xt);
                model.params_mut()[k].set_value(ctx.from_slice(&value, &pshape).unwrap()).unwrap();
                l
            }) as f32);
        }
        assert_close(&format!("{what}: parameter {k}"), grad, &want, 2e-2);
    }
}

fn cpu_backward_matches_finite_differences() {
    let ctx = Context::cpu();
    let sizes = (4, 6, 3);
    check_finite_differences("mlp", &mut mlp(&ctx, sizes, false).unwrap(), &[2, sizes.0]);
    // The smooth CNN layers (no kinks for differences to straddle). The convolution has no bias:
    // batch norm right after it removes any per-channel shift, so that gradient is exactly zero
    // and its relative error would be rounding noise.
    let mut cnn = Sequential::new()
        .layer(Conv2d::new(&ctx, 2, 3, 3, 41).unwrap().padding(1).stride(2).without_bias())
        .layer(BatchNorm2d::new(&ctx, 3).unwrap())
        .layer(Tanh::new())
        .layer(AvgPool2d::new(2).padding(1))
        .layer(Flatten::new())
        .layer(Linear::new(&ctx, 3 * 2 * 3, 2, 42).unwrap());
    check_finite_differences("cnn", &mut cnn, &[2, 2, 5, 9]);
}

fn layer_source(err: &Error) -> (&str, &Error) {
    match err {
        Error::Layer { layer, source } => (layer.as_str(), source),
        other => panic!("expected a layer error, got {other}"),
    }
}

fn bad_input_on(ctx: &Context) {
    let mut lin = Linear::new(ctx, 8, 4, 1).unwrap();
    let err = lin.forward(&ctx.zeros(&[3, 7]).unwrap()).unwrap_err();
    let (layer, source) = layer_source(&err);
    assert_eq!(layer, "Linear(8 → 4)");
    assert!(matches!(source, Error::InvalidArgument { shape, .. } if shape == &[3, 7]), "{err}");
    let err = lin.forward(&ctx.zeros(&[8]).unwrap()).unwrap_err();
    assert!(err.to_string().contains("expects [batch, 8]"), "{err}");

    let err = lin.backward(&ctx.zeros(&[3, 4]).unwrap()).unwrap_err();
    assert!(layer_source(&err).1.to_string().contains("no saved forward pass"), "{err}");
    lin.set_training(false);
    lin.forward(&ctx.zeros(&[3, 8]).unwrap()).unwrap();
    assert!(lin.backward(&ctx.zeros(&[3, 4]).unwrap()).is_err(), "eval mode keeps nothing");

    let mut model = Sequential::new().layer(Linear::new(ctx, 8, 4, 1).unwrap()).layer(Relu::new());
    let err = model.step(&mut Adam::new(1e-3)).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "Sequential::step", .. }), "{err}");
    model.forward(&ctx.zeros(&[2, 8]).unwrap()).unwrap();
    let err = model.backward(&ctx.zeros(&[2, 5]).unwrap()).unwrap_err();
    assert!(matches!(layer_source(&err).1, Error::ShapeMismatch { .. }), "{err}");

    let mut norm = LayerNorm::new(ctx, 6).unwrap();
    let err = norm.forward(&ctx.zeros(&[2, 5]).unwrap()).unwrap_err();
    assert_eq!(layer_source(&err).0, "LayerNorm(6)");

    let mut bn = BatchNorm2d::new(ctx, 3).unwrap();
    let err = bn.forward(&ctx.zeros(&[2, 4, 5, 5]).unwrap()).unwrap_err();
    assert_eq!(layer_source(&err).0, "BatchNorm2d(3)");
    assert!(err.to_string().contains("expects [N, 3, H, W]"), "{err}");
    let err = MaxPool2d::new(4).forward(&ctx.zeros(&[1, 1, 3, 3]).unwrap()).unwrap_err();
    assert!(layer_source(&err).0.starts_with("MaxPool2d"), "{err}");
    assert!(matches!(layer_source(&err).1, Error::InvalidArgument { op: "max_pool2d", .. }), "{err}");
    let mut conv = Conv2d::new(ctx, 3, 8, 3, 1).unwrap().stride(2);
    let err = conv.forward(&ctx.zeros(&[1, 4, 9, 9]).unwrap()).unwrap_err();
    assert!(layer_source(&err).0.starts_with("Conv2d(3 → 8, 3×3"), "{err}");
    assert!(err.to_string().contains("expects [N, 3, H, W]"), "{err}");
    let err = conv.forward(&ctx.zeros(&[1, 3, 2, 9]).unwrap()).unwrap_err();
    assert!(matches!(layer_source(&err).1, Error::InvalidArgument { op: "conv2d", .. }), "{err}");
    let err = Dropout::new(1.0, 0).forward(&ctx.zeros(&[3]).unwrap()).unwrap_err();
    assert!(err.to_string().contains("[0, 1)"), "{err}");
}

fn gpu_bad_input(gpu: &Context) {
    bad_input_on(gpu);
}

fn cpu_bad_input() {
    bad_input_on(&Context::cpu());
}

fn main() {
    run(&[
        ("gpu_mlp_matches_cpu", Case::Gpu(gpu_mlp_matches_cpu)),
        ("gpu_cnn_layers_match_cpu", Case::Gpu(gpu_cnn_layers_match_cpu)),
        ("gpu_bad_input", Case::Gpu(gpu_bad_input)),
        ("gpu_backward_params", Case::Gpu(gpu_backward_params)),
        ("cpu_backward_params", Case::Cpu(cpu_backward_params)),
        ("cpu_train_eval_modes", Case::Cpu(cpu_train_eval_modes)),
        ("cpu_backward_matches_finite_differences", Case::Cpu(cpu_backward_matches_finite_differences)),
        ("cpu_bad_input", Case::Cpu(cpu_bad_input)),
    ]);
}
