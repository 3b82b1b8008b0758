//! Reductions on the GPU against the CPU backend (f64 accumulation), determinism, and the CPU
//! backend against plain f64 loops.
mod common;
use common::*;
use ferrocuda::{gelu_backward_bias, Context, DType, Error, Tensor};

type Reduction = fn(&Tensor) -> ferrocuda::Result<Tensor>;

const ALL: [(&str, Reduction); 4] =
    [("sum", Tensor::sum), ("mean", Tensor::mean), ("max", Tensor::max), ("min", Tensor::min)];
const LAST: [(&str, Reduction); 4] = [
    ("sum_last", Tensor::sum_last),
    ("mean_last", Tensor::mean_last),
    ("max_last", Tensor::max_last),
    ("min_last", Tensor::min_last),
];

/// f32 sums: error relative to the sum of magnitudes (of the reduced elements).
const TOL: f64 = 1e-5;

fn check_reduced(what: &str, got: &[f32], want: &[f32], magnitude: &[f64]) {
    check_reduced_within(what, got, want, magnitude, TOL)
}

fn check_reduced_within(what: &str, got: &[f32], want: &[f32], magnitude: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, ((&g, &w), &m)) in got.iter().zip(want).zip(magnitude).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: {g}, want NaN");
            continue;
        }
        let err = (g as f64 - w as f64).abs();
        assert!(
            err <= tol * m.max(f64::MIN_POSITIVE),
            "{what}[{i}]: {g} vs {w} (error {err:.3e}, magnitude {m:.3e})"
        );
    }
}

fn whole_tensor_matches_cpu(gpu: &Context) {
    for (seed, &n) in SIZES.iter().enumerate() {
        let x = randn_host(n, 500 + seed as u64);
        let (xg, xc) = pair(gpu, &x, &[n]);
        let abs_sum: f64 = x.iter().map(|v| v.abs() as f64).sum();
        for (name, op) in ALL {
            let (got, want) = (op(&xg), op(&xc));
            if n == 0 && (name == "max" || name == "min") {
                assert!(matches!(got, Err(Error::InvalidArgument { .. })), "{name} of nothing");
                assert!(matches!(want, Err(Error::InvalidArgument { .. })), "cpu {name} of nothing");
                continue;
            }
            poison_pool(gpu, &[1]);
            let got = op(&xg).unwrap();
            assert_eq!(got.shape(), &[] as &[usize]);
            let magnitude = match name {
                "sum" => abs_sum,
                "mean" => abs_sum / n.max(1) as f64,
                _ => want.as_ref().unwrap().to_scalar().unwrap().abs() as f64,
            };
            check_reduced(
                &format!("{name} n={n}"),
                &got.to_vec().unwrap(),
                &want.unwrap().to_vec().unwrap(),
                &[magnitude],
            );
        }
    }
}

fn last_axis_matches_cpu(gpu: &Context) {
    let shapes: [&[usize]; 10] = [
        &[1, 1],
        &[31],
        &[31, 1000],
        &[1000, 31],
        &[3, 1024],
        &[2, 3, 1023],
        &[4096, 4097],
        &[7, (1 << 20) + 3],
        &[5, 0],
        &[0, 4],
    ];
    for (seed, shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let cols = *shape.last().unwrap();
        let x = randn_host(n, 600 + seed as u64);
        let (xg, xc) = pair(gpu, &x, shape);
        let abs_rows: Vec<f64> = if cols == 0 {
            vec![0.0; n]
        } else {
            x.chunks(cols).map(|r| r.iter().map(|v| v.abs() as f64).sum()).collect()
        };
        for (name, op) in LAST {
            if cols == 0 && (name == "max_last" || name == "min_last") {
                assert!(matches!(op(&xg), Err(Error::InvalidArgument { .. })), "{name} {shape:?}");
                continue;
            }
            poison_pool(gpu, &shape[..shape.len() - 1]);
            let got = op(&xg).unwrap();
            assert_eq!(got.shape(), &shape[..shape.len() - 1]);
            let want = op(&xc).unwrap().to_vec().unwrap();
            let magnitude: Vec<f64> = match name {
                "sum_last" => abs_rows.clone(),
                "mean_last" => abs_rows.iter().map(|s| s / cols.max(1) as f64).collect(),
                _ => want.iter().map(|w| w.abs() as f64).collect(),
            };
            check_reduced(&format!("{name} {shape:?}"), &got.to_vec().unwrap(), &want, &magnitude);
        }
    }
}

