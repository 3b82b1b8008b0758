//! Reductions, timed with CUDA events: sum/max over 2^20 and 2^28 elements, sum along the last
//! axis of 4096×4096.
use criterion::{criterion_group, criterion_main, Criterion};
mod common;

fn reduce(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    for n in [1 << 20, 1 << 28] {
        common::bench_op(c, &ctx, "sum", &[n], 4, |x| x.sum());
        common::bench_op(c, &ctx, "max", &[n], 4, |x| x.max());
    }
    common::bench_op(c, &ctx, "sum_last", &[4096, 4096], 4, |x| x.sum_last());
}

criterion_group!(benches, reduce);
criterion_main!(benches);
