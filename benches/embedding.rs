//! Embedding lookup at torch_ref's (16384 ids, 50257 × 768 table, f32) and its backward, and the
//! character GPT's bf16 shape (16384 ids, 75 × 384, 256 learned positions), timed with CUDA
//! events. Throughput: the lookup reads and writes each output row once (torch_ref's bytes); the
//! backward reads dy and writes the dense table gradient.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrocuda::{embedding, embedding_backward, timing, Context, DType, Result};
mod common;

fn bench(c: &mut Criterion, ctx: &Context, group: &str, id: &str, bytes: usize, f: impl Fn() -> Result<()>) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function(BenchmarkId::from_parameter(id), |b| {
        b.iter_custom(|iters| timing::total(ctx, iters, &f).expect("op"))
    });
    g.finish();
}

fn embeddings(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    for (n, vocab, width, dtype, t) in
        [(16384, 50257, 768, DType::F32, None), (16384, 75, 384, DType::BF16, Some(256))]
    {
        let table = ctx.randn(&[vocab, width], 1).unwrap().to_dtype(dtype).unwrap();
        let pos = t.map(|t| ctx.randn(&[t, width], 2).unwrap().to_dtype(dtype).unwrap());
        let ids: Vec<u32> = (0..n).map(|i| (i * 7919 % vocab) as u32).collect();
        let ids = ctx.labels(&ids, vocab).unwrap();
        let dy = ctx.randn(&[n, width], 3).unwrap().to_dtype(dtype).unwrap();
        let (id, size) = (format!("{n}x{vocab}x{width}_{dtype:?}"), dtype.size_bytes());
        bench(c, &ctx, "embedding", &id, 2 * n * width * size, || {
            embedding(&table, &ids, pos.as_ref()).map(drop)
        });
        bench(c, &ctx, "embedding_backward", &id, (n + vocab) * width * size, || {
            embedding_backward(&dy, &ids, vocab, t).map(drop)
        });
    }
}

criterion_group!(benches, embeddings);
criterion_main!(benches);