fn deterministic_bits(gpu: &Context) {
    let n = 7 * 2_400_001;
    let x = gpu.randn(&[n], 7).unwrap();
    let rows = x.reshape(&[7, n / 7]).unwrap();
    let first = x.sum().unwrap().to_scalar().unwrap().to_bits();
    let first_rows = rows.sum_last().unwrap().to_vec().unwrap();
    for _ in 0..5 {
        assert_eq!(x.sum().unwrap().to_scalar().unwrap().to_bits(), first, "sum changed between runs");
        let again = rows.sum_last().unwrap().to_vec().unwrap();
        assert!(again.iter().zip(&first_rows).all(|(a, b)| a.to_bits() == b.to_bits()), "sum_last changed");
    }
}

fn nan_wins_max_min(gpu: &Context) {
    let mut x = randn_host(100_003, 9);
    x[77_777] = f32::NAN;
    let t = gpu.from_slice(&x, &[100_003]).unwrap();
    assert!(t.max().unwrap().to_scalar().unwrap().is_nan());
    assert!(t.min().unwrap().to_scalar().unwrap().is_nan());
    assert!(t.sum().unwrap().to_scalar().unwrap().is_nan());
}

fn max_finds_the_planted_extreme(gpu: &Context) {
    let mut x = randn_host((1 << 20) + 3, 10);
    x[(1 << 20) + 2] = 100.0;
    x[12345] = -100.0;
    let t = gpu.from_slice(&x, &[x.len()]).unwrap();
    assert_eq!(t.max().unwrap().to_scalar().unwrap(), 100.0);
    assert_eq!(t.min().unwrap().to_scalar().unwrap(), -100.0);
}

fn scalar_input_has_no_last_axis(gpu: &Context) {
    let s = gpu.full(&[], 1.0).unwrap();
    assert!(matches!(s.sum_last(), Err(Error::InvalidArgument { op: "sum_last", .. })));
}

fn cpu_matches_f64_loops() {
    let cpu = Context::cpu();
    let x = randn_host(3 * 1001, 11);
    let t = cpu.from_slice(&x, &[3, 1001]).unwrap();
    let total: f64 = x.iter().map(|&v| v as f64).sum();
    assert!((t.sum().unwrap().to_scalar().unwrap() as f64 - total).abs() < 1e-5);
    let rows = t.max_last().unwrap().to_vec().unwrap();
    for (r, &m) in rows.iter().enumerate() {
        assert_eq!(m, x[r * 1001..(r + 1) * 1001].iter().cloned().fold(f32::MIN, f32::max));
    }
    assert!(cpu.zeros(&[0]).unwrap().mean().unwrap().to_scalar().unwrap().is_nan());
    assert_eq!(cpu.zeros(&[0]).unwrap().sum().unwrap().to_scalar().unwrap(), 0.0);
}

