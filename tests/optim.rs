//! Fused optimizers on the GPU against the CPU backend, and the CPU backend against the textbook
//! update written out here; in-place updates leave clones alone; typed errors.
mod common;
use common::*;
use ferrocuda::{Adam, Context, Error, Optimizer, Sgd, Tensor};

const SIZES: [usize; 4] = [1, 31, 4097, (1 << 20) + 3];

/// One optimizer step over (parameters, gradients).
type Step = Box<dyn FnMut(&mut [Tensor], &[Tensor]) -> ferrocuda::Result<()>>;
/// Makes a fresh optimizer (so the GPU and CPU runs start from the same state).
type MakeStep = Box<dyn Fn() -> Step>;

fn tensors(ctx: &Context, seed: u64) -> Vec<Tensor> {
    SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| ctx.from_slice(&randn_host(n, seed + i as u64), &[n]).unwrap())
        .collect()
}

fn run_steps(ctx: &Context, opt: &mut Step) -> Vec<Vec<f32>> {
    let mut params = tensors(ctx, 3000);
    for step in 0..3 {
        let grads = tensors(ctx, 3100 + 10 * step);
        opt(&mut params, &grads).unwrap();
    }
    params.iter().map(|p| p.to_vec().unwrap()).collect()
}

fn optimizers_match_cpu(gpu: &Context) {
    let configs: Vec<(&str, MakeStep)> = vec![
        (
            "sgd",
            Box::new(|| {
                let mut o = Sgd::new(0.1);
                Box::new(move |p, g| o.step(p, g))
            }),
        ),
        (
            "sgd momentum wd",
            Box::new(|| {
                let mut o = Sgd::new(0.1).momentum(0.9).weight_decay(0.01);
                Box::new(move |p, g| o.step(p, g))
            }),
        ),
        (
            "sgd nesterov",
            Box::new(|| {
                let mut o = Sgd::new(0.05).momentum(0.9).nesterov(true);
                Box::new(move |p, g| o.step(p, g))
            }),
        ),
        (
            "adam",
            Box::new(|| {
                let mut o = Adam::new(1e-3).weight_decay(0.01);
                Box::new(move |p, g| o.step(p, g))
            }),
        ),
        (
            "adamw",
            Box::new(|| {
                let mut o = Adam::adamw(1e-3, 0.01);
                Box::new(move |p, g| o.step(p, g))
            }),
        ),
    ];
    for (name, make) in &configs {
        let got = run_steps(gpu, &mut make());
        let want = run_steps(&Context::cpu(), &mut make());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{name} tensor {i} (n={})", SIZES[i]), g, w, 1e-6);
        }
    }
}

fn updates_in_place_but_not_clones(gpu: &Context) {
    let p = gpu.full(&[1000], 1.0).unwrap();
    let alias = p.clone();
    let mut params = [p];
    Sgd::new(0.5).step(&mut params, &[gpu.full(&[1000], 2.0).unwrap()]).unwrap();
    assert!(params[0].to_vec().unwrap().iter().all(|&v| v == 0.0));
    assert!(alias.to_vec().unwrap().iter().all(|&v| v == 1.0), "a clone saw the update");
}

fn bad_input_on(ctx: &Context) {
    let mut params = [ctx.zeros(&[4]).unwrap(), ctx.zeros(&[5]).unwrap()];
    let err = Adam::new(1e-3).step(&mut params, &[ctx.zeros(&[4]).unwrap()]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "adam", .. }), "{err}");
    let err =
        Sgd::new(0.1).step(&mut params, &[ctx.zeros(&[4]).unwrap(), ctx.zeros(&[6]).unwrap()]).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "sgd", .. }), "{err}");
    let mut adam = Adam::new(1e-3);
    adam.step(&mut params, &[ctx.zeros(&[4]).unwrap(), ctx.zeros(&[5]).unwrap()]).unwrap();
    let err = adam.step(&mut params[..1], &[ctx.zeros(&[4]).unwrap()]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "adam", .. }), "{err}");
}

fn gpu_bad_input(gpu: &Context) {
    bad_input_on(gpu);
}

fn cpu_bad_input() {
    bad_input_on(&Context::cpu());
}

/// A parameter list of the same count as the first step's but with other shapes is refused (the
/// kernels would index the state past its end; the CPU path panicked), and the refused step
/// leaves the optimizer as it was: the next good step matches an optimizer that never saw it.
fn state_checked_against_shapes_on(ctx: &Context) {
    let params = || {
        [ctx.from_slice(&randn_host(4, 1), &[4]).unwrap(), ctx.from_slice(&randn_host(5, 2), &[5]).unwrap()]
    };
    let grads = || {
        [ctx.from_slice(&randn_host(4, 3), &[4]).unwrap(), ctx.from_slice(&randn_host(5, 4), &[5]).unwrap()]
    };
    let mut swapped = [ctx.zeros(&[5]).unwrap(), ctx.zeros(&[4]).unwrap()];
    let swapped_grads = [ctx.zeros(&[5]).unwrap(), ctx.zeros(&[4]).unwrap()];
    let mut longer = [ctx.zeros(&[4]).unwrap(), ctx.zeros(&[6]).unwrap()];
    let longer_grads = [ctx.zeros(&[4]).unwrap(), ctx.zeros(&[6]).unwrap()];

    let (mut adam, mut fresh) = (Adam::new(1e-2), Adam::new(1e-2));
    let (mut p, mut q) = (params(), params());
    adam.step(&mut p, &grads()).unwrap();
    fresh.step(&mut q, &grads()).unwrap();
    let err = adam.step(&mut swapped, &swapped_grads).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "adam", lhs, rhs } if lhs == &[5] && rhs == &[4]),
        "{err}"
    );
    let err = adam.step(&mut longer, &longer_grads).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "adam", .. }), "{err}");
    adam.step(&mut p, &grads()).unwrap();
    fresh.step(&mut q, &grads()).unwrap();
    for (a, b) in p.iter().zip(&q) {
        assert_same("after a refused step (bias correction)", &a.to_vec().unwrap(), &b.to_vec().unwrap());
    }

    let mut sgd = Sgd::new(0.1).momentum(0.9);
    let mut p = params();
    sgd.step(&mut p, &grads()).unwrap();
    let err = sgd.step(&mut longer, &longer_grads).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "sgd", .. }), "{err}");
    let err = sgd.step(&mut swapped, &swapped_grads).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "sgd", .. }), "{err}");
}

