//! Fused optimizers on the GPU against the CPU backend, and the CPU backend against the textbook
//! update written out here; in-place updates leave clones alone; typed errors. Mixed precision
//! (16-bit parameters, f32 masters), matrices-only decay, global-norm clipping, schedules, and the
//! optimizer state's round trip.
mod common;
use common::*;
use ferrocuda::{clip_grad_norm, Adam, Context, DType, Error, LrSchedule, Optimizer, Sgd, Tensor};

/// One launch over these is large enough for whole chunks (and partial ones) ...
const SIZES: [usize; 4] = [1, 31, 4097, (1 << 20) + 3];
/// ... and one over these small enough (≤ 2^16 elements in all) for one-element-a-thread pieces.
const SMALL_SIZES: [usize; 6] = [1, 31, 257, 1280, 4097, 9610];

/// One optimizer step over (parameters, gradients).
type Step = Box<dyn FnMut(&mut [Tensor], &[Tensor]) -> ferrocuda::Result<()>>;
/// Makes a fresh optimizer (so the GPU and CPU runs start from the same state).
type MakeStep = Box<dyn Fn() -> Step>;

fn tensors(ctx: &Context, sizes: &[usize], seed: u64) -> Vec<Tensor> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| ctx.from_slice(&randn_host(n, seed + i as u64), &[n]).unwrap())
        .collect()
}

