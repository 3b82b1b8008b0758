//! Layout ops, timed with CUDA events: transpose of 4096×4096, and the plain copy it is
//! measured against.
use criterion::{criterion_group, criterion_main, Criterion};
mod common;

fn layout(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    common::bench_op(c, &ctx, "transpose", &[4096, 4096], 8, |x| x.transpose());
    common::bench_op(c, &ctx, "copy", &[4096, 4096], 8, |x| x.copy());
}

criterion_group!(benches, layout);
criterion_main!(benches);
