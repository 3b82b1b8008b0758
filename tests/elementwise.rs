//! Elementwise ops on the GPU against the CPU backend (f64 oracle), and the CPU backend against
//! plain f64 loops.
mod common;
use common::*;
use ferrocuda::{Context, Error, Tensor};

type Unary = fn(&Tensor) -> ferrocuda::Result<Tensor>;
type Binary = fn(&Tensor, &Tensor) -> ferrocuda::Result<Tensor>;
type Scalar = fn(&Tensor, f32) -> ferrocuda::Result<Tensor>;

const UNARY: [(&str, Unary); 4] =
    [("relu", Tensor::relu), ("sigmoid", Tensor::sigmoid), ("tanh", Tensor::tanh), ("gelu", Tensor::gelu)];
const BINARY: [(&str, Binary); 4] =
    [("add", Tensor::add), ("sub", Tensor::sub), ("mul", Tensor::mul), ("div", Tensor::div)];
const SCALAR: [(&str, Scalar); 4] = [
    ("add_scalar", Tensor::add_scalar),
    ("sub_scalar", Tensor::sub_scalar),
    ("mul_scalar", Tensor::mul_scalar),
    ("div_scalar", Tensor::div_scalar),
];

/// f32 ops: 1e-5 relative (norm-wise).
const TOL: f64 = 1e-5;

fn unary_matches_cpu(gpu: &Context) {
    for (seed, &n) in SIZES.iter().enumerate() {
        // Scale so that tanh/sigmoid/gelu see both their linear and saturated ranges.
        let x: Vec<f32> = randn_host(n, 100 + seed as u64).iter().map(|v| v * 3.0).collect();
        let (xg, xc) = pair(gpu, &x, &[n]);
        for (name, op) in UNARY {
            poison_pool(gpu, &[n]);
            let got = op(&xg).unwrap().to_vec().unwrap();
            let want = op(&xc).unwrap().to_vec().unwrap();
            assert_close(&format!("{name} n={n}"), &got, &want, TOL);
        }
    }
}

fn binary_matches_cpu(gpu: &Context) {
    for (seed, &n) in SIZES.iter().enumerate() {
        let a = randn_host(n, 200 + seed as u64);
        // Keep divisors away from zero so the norm is not one huge quotient.
        let b: Vec<f32> = randn_host(n, 300 + seed as u64).iter().map(|v| v + v.signum() * 0.5).collect();
        let (ag, ac) = pair(gpu, &a, &[n]);
        let (bg, bc) = pair(gpu, &b, &[n]);
        for (name, op) in BINARY {
            poison_pool(gpu, &[n]);
            let got = op(&ag, &bg).unwrap().to_vec().unwrap();
            let want = op(&ac, &bc).unwrap().to_vec().unwrap();
            assert_close(&format!("{name} n={n}"), &got, &want, TOL);
        }
        for (name, op) in SCALAR {
            poison_pool(gpu, &[n]);
            let got = op(&ag, -1.75).unwrap().to_vec().unwrap();
            let want = op(&ac, -1.75).unwrap().to_vec().unwrap();
            assert_close(&format!("{name} n={n}"), &got, &want, TOL);
        }
    }
}

fn two_dimensional_shapes(gpu: &Context) {
    let shape = [4096, 4097];
    let n = shape[0] * shape[1];
    let x = randn_host(n, 401);
    let (xg, xc) = pair(gpu, &x, &shape);
    poison_pool(gpu, &shape);
    let got = xg.add(&xg).unwrap().gelu().unwrap();
    assert_eq!(got.shape(), &shape);
    let want = xc.add(&xc).unwrap().gelu().unwrap().to_vec().unwrap();
    assert_close("gelu(x+x) 4096x4097", &got.to_vec().unwrap(), &want, TOL);
}

fn nan_and_inf_pass_through(gpu: &Context) {
    let x = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-30, -88.0, 88.0, 20.0];
    let (xg, xc) = pair(gpu, &x, &[x.len()]);
    for (name, op) in UNARY {
        let got = op(&xg).unwrap().to_vec().unwrap();
        let want = op(&xc).unwrap().to_vec().unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let same = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-6 * w.abs().max(1e-30);
            assert!(same, "{name}({}) = {g}, want {w}", x[i]);
        }
    }
}