fn run_steps(ctx: &Context, sizes: &[usize], opt: &mut Step) -> Vec<Vec<f32>> {
    let mut params = tensors(ctx, sizes, 3000);
    for step in 0..3 {
        let grads = tensors(ctx, sizes, 3100 + 10 * step);
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
    for sizes in [&SIZES[..], &SMALL_SIZES[..]] {
        for (name, make) in &configs {
            let got = run_steps(gpu, sizes, &mut make());
            let want = run_steps(&Context::cpu(), sizes, &mut make());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_close(&format!("{name} tensor {i} (n={})", sizes[i]), g, w, 1e-6);
            }
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

/// Under compute-sanitizer (`FERROCUDA_SANITIZER=1`), which slows kernels a hundredfold, the large
/// sizes shrink (still several full chunks and a partial one).
fn large() -> usize {
    if under_sanitizer() {
        3 * 4096 + 5
    } else {
        (1 << 20) + 3
    }
}

/// A mixed parameter list: bf16 and f16 vectors and matrices (biases, gains, weights) beside f32
/// ones, one of them spanning many full chunks.
fn mixed_params(ctx: &Context, seed: u64) -> Vec<Tensor> {
    let specs: Vec<(Vec<usize>, DType)> = vec![
        (vec![31], DType::BF16),
        (vec![64, 33], DType::BF16),
        (vec![1], DType::F16),
        (vec![large()], DType::BF16),
        (vec![100, 41], DType::F32),
        (vec![7], DType::F32),
        (vec![4096, 3], DType::F16),
    ];
    specs
        .iter()
        .enumerate()
        .map(|(i, (shape, dtype))| {
            let n = shape.iter().product();
            ctx.from_slice(&randn_host(n, seed + i as u64), shape).and_then(|t| t.to_dtype(*dtype)).unwrap()
        })
        .collect()
}

fn mixed_adam() -> Adam {
    Adam::adamw(1e-2, 0.1).betas(0.9, 0.99).decay_matrices_only(true).schedule(LrSchedule::WarmupCosine {
        peak: 1e-2,
        min: 1e-3,
        warmup: 2,
        total: 5,
    })
}

/// Three clipped steps of `adam` on mixed parameters; returns the parameters and the state.
fn mixed_steps(ctx: &Context, adam: &mut Adam) -> (Vec<Tensor>, Vec<(String, Tensor)>) {
    let mut params = mixed_params(ctx, 4000);
    for step in 0..3 {
        let grads = mixed_params(ctx, 4100 + 10 * step);
        let refs: Vec<&Tensor> = grads.iter().collect();
        let norm = clip_grad_norm(&refs, 40.0).unwrap();
        adam.step_clipped(&mut params, &grads, &norm).unwrap();
    }
    (params, adam.state_tensors().unwrap())
}

/// Each 16-bit parameter is its master rounded to its dtype, bit for bit.
fn assert_params_are_rounded_masters(what: &str, params: &[Tensor], state: &[(String, Tensor)]) {
    for (i, p) in params.iter().enumerate() {
        let master = state.iter().find(|(n, _)| *n == format!("{i}.master"));
        match (p.dtype(), master) {
            (DType::F32, None) => {}
            (dtype, Some((_, m))) if dtype != DType::F32 => {
                let rounded: Vec<f32> = m.to_vec().unwrap().iter().map(|&x| dtype.round(x as f64)).collect();
                assert_same(
                    &format!("{what}: parameter {i} = rounded master"),
                    &p.to_vec().unwrap(),
                    &rounded,
                );
            }
            (dtype, m) => panic!("{what}: parameter {i} ({dtype:?}) has master: {}", m.is_some()),
        }
    }
}

/// Mixed-precision AdamW (clipped, scheduled, matrices-only decay) over a mixed-dtype list, GPU
/// vs the CPU backend: masters and moments to f32 accuracy, parameters = rounded masters on both;
/// the capturable variant is the same bit for bit.
fn mixed_precision_matches_cpu(gpu: &Context) {
    let (got, got_state) = mixed_steps(gpu, &mut mixed_adam());
    let (want, want_state) = mixed_steps(&Context::cpu(), &mut mixed_adam());
    assert_params_are_rounded_masters("gpu", &got, &got_state);
    assert_params_are_rounded_masters("cpu", &want, &want_state);
    assert_eq!(got_state.len(), want_state.len());
    for ((name, g), (wname, w)) in got_state.iter().zip(&want_state) {
        assert_eq!(name, wname);
        assert_close(name, &g.to_vec().unwrap(), &w.to_vec().unwrap(), 1e-5);
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(
            &format!("parameter {i} ({:?})", g.dtype()),
            &g.to_vec().unwrap(),
            &w.to_vec().unwrap(),
            1e-2,
        );
    }
    let (captured, captured_state) = mixed_steps(gpu, &mut mixed_adam().capturable(true));
    for (i, (c, g)) in captured.iter().zip(&got).enumerate() {
        assert_same(&format!("capturable parameter {i}"), &c.to_vec().unwrap(), &g.to_vec().unwrap());
    }
    for ((name, c), (_, g)) in captured_state.iter().zip(&got_state) {
        assert_same(&format!("capturable {name}"), &c.to_vec().unwrap(), &g.to_vec().unwrap());
    }
}

/// f32 parameters stepped together with 16-bit ones take exactly the f32-only path.
fn f32_params_unchanged_by_mixing(gpu: &Context) {
    let all = mixed_params(gpu, 4200);
    let grads = mixed_params(gpu, 4300);
    let f32_only: Vec<usize> = (0..all.len()).filter(|&i| all[i].dtype() == DType::F32).collect();
    let mut mixed = all.clone();
    let mut alone: Vec<Tensor> = f32_only.iter().map(|&i| all[i].clone()).collect();
    let alone_grads: Vec<Tensor> = f32_only.iter().map(|&i| grads[i].clone()).collect();
    let (mut a, mut b) = (Adam::adamw(1e-2, 0.1), Adam::adamw(1e-2, 0.1));
    for _ in 0..2 {
        a.step(&mut mixed, &grads).unwrap();
        b.step(&mut alone, &alone_grads).unwrap();
    }
    for (k, &i) in f32_only.iter().enumerate() {
        assert_same(&format!("f32 parameter {i}"), &mixed[i].to_vec().unwrap(), &alone[k].to_vec().unwrap());
    }
}

/// Matrices-only decay: with zero gradients (no Adam update) a vector keeps its values and a
/// matrix decays by `1 − lr·wd`.
fn matrices_only_decay_on(ctx: &Context) {
    let (v0, m0) = (randn_host(8, 50), randn_host(32, 51));
    let mut params = [ctx.from_slice(&v0, &[8]).unwrap(), ctx.from_slice(&m0, &[4, 8]).unwrap()];
    let grads = [ctx.zeros(&[8]).unwrap(), ctx.zeros(&[4, 8]).unwrap()];
    Adam::adamw(0.1, 0.5).decay_matrices_only(true).step(&mut params, &grads).unwrap();
    assert_same("vector (no decay)", &params[0].to_vec().unwrap(), &v0);
    let decayed: Vec<f32> = m0.iter().map(|&x| x * (1.0 - 0.1 * 0.5)).collect();
    assert_close("matrix (decayed)", &params[1].to_vec().unwrap(), &decayed, 1e-6);
    let mut params = [ctx.from_slice(&v0, &[8]).unwrap()];
    Adam::adamw(0.1, 0.5).step(&mut params, &grads[..1]).unwrap();
    assert!(params[0].to_vec().unwrap() != v0, "without the option vectors decay too");
}

fn cpu_matrices_only_decay() {
    matrices_only_decay_on(&Context::cpu());
}

fn gpu_matrices_only_decay(gpu: &Context) {
    matrices_only_decay_on(gpu);
}

/// The f64 norm of the gradients' values as their dtype holds them.
fn norm_f64(grads: &[Tensor]) -> f64 {
    grads.iter().flat_map(|g| g.to_vec().unwrap()).map(|x| x as f64 * x as f64).sum::<f64>().sqrt()
}

/// Gradient lists: single tensors of 1, 31 and 2^20+3 elements, and 80 tensors of odd sizes
/// (about 1.3M elements), in f32 and bf16.
fn grad_lists(ctx: &Context) -> Vec<(String, Vec<Tensor>)> {
    let mut lists = Vec::new();
    for dtype in [DType::F32, DType::BF16] {
        let make = |n: usize, seed: u64| {
            ctx.from_slice(&randn_host(n, seed), &[n]).and_then(|t| t.to_dtype(dtype)).unwrap()
        };
        for n in [1, 31, large()] {
            lists.push((format!("{dtype:?} [{n}]"), vec![make(n, 60 + n as u64)]));
        }
        let many = (0..80).map(|i| make((i * 7919 + 13) % 33000 + 1, 70 + i as u64)).collect();
        lists.push((format!("{dtype:?} 80 tensors"), many));
    }
    lists
}

/// clip_grad_norm vs the f64 norm of the CPU backend, below and above `max_norm`; two runs are
/// bit-identical; the CPU backend agrees.
fn clip_grad_norm_matches_f64(gpu: &Context) {
    for (name, grads) in grad_lists(gpu) {
        let refs: Vec<&Tensor> = grads.iter().collect();
        let want = norm_f64(&grads);
        for max_norm in [want * 2.0, want / 2.0] {
            let max_norm = max_norm as f32;
            poison_pool(gpu, &[2]);
            let got = clip_grad_norm(&refs, max_norm).unwrap();
            let (norm, factor) = (got.norm().unwrap(), got.factor().unwrap());
            assert_close(&format!("{name}: norm"), &[norm], &[want as f32], 1e-5);
            let want_factor = (max_norm as f64 / (want + 1e-6)).min(1.0);
            assert_close(&format!("{name}: factor"), &[factor], &[want_factor as f32], 1e-5);
            let again = clip_grad_norm(&refs, max_norm).unwrap();
            assert_same(
                &format!("{name}: second run"),
                &again.tensor().to_vec().unwrap(),
                &got.tensor().to_vec().unwrap(),
            );
            let cpu: Vec<Tensor> = grads.iter().map(|g| g.to_context(&Context::cpu()).unwrap()).collect();
            let cpu_refs: Vec<&Tensor> = cpu.iter().collect();
            let on_cpu = clip_grad_norm(&cpu_refs, max_norm).unwrap();
            assert_close(
                &format!("{name}: cpu"),
                &on_cpu.tensor().to_vec().unwrap(),
                &got.tensor().to_vec().unwrap(),
                1e-5,
            );
        }
    }
}

fn cpu_clip_grad_norm_is_textbook() {
    let cpu = Context::cpu();
    let (a, b) = (randn_host(31, 80), randn_host(1000, 81));
    let grads = [cpu.from_slice(&a, &[31]).unwrap(), cpu.from_slice(&b, &[10, 100]).unwrap()];
    let want = a.iter().chain(&b).map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let got = clip_grad_norm(&[&grads[0], &grads[1]], 1.0).unwrap();
    assert_eq!(got.norm().unwrap(), want as f32);
    assert_eq!(got.factor().unwrap(), 1.0 / (want as f32 + 1e-6));
}

/// A clipped step equals scaling the gradients (`scale_grads`) then stepping, bit for bit (f32
/// gradients); `scale_grads` itself matches the CPU backend, also for bf16 gradients.
fn clipped_step_is_scaled_step_on(ctx: &Context) {
    let n = [large(), 1000, 31];
    let params = || {
        n.iter()
            .enumerate()
            .map(|(i, &k)| ctx.from_slice(&randn_host(k, 90 + i as u64), &[k]).unwrap())
            .collect::<Vec<_>>()
    };
    let grads: Vec<Tensor> = n
        .iter()
        .enumerate()
        .map(|(i, &k)| ctx.from_slice(&randn_host(k, 95 + i as u64), &[k]).unwrap())
        .collect();
    let refs: Vec<&Tensor> = grads.iter().collect();
    let norm = clip_grad_norm(&refs, 1.0).unwrap();
    for make in [|| Adam::adamw(1e-2, 0.1), || Adam::new(1e-2).weight_decay(0.1)] {
        let (mut clipped, mut scaled) = (params(), params());
        make().step_clipped(&mut clipped, &grads, &norm).unwrap();
        let mut scaled_grads = grads.clone();
        let mut grad_refs: Vec<&mut Tensor> = scaled_grads.iter_mut().collect();
        norm.scale_grads(&mut grad_refs).unwrap();
        make().step(&mut scaled, &scaled_grads).unwrap();
        for (i, (c, s)) in clipped.iter().zip(&scaled).enumerate() {
            assert_same(&format!("adam tensor {i}"), &c.to_vec().unwrap(), &s.to_vec().unwrap());
        }
        // The optimizer's own clipping (max_grad_norm) is the same step, and keeps the same norm.
        let (mut own, mut adam) = (params(), make().max_grad_norm(1.0));
        adam.step(&mut own, &grads).unwrap();
        for (i, (o, c)) in own.iter().zip(&clipped).enumerate() {
            assert_same(&format!("max_grad_norm tensor {i}"), &o.to_vec().unwrap(), &c.to_vec().unwrap());
        }
        let kept = adam.last_grad_norm().unwrap().tensor().to_vec().unwrap();
        assert_same("max_grad_norm's norm", &kept, &norm.tensor().to_vec().unwrap());
        let err = adam.step_clipped(&mut own, &grads, &norm).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { op: "adam", .. }), "{err}");
        let factor = norm.factor().unwrap();
        assert!(factor < 1.0, "the case clips ({factor})");
        assert_same(
            "grads untouched by scale_grads on a copy",
            &grads[1].to_vec().unwrap(),
            &randn_host(1000, 96),
        );
    }
    let (mut clipped, mut scaled) = (params(), params());
    Sgd::new(0.1).momentum(0.9).step_clipped(&mut clipped, &grads, &norm).unwrap();
    let mut scaled_grads = grads.clone();
    norm.scale_grads(&mut scaled_grads.iter_mut().collect::<Vec<_>>()).unwrap();
    Sgd::new(0.1).momentum(0.9).step(&mut scaled, &scaled_grads).unwrap();
    for (i, (c, s)) in clipped.iter().zip(&scaled).enumerate() {
        assert_same(&format!("sgd tensor {i}"), &c.to_vec().unwrap(), &s.to_vec().unwrap());
    }
}

fn cpu_clipped_step_is_scaled_step() {
    clipped_step_is_scaled_step_on(&Context::cpu());
}

fn gpu_clipped_step_is_scaled_step(gpu: &Context) {
    clipped_step_is_scaled_step_on(gpu);
    let cpu = Context::cpu();
    for (name, grads) in grad_lists(gpu) {
        let refs: Vec<&Tensor> = grads.iter().collect();
        let max_norm = (norm_f64(&grads) / 3.0) as f32;
        let norm = clip_grad_norm(&refs, max_norm).unwrap();
        let mut scaled = grads.clone();
        norm.scale_grads(&mut scaled.iter_mut().collect::<Vec<_>>()).unwrap();
        let mut on_cpu: Vec<Tensor> = grads.iter().map(|g| g.to_context(&cpu).unwrap()).collect();
        let cpu_norm = clip_grad_norm(&on_cpu.iter().collect::<Vec<_>>(), max_norm).unwrap();
        cpu_norm.scale_grads(&mut on_cpu.iter_mut().collect::<Vec<_>>()).unwrap();
        let tol = if grads[0].dtype() == DType::F32 { 1e-5 } else { 1e-2 };
        for (i, (g, c)) in scaled.iter().zip(&on_cpu).enumerate() {
            assert_close(
                &format!("{name}: scaled tensor {i}"),
                &g.to_vec().unwrap(),
                &c.to_vec().unwrap(),
                tol,
            );
        }
    }
}

/// A clipped, scheduled, mixed-precision step captured into a graph: three replays equal three
/// eager steps, bit for bit (nothing host-side in the step).
fn clipped_step_in_a_graph(gpu: &Context) {
    let grads = mixed_params(gpu, 4500);
    let refs: Vec<&Tensor> = grads.iter().collect();
    let (mut eager, mut replayed) = (mixed_params(gpu, 4400), mixed_params(gpu, 4400));
    let mut own = mixed_params(gpu, 4400);
    let (mut a, mut b) = (mixed_adam(), mixed_adam().capturable(true));
    let mut c = mixed_adam().capturable(true).max_grad_norm(40.0);
    for _ in 0..4 {
        let norm = clip_grad_norm(&refs, 40.0).unwrap();
        a.step_clipped(&mut eager, &grads, &norm).unwrap();
    }
    b.step_clipped(&mut replayed, &grads, &clip_grad_norm(&refs, 40.0).unwrap()).unwrap();
    c.step(&mut own, &grads).unwrap();
    let own_graph = gpu.capture(|| c.step(&mut own, &grads)).unwrap();
    let mut norm = None;
    let graph = gpu
        .capture(|| {
            let n = clip_grad_norm(&refs, 40.0)?;
            b.step_clipped(&mut replayed, &grads, &n)?;
            norm = Some(n);
            Ok(())
        })
        .unwrap();
    for _ in 0..3 {
        graph.launch().unwrap();
        own_graph.launch().unwrap();
    }
    let own_norm = c.last_grad_norm().unwrap().tensor().to_vec().unwrap();
    assert_same("max_grad_norm's norm", &own_norm, &norm.as_ref().unwrap().tensor().to_vec().unwrap());
    assert_close("norm", &[norm.unwrap().norm().unwrap()], &[norm_f64(&grads) as f32], 1e-5);
    assert_eq!(b.steps().unwrap(), 4);
    for (i, ((r, o), e)) in replayed.iter().zip(&own).zip(&eager).enumerate() {
        assert_same(&format!("replayed parameter {i}"), &r.to_vec().unwrap(), &e.to_vec().unwrap());
        assert_same(
            &format!("replayed max_grad_norm parameter {i}"),
            &o.to_vec().unwrap(),
            &e.to_vec().unwrap(),
        );
    }
}

/// `lr_at` equals gpt_char_ref.py's `lr_at` (its defaults, in f64, rounded to f32).
fn cpu_schedule_matches_formula() {
    let s = LrSchedule::WarmupCosine { peak: 1e-3, min: 1e-4, warmup: 100, total: 2000 };
    let python = |it: usize| -> f64 {
        if it < 100 {
            return 1e-3 * (it + 1) as f64 / 100.0;
        }
        let r = (it - 100) as f64 / 1900.0;
        1e-4 + 0.5 * (1.0 + (std::f64::consts::PI * r).cos()) * (1e-3 - 1e-4)
    };
    for step in [0, 1, 50, 99, 100, 101, 1000, 1999, 2000] {
        assert_eq!(s.lr_at(step), python(step) as f32, "step {step}");
    }
    assert_eq!(s.lr_at(5000), 1e-4, "after total: min");
    assert_eq!(LrSchedule::Constant(0.25).lr_at(7), 0.25);
}

/// An optimizer with a schedule steps as one whose `lr` is set to the schedule's before each step.
fn schedule_drives_steps_on(ctx: &Context) {
    let s = LrSchedule::WarmupCosine { peak: 1e-2, min: 1e-3, warmup: 3, total: 6 };
    let mut scheduled = [ctx.from_slice(&randn_host(1000, 110), &[1000]).unwrap()];
    let mut manual = scheduled.clone();
    let (mut a, mut b) = (Adam::adamw(123.0, 0.1).schedule(s), Adam::adamw(0.0, 0.1));
    let (mut c, mut d) = (Sgd::new(123.0).momentum(0.9).schedule(s), Sgd::new(0.0).momentum(0.9));
    for step in 0..8 {
        let grads = [ctx.from_slice(&randn_host(1000, 120 + step as u64), &[1000]).unwrap()];
        (b.lr, d.lr) = (s.lr_at(step), s.lr_at(step));
        a.step(&mut scheduled, &grads).unwrap();
        b.step(&mut manual, &grads).unwrap();
        c.step(&mut scheduled, &grads).unwrap();
        d.step(&mut manual, &grads).unwrap();
    }
    assert_same("scheduled", &scheduled[0].to_vec().unwrap(), &manual[0].to_vec().unwrap());
}

fn cpu_schedule_drives_steps() {
    schedule_drives_steps_on(&Context::cpu());
}

fn gpu_schedule_drives_steps(gpu: &Context) {
    schedule_drives_steps_on(gpu);
}

/// state_tensors → load_state into a fresh optimizer → the next steps are identical; the copies
/// do not change with later steps.
fn state_round_trip_on(ctx: &Context, capturable: bool) {
    let mut adam = mixed_adam().capturable(capturable);
    let (mut params, state) = mixed_steps(ctx, &mut adam);
    let names: Vec<&str> = state.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"0.master") && !names.contains(&"4.master") && names.contains(&"4.exp_avg_sq"));
    let step = state.iter().find(|(n, _)| n == "step").unwrap();
    assert_eq!((step.1.shape(), step.1.to_scalar().unwrap()), (&[][..], 3.0));
    let snapshot: Vec<Vec<f32>> = state.iter().map(|(_, t)| t.to_vec().unwrap()).collect();
    let mut restored_params: Vec<Tensor> = params.iter().map(|p| p.copy().unwrap()).collect();
    let mut fresh = mixed_adam().capturable(capturable);
    fresh.load_state(&params.iter().collect::<Vec<_>>(), &state).unwrap();
    for step in 0..2 {
        let grads = mixed_params(ctx, 4600 + step);
        adam.step(&mut params, &grads).unwrap();
        fresh.step(&mut restored_params, &grads).unwrap();
    }
    for (i, (a, b)) in params.iter().zip(&restored_params).enumerate() {
        assert_same(
            &format!("parameter {i} after the round trip"),
            &a.to_vec().unwrap(),
            &b.to_vec().unwrap(),
        );
    }
    for ((name, t), before) in state.iter().zip(&snapshot) {
        assert_same(&format!("{name} snapshot"), &t.to_vec().unwrap(), before);
    }
}

