//! Flash attention forward and backward (bf16) at the shapes of `torch_ref.py --only
//! attention`, causal and not, timed with CUDA events; throughput in FLOPs (forward
//! 4·B·H·S²·D, halved when causal; backward 2.5× that).
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrocuda::{attention, attention_backward, timing, AttentionParams, DType};
mod common;

fn attention_group(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    for (b, h, s, d) in [(8, 12, 2048, 64), (4, 16, 4096, 128), (64, 6, 256, 64)] {
        let t = |seed| ctx.randn(&[b, h, s, d], seed).and_then(|x| x.to_dtype(DType::BF16)).expect("input");
        let (q, k, v, dout) = (t(1), t(2), t(3), t(4));
        for causal in [false, true] {
            let p = AttentionParams::default().causal(causal);
            let flops = 4 * (b * h * s * s * d) as u64 / if causal { 2 } else { 1 };
            let id = BenchmarkId::from_parameter(format!(
                "{b}x{h}x{s}x{d}{}",
                if causal { "_causal" } else { "" }
            ));
            let mut g = c.benchmark_group("attention_fwd");
            g.throughput(Throughput::Elements(flops));
            g.bench_function(id.clone(), |bn| {
                bn.iter_custom(|iters| {
                    timing::total(&ctx, iters, || attention(&q, &k, &v, p).map(drop)).expect("op")
                })
            });
            g.finish();
            let (out, lse) = attention(&q, &k, &v, p).expect("forward");
            let mut g = c.benchmark_group("attention_bwd");
            g.throughput(Throughput::Elements(flops * 5 / 2));
            g.bench_function(id, |bn| {
                bn.iter_custom(|iters| {
                    timing::total(&ctx, iters, || {
                        attention_backward(&dout, &q, &k, &v, &out, &lse, p).map(drop)
                    })
                    .expect("op")
                })
            });
            g.finish();
        }
    }
}

criterion_group!(benches, attention_group);
criterion_main!(benches);