/// The row reductions in every dtype at a shape of each dispatch branch, and the whole-tensor
/// ones in 16-bit, against the CPU backend (f64, rounded once); results keep the input's dtype.
fn every_dtype_and_branch_matches_cpu(gpu: &Context) {
    for (s, [rows, cols]) in row_dispatch_shapes().into_iter().enumerate() {
        let x = randn_host(rows * cols, 700 + s as u64);
        for dtype in DTYPES {
            let (xg, xc) = pair_as(gpu, &x, &[rows, cols], dtype);
            let xv = xc.to_vec().unwrap();
            let abs_rows: Vec<f64> =
                xv.chunks(cols).map(|r| r.iter().map(|v| v.abs() as f64).sum()).collect();
            for (name, op) in LAST {
                poison_pool_as(gpu, &[rows], dtype);
                let got = op(&xg).unwrap();
                assert_eq!((got.shape(), got.dtype()), (&[rows][..], dtype), "{name}");
                let want = op(&xc).unwrap().to_vec().unwrap();
                let magnitude: Vec<f64> = match name {
                    "sum_last" => abs_rows.clone(),
                    "mean_last" => abs_rows.iter().map(|s| s / cols as f64).collect(),
                    _ => want.iter().map(|w| w.abs() as f64).collect(),
                };
                let what = format!("{name} {dtype:?} [{rows}, {cols}]");
                check_reduced_within(&what, &got.to_vec().unwrap(), &want, &magnitude, tol_of(dtype));
                if name == "max_last" || name == "min_last" {
                    assert_same(&what, &got.to_vec().unwrap(), &want);
                }
            }
        }
    }
    for (seed, &n) in SIZES.iter().enumerate().skip(1) {
        let x = randn_host(n, 800 + seed as u64);
        for dtype in [DType::F16, DType::BF16] {
            let (xg, xc) = pair_as(gpu, &x, &[n], dtype);
            let abs_sum: f64 = xc.to_vec().unwrap().iter().map(|v| v.abs() as f64).sum();
            for (name, op) in ALL {
                poison_pool_as(gpu, &[1], dtype);
                let got = op(&xg).unwrap();
                assert_eq!(got.dtype(), dtype, "{name}");
                let want = op(&xc).unwrap().to_vec().unwrap();
                let magnitude = match name {
                    "sum" => abs_sum,
                    "mean" => abs_sum / n as f64,
                    _ => want[0].abs() as f64,
                };
                let what = format!("{name} {dtype:?} n={n}");
                check_reduced_within(&what, &got.to_vec().unwrap(), &want, &[magnitude], tol_of(dtype));
            }
        }
    }
}

/// `sum_leading` in every dtype against the CPU backend: narrow and wide columns, one row group
/// and many, unaligned widths, rank 1 and 3, empty inputs.
fn sum_leading_matches_cpu(gpu: &Context) {
    let tall = if under_sanitizer() { 4099 } else { (1 << 20) + 3 };
    let shapes: [&[usize]; 10] = [
        &[1, 1],
        &[7],
        &[3, 5, 7],
        &[1000, 31],
        &[tall, 16],
        &[31, 1000],
        &[16384, 384],
        &[64, 50257],
        &[0, 9],
        &[4, 0],
    ];
    for (s, shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let cols = *shape.last().unwrap();
        let x = randn_host(n, 900 + s as u64);
        for dtype in DTYPES {
            let (xg, xc) = pair_as(gpu, &x, shape, dtype);
            poison_pool_as(gpu, &[cols], dtype);
            let got = xg.sum_leading().unwrap();
            assert_eq!((got.shape(), got.dtype()), (&[cols][..], dtype));
            let want = xc.sum_leading().unwrap().to_vec().unwrap();
            let xv = xc.to_vec().unwrap();
            let magnitude: Vec<f64> =
                (0..cols).map(|c| xv.iter().skip(c).step_by(cols).map(|v| v.abs() as f64).sum()).collect();
            let what = format!("sum_leading {dtype:?} {shape:?}");
            check_reduced_within(&what, &got.to_vec().unwrap(), &want, &magnitude, tol_of(dtype));
        }
    }
    let x = gpu.randn(&[20_000, 300], 5).unwrap();
    let first: Vec<u32> = x.sum_leading().unwrap().to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
    let again: Vec<u32> = x.sum_leading().unwrap().to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
    assert!(first == again, "sum_leading changed between runs");
}

