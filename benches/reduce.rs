//! Reductions, timed with CUDA events: sum/max over 2^20 and 2^28 elements, sum along the last
//! axis of 4096×4096 and the row shapes of issue 10, sum over the leading axes (bias and positional
//! embedding gradients).
use criterion::{criterion_group, criterion_main, Criterion};
mod common;

fn reduce(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    for n in [1 << 20, 1 << 28] {
        common::bench_op(c, &ctx, "sum", &[n], 4, |x| x.sum());
        common::bench_op(c, &ctx, "max", &[n], 4, |x| x.max());
    }
    for shape in [[4096, 4096], [16, 1 << 22], [1 << 20, 16], [64, 50257]] {
        common::bench_op(c, &ctx, "sum_last", &shape, 4, |x| x.sum_last());
    }
    for shape in [[16384, 768], [64, 256 * 384]] {
        common::bench_op(c, &ctx, "sum_leading", &shape, 4, |x| x.sum_leading());
    }
}

criterion_group!(benches, reduce);
criterion_main!(benches);
