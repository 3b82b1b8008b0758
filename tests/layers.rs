//! Layers and `Sequential`: GPU against the CPU backend (outputs, input gradients, every
//! parameter gradient, an SGD step), the CPU backward against finite differences of the
//! loss, train/eval behaviour, and errors that name the layer.
mod common;
use common::*;
use ferrocuda::layers::{Gelu, LayerNorm, Linear, Relu, Sigmoid, Tanh};
use ferrocuda::{Adam, Context, Error, Layer, Result, Sequential, Sgd, Tensor};

/// A small network of every MLP layer (the final Relu only when `relu`: finite differences
/// across its kink are meaningless), its parameters identical on every backend (the generator
/// is counter-based).
fn mlp(ctx: &Context, (inputs, hidden, outputs): (usize, usize, usize), relu: bool) -> Result<Sequential> {
    let model = Sequential::new()
        .layer(Linear::new(ctx, inputs, hidden, 11)?)
        .layer(LayerNorm::new(ctx, hidden)?)
        .layer(Gelu::new())
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

/// `L = Σ y·r` for a fixed random `r`: its gradient w.r.t. x and every parameter from backward,
/// against central differences on the CPU backend.
fn cpu_backward_matches_finite_differences() {
    let ctx = Context::cpu();
    let sizes = (4, 6, 3);
    let mut model = mlp(&ctx, sizes, false).unwrap();
    let x = randn_host(2 * sizes.0, 21);
    let r = randn_host(2 * sizes.2, 22);
    let xt = ctx.from_slice(&x, &[2, sizes.0]).unwrap();
    let loss = |model: &mut Sequential, x: &Tensor| -> f64 {
        let y = model.forward(x).unwrap().to_vec().unwrap();
        y.iter().zip(&r).map(|(&a, &b)| a as f64 * b as f64).sum()
    };
    let y = model.forward(&xt).unwrap();
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
            loss(&mut model, &ctx.from_slice(&xd, &[2, sizes.0]).unwrap())
        }) as f32);
    }
    assert_close("dx", &dx, &want_dx, 2e-2);
    let count = grads.len();
    for (k, grad) in grads.iter().enumerate().take(count) {
        let value = model.params_mut()[k].value().to_vec().unwrap();
        let shape = model.params_mut()[k].value().shape().to_vec();
        let mut want = Vec::new();
        for i in 0..value.len() {
            want.push(numeric(&mut |d| {
                let mut v = value.clone();
                v[i] += d;
                model.params_mut()[k].set_value(ctx.from_slice(&v, &shape).unwrap()).unwrap();
                let l = loss(&mut model, &xt);
                model.params_mut()[k].set_value(ctx.from_slice(&value, &shape).unwrap()).unwrap();
                l
            }) as f32);
        }
        assert_close(&format!("parameter {k}"), grad, &want, 2e-2);
    }
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
        ("gpu_bad_input", Case::Gpu(gpu_bad_input)),
        ("cpu_backward_matches_finite_differences", Case::Cpu(cpu_backward_matches_finite_differences)),
        ("cpu_bad_input", Case::Cpu(cpu_bad_input)),
    ]);
}