/// `gelu_backward_bias` in every dtype: dx the same bits as `gelu_backward`'s on the GPU and
/// within the dtype's tolerance of the CPU backend's; the bias gradient against the CPU's column
/// sums of its dx (relative to the sums of magnitudes), through one row group and many;
/// mismatched shapes and dtypes typed.
fn gelu_backward_bias_matches_cpu(gpu: &Context) {
    let tall = if under_sanitizer() { 4099 } else { (1 << 20) + 3 };
    let shapes: [&[usize]; 8] =
        [&[1, 1], &[7], &[3, 5, 7], &[1000, 31], &[tall, 16], &[16384, 1536], &[0, 9], &[4, 0]];
    let bits = |t: &Tensor| t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (s, shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let cols = *shape.last().unwrap();
        let (x, dy) = (randn_host(n, 950 + s as u64), randn_host(n, 960 + s as u64));
        for dtype in DTYPES {
            let what = format!("gelu_backward_bias {dtype:?} {shape:?}");
            let ((xg, xc), (dg, dc)) = (pair_as(gpu, &x, shape, dtype), pair_as(gpu, &dy, shape, dtype));
            poison_pool_as(gpu, shape, dtype);
            let (dx, db) = gelu_backward_bias(&xg, &dg).unwrap();
            assert_eq!((dx.shape(), db.shape(), db.dtype()), (&shape[..], &[cols][..], dtype), "{what}");
            assert!(
                bits(&dx) == bits(&xg.gelu_backward(&dg).unwrap()),
                "{what}: dx differs from gelu_backward"
            );
            let (dx_cpu, db_cpu) = gelu_backward_bias(&xc, &dc).unwrap();
            let (dxv, dxc) = (dx.to_vec().unwrap(), dx_cpu.to_vec().unwrap());
            let scale = dxc.iter().map(|v| v.abs() as f64).fold(1e-30, f64::max);
            for (i, (g, c)) in dxv.iter().zip(&dxc).enumerate() {
                assert!(((g - c).abs() as f64) <= tol_of(dtype) * scale, "{what} dx[{i}]: {g} vs {c}");
            }
            let magnitude: Vec<f64> =
                (0..cols).map(|c| dxc.iter().skip(c).step_by(cols).map(|v| v.abs() as f64).sum()).collect();
            check_reduced_within(
                &what,
                &db.to_vec().unwrap(),
                &db_cpu.to_vec().unwrap(),
                &magnitude,
                tol_of(dtype),
            );
        }
    }
    let x = gpu.randn(&[20_000, 300], 7).unwrap();
    let dy = gpu.randn(&[20_000, 300], 8).unwrap();
    let first = bits(&gelu_backward_bias(&x, &dy).unwrap().1);
    assert!(
        first == bits(&gelu_backward_bias(&x, &dy).unwrap().1),
        "gelu_backward_bias changed between runs"
    );
    let err = gelu_backward_bias(&x, &gpu.zeros(&[20_000, 299]).unwrap()).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "gelu_backward_bias", .. }), "{err}");
    let err = gelu_backward_bias(&x, &dy.to_dtype(DType::BF16).unwrap()).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "gelu_backward_bias", .. }), "{err}");
}

fn cpu_sum_leading_matches_f64_loops() {
    let cpu = Context::cpu();
    let x = randn_host(5 * 3 * 7, 12);
    let t = cpu.from_slice(&x, &[5, 3, 7]).unwrap();
    let got = t.sum_leading().unwrap().to_vec().unwrap();
    for c in 0..7 {
        let want: f64 = (0..15).map(|r| x[r * 7 + c] as f64).sum();
        assert_eq!(got[c], want as f32, "column {c}");
    }
    let err = cpu.full(&[], 1.0).unwrap().sum_leading().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "sum_leading", .. }), "{err}");
    let b = t.to_dtype(DType::BF16).unwrap();
    assert_eq!(b.sum_leading().unwrap().dtype(), DType::BF16);
    assert_eq!(b.sum().unwrap().dtype(), DType::BF16);
    assert_eq!(b.max_last().unwrap().shape(), &[5, 3]);
}

fn main() {
    run(&[
        ("gpu_whole_tensor_matches_cpu", Case::Gpu(whole_tensor_matches_cpu)),
        ("gpu_last_axis_matches_cpu", Case::Gpu(last_axis_matches_cpu)),
        ("gpu_deterministic_bits", Case::Gpu(deterministic_bits)),
        ("gpu_nan_wins_max_min", Case::Gpu(nan_wins_max_min)),
        ("gpu_max_finds_the_planted_extreme", Case::Gpu(max_finds_the_planted_extreme)),
        ("gpu_scalar_input_has_no_last_axis", Case::Gpu(scalar_input_has_no_last_axis)),
        ("cpu_matches_f64_loops", Case::Cpu(cpu_matches_f64_loops)),
        ("gpu_every_dtype_and_branch_matches_cpu", Case::Gpu(every_dtype_and_branch_matches_cpu)),
        ("gpu_sum_leading_matches_cpu", Case::Gpu(sum_leading_matches_cpu)),
        ("gpu_gelu_backward_bias_matches_cpu", Case::Gpu(gelu_backward_bias_matches_cpu)),
        ("cpu_sum_leading_matches_f64_loops", Case::Cpu(cpu_sum_leading_matches_f64_loops)),
    ]);
}
