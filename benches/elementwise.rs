//! Elementwise ops, timed with CUDA events: add at 1K…2^28 elements, gelu at 4096×1024 and 2^26.
use criterion::{criterion_group, criterion_main, Criterion};
mod common;

fn elementwise(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    for n in [1_000, 10_000, 100_000, 1_000_000, 10_000_000, 1 << 28] {
        let y = ctx.randn(&[n], 6).expect("input");
        common::bench_op(c, &ctx, "add", &[n], 12, |x| x.add(&y));
    }
    for shape in [&[4096, 1024][..], &[1 << 26][..]] {
        common::bench_op(c, &ctx, "gelu", shape, 8, |x| x.gelu());
        common::bench_op(c, &ctx, "relu", shape, 8, |x| x.relu());
    }
}

criterion_group!(benches, elementwise);
criterion_main!(benches);
