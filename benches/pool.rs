//! 2×2 max and average pooling at (32, 64, 128, 128) (the 16-byte kernels), forward and
//! backward, and 3×3 stride 2 padding 1 max pooling (the general kernel), timed with CUDA events.
//! Throughput counts torch_ref's bytes: 5 B per input element for the 2×2 forward passes (read
//! 4, write 1; the max pass also writes a 1-byte argmax per output, 0.25 B per input element,
//! not counted).
use criterion::{criterion_group, criterion_main, Criterion};
use ferrocuda::{avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward, Pool2dParams};
mod common;

fn pool(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    let shape = [32, 64, 128, 128];
    let p = Pool2dParams::new(2);
    common::bench_op(c, &ctx, "max_pool2d_2x2", &shape, 5, |x| max_pool2d(x, p).map(|r| r.0));
    common::bench_op(c, &ctx, "avg_pool2d_2x2", &shape, 5, |x| avg_pool2d(x, p));
    let x = ctx.randn(&shape, 9).unwrap();
    let (_, saved) = max_pool2d(&x, p).unwrap();
    // Backward: read dy (1 B per input element) and write dx (4 B).
    common::bench_op(c, &ctx, "max_pool2d_2x2_backward", &[32, 64, 64, 64], 20, |dy| {
        max_pool2d_backward(dy, &saved)
    });
    common::bench_op(c, &ctx, "avg_pool2d_2x2_backward", &[32, 64, 64, 64], 20, |dy| {
        avg_pool2d_backward(dy, &shape, p)
    });
    let p3 = Pool2dParams::new(3).stride(2).padding(1);
    common::bench_op(c, &ctx, "max_pool2d_3x3s2p1", &shape, 5, |x| max_pool2d(x, p3).map(|r| r.0));
}

criterion_group!(benches, pool);
criterion_main!(benches);