fn cpu_state_round_trip() {
    state_round_trip_on(&Context::cpu(), false);
}

fn gpu_state_round_trip(gpu: &Context) {
    state_round_trip_on(gpu, false);
    state_round_trip_on(gpu, true);
    // A state saved on the GPU loads into an optimizer on the CPU backend and steps the same.
    let mut adam = mixed_adam();
    let (_, state) = mixed_steps(gpu, &mut adam);
    let cpu = Context::cpu();
    let params: Vec<Tensor> = mixed_params(&cpu, 1);
    Adam::adamw(1e-2, 0.1).load_state(&params.iter().collect::<Vec<_>>(), &state).unwrap();
}

/// Typed errors for a state that does not fit the parameters, and for bad mixed-precision and
/// clipping input.
fn bad_state_and_mixed_input_on(ctx: &Context) {
    let mut adam = mixed_adam();
    let (params, state) = mixed_steps(ctx, &mut adam);
    let refs: Vec<&Tensor> = params.iter().collect();
    let load = |state: Vec<(String, Tensor)>| mixed_adam().load_state(&refs, &state).unwrap_err();
    let without = |name: &str| state.iter().filter(|(n, _)| n != name).cloned().collect::<Vec<_>>();
    let replaced = |name: &str, t: Tensor| {
        state
            .iter()
            .map(|(n, s)| (n.clone(), if n == name { t.clone() } else { s.clone() }))
            .collect::<Vec<_>>()
    };
    let err = load(without("1.exp_avg"));
    assert!(
        matches!(&err, Error::InvalidArgument { op: "Adam::load_state", reason, .. } if reason.contains("1.exp_avg")),
        "{err}"
    );
    let err = load(without("0.master"));
    assert!(matches!(err, Error::InvalidArgument { op: "Adam::load_state", .. }), "{err}");
    let err = load(without("step"));
    assert!(matches!(err, Error::InvalidArgument { op: "Adam::load_state", .. }), "{err}");
    let err = load(replaced("1.exp_avg_sq", ctx.zeros(&[33, 64]).unwrap()));
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "Adam::load_state", lhs, rhs } if lhs == &[64, 33] && rhs == &[33, 64]),
        "{err}"
    );
    let err = load(replaced("2.master", ctx.zeros(&[1]).unwrap().to_dtype(DType::F16).unwrap()));
    assert!(matches!(err, Error::DTypeMismatch { op: "Adam::load_state", .. }), "{err}");
    let err = load(replaced("step", ctx.from_slice(&[1.5f32], &[]).unwrap()));
    assert!(matches!(err, Error::InvalidArgument { op: "Adam::load_state", .. }), "{err}");
    let mut extra = state.clone();
    extra.push(("4.master".into(), ctx.zeros(&[100, 41]).unwrap()));
    let err = load(extra);
    assert!(matches!(&err, Error::InvalidArgument { reason, .. } if reason.contains("4.master")), "{err}");
    let err = mixed_adam().load_state(&refs[..3], &state).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "Adam::load_state", .. }), "{err}");

    // A parameter whose dtype changed since the first step, a gradient of another dtype, and
    // 16-bit SGD are refused, and the refused steps do not count.
    let mut swapped = params.clone();
    swapped[0] = swapped[0].to_dtype(DType::F16).unwrap();
    let grads = mixed_params(ctx, 4700);
    let mut swapped_grads = grads.clone();
    swapped_grads[0] = swapped_grads[0].to_dtype(DType::F16).unwrap();
    let err = adam.step(&mut swapped, &swapped_grads).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "adam", lhs: DType::F16, rhs: DType::BF16 }), "{err}");
    let mut f32_grads = grads.clone();
    f32_grads[3] = f32_grads[3].to_dtype(DType::F32).unwrap();
    let err = adam.step(&mut params.clone(), &f32_grads).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "adam", .. }), "{err}");
    assert_eq!(adam.steps().unwrap(), 3);
    let err = Sgd::new(0.1).step(&mut params[..1].to_vec(), &grads[..1]).unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { op: "sgd", dtype: DType::BF16 }), "{err}");
    let err = clip_grad_norm(&[], 1.0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "clip_grad_norm", .. }), "{err}");
    for max_norm in [0.0, -1.0, f32::NAN] {
        let err = clip_grad_norm(&refs, max_norm).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { op: "clip_grad_norm", .. }), "{max_norm}: {err}");
    }
    let empty = ctx.zeros(&[0]).unwrap();
    let norm = clip_grad_norm(&[&empty], 1.0).unwrap();
    assert_eq!((norm.norm().unwrap(), norm.factor().unwrap()), (0.0, 1.0));
}