fn cpu_state_checked_against_shapes() {
    state_checked_against_shapes_on(&Context::cpu());
}

fn gpu_state_checked_against_shapes(gpu: &Context) {
    state_checked_against_shapes_on(gpu);
}

/// Parameters moved to another stream or to the CPU backend after the first step are refused
/// (the kernel would run on one stream against state of another; the CPU path panicked on Adam's
/// CUDA state and silently dropped SGD's momentum); moved back, stepping goes on as before.
fn gpu_state_checked_against_contexts(gpu: &Context) {
    let other = gpu.new_stream().unwrap();
    let cpu = Context::cpu();
    let mut params = [gpu.from_slice(&randn_host(1000, 5), &[1000]).unwrap()];
    let grads = [gpu.from_slice(&randn_host(1000, 6), &[1000]).unwrap()];
    let mut adam = Adam::new(1e-2);
    let mut sgd = Sgd::new(0.1).momentum(0.9);
    adam.step(&mut params, &grads).unwrap();
    sgd.step(&mut params, &grads).unwrap();
    for ctx in [&other, &cpu] {
        let mut moved = [params[0].to_context(ctx).unwrap()];
        let moved_grads = [grads[0].to_context(ctx).unwrap()];
        let err = adam.step(&mut moved, &moved_grads).unwrap_err();
        assert!(matches!(err, Error::DeviceMismatch { op: "adam", .. }), "{ctx:?}: {err}");
        let err = sgd.step(&mut moved, &moved_grads).unwrap_err();
        assert!(matches!(err, Error::DeviceMismatch { op: "sgd", .. }), "{ctx:?}: {err}");
    }
    // The same steps on the CPU backend from the start agree: nothing was counted or dropped.
    let mut cpu_params = [cpu.from_slice(&randn_host(1000, 5), &[1000]).unwrap()];
    let cpu_grads = [cpu.from_slice(&randn_host(1000, 6), &[1000]).unwrap()];
    let (mut cpu_adam, mut cpu_sgd) = (Adam::new(1e-2), Sgd::new(0.1).momentum(0.9));
    cpu_adam.step(&mut cpu_params, &cpu_grads).unwrap();
    cpu_sgd.step(&mut cpu_params, &cpu_grads).unwrap();
    adam.step(&mut params, &grads).unwrap();
    sgd.step(&mut params, &grads).unwrap();
    cpu_adam.step(&mut cpu_params, &cpu_grads).unwrap();
    cpu_sgd.step(&mut cpu_params, &cpu_grads).unwrap();
    assert_close("after refused steps", &params[0].to_vec().unwrap(), &cpu_params[0].to_vec().unwrap(), 1e-6);
}

fn cpu_matches_textbook() {
    let cpu = Context::cpu();
    let (p0, g) = (randn_host(100, 1), randn_host(100, 2));
    let mut params = [cpu.from_slice(&p0, &[100]).unwrap()];
    let grads = [cpu.from_slice(&g, &[100]).unwrap()];
    let mut adam = Adam::new(0.01);
    adam.step(&mut params, &grads).unwrap();
    adam.step(&mut params, &grads).unwrap();
    let got = params[0].to_vec().unwrap();
    for i in 0..100 {
        let (mut p, mut m, mut v) = (p0[i] as f64, 0.0f64, 0.0f64);
        for t in 1..=2 {
            let gi = g[i] as f64;
            m = 0.9 * m + 0.1 * gi;
            v = 0.999 * v + 0.001 * gi * gi;
            p -= 0.01 * (m / (1.0 - 0.9f64.powi(t))) / ((v / (1.0 - 0.999f64.powi(t))).sqrt() + 1e-8);
        }
        assert!((got[i] as f64 - p).abs() < 1e-6, "adam[{i}]: {} vs {p}", got[i]);
    }
}

fn main() {
    run(&[
        ("gpu_optimizers_match_cpu", Case::Gpu(optimizers_match_cpu)),
        ("gpu_updates_in_place_but_not_clones", Case::Gpu(updates_in_place_but_not_clones)),
        ("gpu_bad_input", Case::Gpu(gpu_bad_input)),
        ("cpu_bad_input", Case::Cpu(cpu_bad_input)),
        ("cpu_matches_textbook", Case::Cpu(cpu_matches_textbook)),
        ("cpu_state_checked_against_shapes", Case::Cpu(cpu_state_checked_against_shapes)),
        ("gpu_state_checked_against_shapes", Case::Gpu(gpu_state_checked_against_shapes)),
        ("gpu_state_checked_against_contexts", Case::Gpu(gpu_state_checked_against_contexts)),
    ]);
}
