//! Counter-based random numbers: the GPU gives the CPU backend's bits; the samples look right.
mod common;
use common::*;
use ferrocuda::Context;

fn same_bits_as_cpu(gpu: &Context) {
    for &n in &SIZES {
        for seed in [0u64, 7, u64::MAX] {
            poison_pool(gpu, &[n]);
            let g = gpu.randn(&[n], seed).unwrap().to_vec().unwrap();
            let c = Context::cpu().randn(&[n], seed).unwrap().to_vec().unwrap();
            let bad = g.iter().zip(&c).position(|(a, b)| a.to_bits() != b.to_bits());
            assert!(bad.is_none(), "randn n={n} seed={seed}: first difference at {bad:?}");
            poison_pool(gpu, &[n]);
            let g = gpu.rand(&[n], seed).unwrap().to_vec().unwrap();
            let c = Context::cpu().rand(&[n], seed).unwrap().to_vec().unwrap();
            assert!(g.iter().zip(&c).all(|(a, b)| a.to_bits() == b.to_bits()), "rand n={n} seed={seed}");
        }
    }
}

fn moments(x: &[f32]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn check_distributions(ctx: &Context) {
    let n = 1 << 22;
    let z = ctx.randn(&[n], 42).unwrap().to_vec().unwrap();
    let (mean, std) = moments(&z);
    assert!(mean.abs() < 2e-3 && (std - 1.0).abs() < 2e-3, "randn mean {mean} std {std}");
    let within_one = z.iter().filter(|v| v.abs() < 1.0).count() as f64 / n as f64;
    assert!((within_one - 0.682_689).abs() < 2e-3, "P(|z|<1) = {within_one}");
    let u = ctx.rand(&[n], 42).unwrap().to_vec().unwrap();
    assert!(u.iter().all(|&v| (0.0..1.0).contains(&v)), "rand outside [0, 1)");
    let (mean, std) = moments(&u);
    assert!(
        (mean - 0.5).abs() < 2e-3 && (std - (1.0f64 / 12.0).sqrt()).abs() < 2e-3,
        "rand mean {mean} std {std}"
    );
    let other = ctx.randn(&[n], 43).unwrap().to_vec().unwrap();
    assert!(z.iter().zip(&other).filter(|(a, b)| a == b).count() < 16, "seeds 42 and 43 agree");
}

fn gpu_distributions(gpu: &Context) {
    check_distributions(gpu);
}

fn cpu_distributions() {
    check_distributions(&Context::cpu());
}

fn main() {
    run(&[
        ("gpu_same_bits_as_cpu", Case::Gpu(same_bits_as_cpu)),
        ("gpu_distributions", Case::Gpu(gpu_distributions)),
        ("cpu_distributions", Case::Cpu(cpu_distributions)),
    ]);
}
