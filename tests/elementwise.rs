//! Elementwise ops on the GPU against the CPU backend (f64 oracle), and the CPU backend against
//! plain f64 loops.
mod common;
use common::*;
use ferrocuda::{bf16, f16, Context, DType, Error, Tensor};

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

/// f16/bf16 results: 1e-2 relative (norm-wise).
const HALF_TOL: f64 = 1e-2;

fn half_ops_match_cpu(gpu: &Context) {
    for dtype in [DType::F16, DType::BF16] {
        for (seed, &n) in SIZES.iter().enumerate() {
            let x: Vec<f32> = randn_host(n, 800 + seed as u64).iter().map(|v| v * 3.0).collect();
            let y: Vec<f32> = randn_host(n, 900 + seed as u64).iter().map(|v| v + v.signum() * 0.5).collect();
            let (xg, xc) = pair(gpu, &x, &[n]);
            let (yg, yc) = pair(gpu, &y, &[n]);
            let (xg, xc) = (xg.to_dtype(dtype).unwrap(), xc.to_dtype(dtype).unwrap());
            let (yg, yc) = (yg.to_dtype(dtype).unwrap(), yc.to_dtype(dtype).unwrap());
            assert_eq!(xg.to_vec().unwrap(), xc.to_vec().unwrap(), "{dtype:?} conversion n={n}");
            for (name, op) in UNARY {
                let got = op(&xg).unwrap();
                assert_eq!(got.dtype(), dtype);
                let want = op(&xc).unwrap().to_vec().unwrap();
                assert_close(&format!("{name} {dtype:?} n={n}"), &got.to_vec().unwrap(), &want, HALF_TOL);
            }
            for (name, op) in BINARY {
                let got = op(&xg, &yg).unwrap().to_vec().unwrap();
                let want = op(&xc, &yc).unwrap().to_vec().unwrap();
                assert_close(&format!("{name} {dtype:?} n={n}"), &got, &want, HALF_TOL);
            }
            for (name, op) in SCALAR {
                let got = op(&xg, 0.75).unwrap().to_vec().unwrap();
                let want = op(&xc, 0.75).unwrap().to_vec().unwrap();
                assert_close(&format!("{name} {dtype:?} n={n}"), &got, &want, HALF_TOL);
            }
            let full = gpu.full_as(&[n], -1.5, dtype).unwrap().to_vec().unwrap();
            assert!(full.iter().all(|&v| v == -1.5), "full_as {dtype:?} n={n}");
        }
    }
}

fn conversions_round_like_the_half_crate(gpu: &Context) {
    let mut x =
        vec![0.0, -0.0, 1.0, -2.5, 65504.0, 65520.0, 1e5, -1e5, 6e-8, 1e-10, 3.0e38, f32::INFINITY, f32::NAN];
    x.extend(randn_host(100_003, 1000).iter().map(|v| v * 100.0));
    let t = gpu.from_slice(&x, &[x.len()]).unwrap();
    let as_f16 = t.to_dtype(DType::F16).unwrap().to_vec_of::<f16>().unwrap();
    let as_bf16 = t.to_dtype(DType::BF16).unwrap().to_vec_of::<bf16>().unwrap();
    for (i, &v) in x.iter().enumerate() {
        let (want16, wantb) = (f16::from_f32(v), bf16::from_f32(v));
        assert!(
            as_f16[i] == want16 || (v.is_nan() && as_f16[i].is_nan()),
            "f16({v}) = {} want {want16}",
            as_f16[i]
        );
        assert!(
            as_bf16[i] == wantb || (v.is_nan() && as_bf16[i].is_nan()),
            "bf16({v}) = {} want {wantb}",
            as_bf16[i]
        );
    }
    // Through the other 16-bit format and back to f32.
    let round_trip =
        t.to_dtype(DType::F16).unwrap().to_dtype(DType::BF16).unwrap().to_dtype(DType::F32).unwrap();
    let want: Vec<f32> = x.iter().map(|&v| bf16::from_f32(f16::from_f32(v).to_f32()).to_f32()).collect();
    let got = round_trip.to_vec().unwrap();
    assert!(
        got.iter().zip(&want).all(|(g, w)| g == w || (g.is_nan() && w.is_nan())),
        "f32 -> f16 -> bf16 -> f32"
    );
    // Typed uploads keep their dtype.
    let h: Vec<bf16> = x[..64].iter().map(|&v| bf16::from_f32(v)).collect();
    let hb = gpu.from_slice(&h, &[64]).unwrap();
    assert_eq!(hb.dtype(), DType::BF16);
    assert_eq!(hb.to_vec_of::<bf16>().unwrap()[..12], h[..12]);
}

fn mixed_and_unsupported_dtypes_are_errors_on(ctx: &Context) {
    let a = ctx.full_as(&[4, 4], 1.0, DType::F16).unwrap();
    let b = ctx.full_as(&[4, 4], 1.0, DType::BF16).unwrap();
    let err = a.add(&b).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "add", lhs: DType::F16, rhs: DType::BF16 }), "{err}");
    let err = a.to_vec_of::<f32>().unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "to_vec_of", .. }), "{err}");
    let err = b.transpose().unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { op: "transpose", dtype: DType::BF16 }), "{err}");
    let err = a.matmul(&b).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "matmul", .. }), "{err}");
    let f = ctx.full(&[4, 4], 1.0).unwrap();
    let err = f.mul(&a).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "mul", .. }), "{err}");
}

fn gpu_mixed_and_unsupported_dtypes(gpu: &Context) {
    mixed_and_unsupported_dtypes_are_errors_on(gpu);
}

fn cpu_mixed_and_unsupported_dtypes() {
    mixed_and_unsupported_dtypes_are_errors_on(&Context::cpu());
}

fn cpu_half_rounds_like_the_half_crate() {
    let cpu = Context::cpu();
    let x = randn_host(1000, 5);
    let t = cpu.from_slice(&x, &[1000]).unwrap().to_dtype(DType::BF16).unwrap();
    let y = t.mul_scalar(3.0).unwrap().to_vec_of::<bf16>().unwrap();
    for (i, &v) in x.iter().enumerate() {
        let want = bf16::from_f32(bf16::from_f32(v).to_f32() * 3.0);
        assert_eq!(y[i], want, "bf16 3·{v}");
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
        ("gpu_half_ops_match_cpu", Case::Gpu(half_ops_match_cpu)),
        ("gpu_conversions_round_like_the_half_crate", Case::Gpu(conversions_round_like_the_half_crate)),
        ("gpu_mixed_and_unsupported_dtypes", Case::Gpu(gpu_mixed_and_unsupported_dtypes)),
        ("gpu_device_mismatch_is_an_error", Case::Gpu(device_mismatch_is_an_error)),
        ("gpu_shape_mismatch", Case::Gpu(gpu_shape_mismatch)),
        ("cpu_shape_mismatch", Case::Cpu(cpu_shape_mismatch)),
        ("cpu_matches_f64_loops", Case::Cpu(cpu_matches_f64_loops)),
        ("cpu_zero_size", Case::Cpu(cpu_zero_size)),
        ("cpu_mixed_and_unsupported_dtypes", Case::Cpu(cpu_mixed_and_unsupported_dtypes)),
        ("cpu_half_rounds_like_the_half_crate", Case::Cpu(cpu_half_rounds_like_the_half_crate)),
    ]);
}