fn full_and_zeros(gpu: &Context) {
    for &n in &SIZES {
        poison_pool(gpu, &[n]);
        let got = gpu.full(&[n], 2.5).unwrap().to_vec().unwrap();
        assert!(got.iter().all(|&v| v == 2.5), "full n={n}");
        poison_pool(gpu, &[n]);
        let got = gpu.zeros(&[n]).unwrap().to_vec().unwrap();
        assert!(got.iter().all(|&v| v == 0.0), "zeros n={n}");
    }
}

fn device_mismatch_is_an_error(gpu: &Context) {
    let a = gpu.full(&[3], 1.0).unwrap();
    let b = Context::cpu().full(&[3], 1.0).unwrap();
    let err = a.add(&b).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "add", .. }), "{err}");
    let other = gpu.new_stream().unwrap();
    let c = other.full(&[3], 1.0).unwrap();
    let err = a.mul(&c).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "mul", .. }), "{err}");
    // The sanctioned way across streams: an ordered copy.
    let moved = c.to_context(gpu).unwrap();
    assert_eq!(a.add(&moved).unwrap().to_vec().unwrap(), vec![2.0; 3]);
}

fn shape_mismatch_on(ctx: &Context) {
    let a = ctx.full(&[2, 3], 1.0).unwrap();
    let b = ctx.full(&[3, 2], 1.0).unwrap();
    let err = a.sub(&b).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "sub", lhs, rhs } if lhs == &[2, 3] && rhs == &[3, 2]),
        "{err}"
    );
    assert!(err.to_string().contains("sub") && err.to_string().contains("[2, 3]"), "{err}");
}

fn gpu_shape_mismatch(gpu: &Context) {
    shape_mismatch_on(gpu);
}

fn cpu_shape_mismatch() {
    shape_mismatch_on(&Context::cpu());
}

fn cpu_matches_f64_loops() {
    let cpu = Context::cpu();
    let a = randn_host(1000, 1);
    let b = randn_host(1000, 2);
    let (ta, tb) = (cpu.from_slice(&a, &[1000]).unwrap(), cpu.from_slice(&b, &[1000]).unwrap());
    let gelu =
        |x: f64| 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh());
    type Reference<'a> = Box<dyn Fn(usize) -> f64 + 'a>;
    let cases: [(&str, Tensor, Reference); 4] = [
        ("add", ta.add(&tb).unwrap(), Box::new(|i| a[i] as f64 + b[i] as f64)),
        ("div_scalar", ta.div_scalar(3.0).unwrap(), Box::new(|i| a[i] as f64 / 3.0)),
        ("sigmoid", ta.sigmoid().unwrap(), Box::new(|i| 1.0 / (1.0 + (-(a[i] as f64)).exp()))),
        ("gelu", ta.gelu().unwrap(), Box::new(|i| gelu(a[i] as f64))),
    ];
    for (name, t, f) in cases {
        let want: Vec<f32> = (0..1000).map(|i| f(i) as f32).collect();
        assert_close(name, &t.to_vec().unwrap(), &want, 1e-7);
    }
}

fn cpu_zero_size() {
    let cpu = Context::cpu();
    let e = cpu.zeros(&[0, 5]).unwrap();
    assert!(e.relu().unwrap().is_empty());
    assert_eq!(e.add(&e).unwrap().shape(), &[0, 5]);
}

fn main() {
    run(&[
        ("gpu_unary_matches_cpu", Case::Gpu(unary_matches_cpu)),
        ("gpu_binary_matches_cpu", Case::Gpu(binary_matches_cpu)),
        ("gpu_two_dimensional_shapes", Case::Gpu(two_dimensional_shapes)),
        ("gpu_nan_and_inf_pass_through", Case::Gpu(nan_and_inf_pass_through)),
        ("gpu_full_and_zeros", Case::Gpu(full_and_zeros)),
        ("gpu_device_mismatch_is_an_error", Case::Gpu(device_mismatch_is_an_error)),
        ("gpu_shape_mismatch", Case::Gpu(gpu_shape_mismatch)),
        ("cpu_shape_mismatch", Case::Cpu(cpu_shape_mismatch)),
        ("cpu_matches_f64_loops", Case::Cpu(cpu_matches_f64_loops)),
        ("cpu_zero_size", Case::Cpu(cpu_zero_size)),
    ]);
}
