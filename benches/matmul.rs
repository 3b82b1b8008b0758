//! Matrix multiply, timed with CUDA events: square f32 GEMMs 128…8192 with cuBLAS SGEMM beside
//! each (same process), 8192×4096×4096, and the fused linear+GELU at 1024×512×768 and
//! 8192×4096×4096. Throughput is in flops.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrocuda::{linear, timing, Activation, Context, Tensor};
mod common;
#[path = "baseline/cublas.rs"]
mod cublas;

fn bench_gemm(
    c: &mut Criterion,
    ctx: &Context,
    blas: Option<&cublas::Cublas>,
    (m, n, k): (usize, usize, usize),
) {
    let mut g = c.benchmark_group("matmul_f32");
    g.throughput(Throughput::Elements((2 * m * n * k) as u64));
    let (a, b) = (ctx.randn(&[m, k], 1).expect("a"), ctx.randn(&[k, n], 2).expect("b"));
    let id = format!("{m}x{n}x{k}");
    g.bench_function(BenchmarkId::new("ferrocuda", &id), |bench| {
        bench.iter_custom(|iters| timing::total(ctx, iters, || a.matmul(&b).map(drop)).expect("gemm"))
    });
    if let Some(blas) = blas {
        g.bench_function(BenchmarkId::new("cublas", &id), |bench| {
            bench.iter_custom(|iters| {
                let ms = blas.sgemm_ms(m, n, k, false, iters as usize).expect("sgemm");
                std::time::Duration::from_secs_f64(ms * iters as f64 / 1e3)
            })
        });
    }
    g.finish();
}

fn bench_tf32(c: &mut Criterion, ctx: &Context, blas: Option<&cublas::Cublas>, n: usize) {
    let mut g = c.benchmark_group("matmul_tf32");
    g.throughput(Throughput::Elements((2 * n * n * n) as u64));
    let (a, b) = (ctx.randn(&[n, n], 1).expect("a"), ctx.randn(&[n, n], 2).expect("b"));
    g.bench_function(BenchmarkId::new("ferrocuda", n), |bench| {
        bench.iter_custom(|iters| {
            timing::total(ctx, iters, || ferrocuda::Gemm::new(&a, &b).allow_tf32(true).run().map(drop))
                .expect("gemm")
        })
    });
    if let Some(blas) = blas {
        g.bench_function(BenchmarkId::new("cublas", n), |bench| {
            bench.iter_custom(|iters| {
                let ms = blas.sgemm_ms(n, n, n, true, iters as usize).expect("sgemm");
                std::time::Duration::from_secs_f64(ms * iters as f64 / 1e3)
            })
        });
    }
    g.finish();
}

fn bench_linear_gelu(c: &mut Criterion, ctx: &Context, (m, k, n): (usize, usize, usize)) {
    let mut g = c.benchmark_group("linear_gelu_f32");
    g.throughput(Throughput::Elements((2 * m * n * k) as u64));
    let x = ctx.randn(&[m, k], 3).expect("x");
    let w = ctx.randn(&[n, k], 4).expect("w");
    let bias: Tensor = ctx.randn(&[n], 5).expect("bias");
    g.bench_function(BenchmarkId::from_parameter(format!("{m}x{k}x{n}")), |bench| {
        bench.iter_custom(|iters| {
            timing::total(ctx, iters, || linear(&x, &w, Some(&bias), Activation::Gelu).map(drop))
                .expect("linear")
        })
    });
    g.finish();
}

fn matmul(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    let blas = cublas::Cublas::new().map_err(|e| eprintln!("cuBLAS baseline skipped: {e}")).ok();
    for n in [128, 512, 1024, 2048, 4096, 8192] {
        bench_gemm(c, &ctx, blas.as_ref(), (n, n, n));
    }
    bench_gemm(c, &ctx, blas.as_ref(), (8192, 4096, 4096));
    for n in [1024, 4096, 8192] {
        bench_tf32(c, &ctx, blas.as_ref(), n);
    }
    bench_linear_gelu(c, &ctx, (1024, 512, 768));
    bench_linear_gelu(c, &ctx, (8192, 4096, 4096));
}

criterion_group!(benches, matmul);
criterion_main!(benches);
