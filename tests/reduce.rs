//! Reductions on the GPU against the CPU backend (f64 accumulation), determinism, and the CPU
//! backend against plain f64 loops.
mod common;
use common::*;
use ferrocuda::{Context, Error, Tensor};

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
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, ((&g, &w), &m)) in got.iter().zip(want).zip(magnitude).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: {g}, want NaN");
            continue;
        }
        let err = (g as f64 - w as f64).abs();
        assert!(
            err <= TOL * m.max(f64::MIN_POSITIVE),
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

fn main() {
    run(&[
        ("gpu_whole_tensor_matches_cpu", Case::Gpu(whole_tensor_matches_cpu)),
        ("gpu_last_axis_matches_cpu", Case::Gpu(last_axis_matches_cpu)),
        ("gpu_deterministic_bits", Case::Gpu(deterministic_bits)),
        ("gpu_nan_wins_max_min", Case::Gpu(nan_wins_max_min)),
        ("gpu_max_finds_the_planted_extreme", Case::Gpu(max_finds_the_planted_extreme)),
        ("gpu_scalar_input_has_no_last_axis", Case::Gpu(scalar_input_has_no_last_axis)),
        ("cpu_matches_f64_loops", Case::Cpu(cpu_matches_f64_loops)),
    ]);
}