fn cpu_bad_state_and_mixed_input() {
    bad_state_and_mixed_input_on(&Context::cpu());
}

fn gpu_bad_state_and_mixed_input(gpu: &Context) {
    bad_state_and_mixed_input_on(gpu);
    let cpu = Context::cpu();
    let (g, c) = (gpu.zeros(&[4]).unwrap(), cpu.zeros(&[4]).unwrap());
    let err = clip_grad_norm(&[&g, &c], 1.0).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "clip_grad_norm", .. }), "{err}");
    let norm = clip_grad_norm(&[&c], 1.0).unwrap();
    let err = Adam::new(1e-3).step_clipped(&mut [g.clone()], std::slice::from_ref(&g), &norm).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "adam", .. }), "{err}");
    let long = LrSchedule::WarmupCosine { peak: 1e-3, min: 1e-4, warmup: 10, total: 1 << 25 };
    let mut adam = Adam::new(1e-3).capturable(true).schedule(long);
    let err = adam.step(&mut [g.clone()], std::slice::from_ref(&g)).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "adam", .. }), "{err}");
    assert_eq!(adam.steps().unwrap(), 0);
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
        ("gpu_mixed_precision_matches_cpu", Case::Gpu(mixed_precision_matches_cpu)),
        ("gpu_f32_params_unchanged_by_mixing", Case::Gpu(f32_params_unchanged_by_mixing)),
        ("cpu_matrices_only_decay", Case::Cpu(cpu_matrices_only_decay)),
        ("gpu_matrices_only_decay", Case::Gpu(gpu_matrices_only_decay)),
        ("gpu_clip_grad_norm_matches_f64", Case::Gpu(clip_grad_norm_matches_f64)),
        ("cpu_clip_grad_norm_is_textbook", Case::Cpu(cpu_clip_grad_norm_is_textbook)),
        ("cpu_clipped_step_is_scaled_step", Case::Cpu(cpu_clipped_step_is_scaled_step)),
        ("gpu_clipped_step_is_scaled_step", Case::Gpu(gpu_clipped_step_is_scaled_step)),
        ("gpu_clipped_step_in_a_graph", Case::Gpu(clipped_step_in_a_graph)),
        ("cpu_schedule_matches_formula", Case::Cpu(cpu_schedule_matches_formula)),
        ("cpu_schedule_drives_steps", Case::Cpu(cpu_schedule_drives_steps)),
        ("gpu_schedule_drives_steps", Case::Gpu(gpu_schedule_drives_steps)),
        ("cpu_state_round_trip", Case::Cpu(cpu_state_round_trip)),
        ("gpu_state_round_trip", Case::Gpu(gpu_state_round_trip)),
        ("cpu_bad_state_and_mixed_input", Case::Cpu(cpu_bad_state_and_mixed_input)),
        ("gpu_bad_state_and_mixed_input", Case::Gpu(gpu_bad_state_and_mixed_input)),
    ]);
}
