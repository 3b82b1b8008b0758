//! Batch norm (training forward, eval, backward) at (32, 64, 32, 32), the elementwise losses at
//! 2^24 elements, dropout at 2^26, softmax and layer norm (forward, backward) at the row shapes of
//! issue 10, and cross-entropy (forward and gradient) at torch_ref's (8192, 50257) and
//! (16384, 73), timed with CUDA events. Throughput counts torch_ref's bytes for batch norm and
//! cross-entropy (8 B per element: read x, write y or the gradient) and read/write once for the
//! rest.
use criterion::{criterion_group, criterion_main, Criterion};
use ferrocuda::{
    batch_norm2d_backward, batch_norm2d_eval, batch_norm2d_train, binary_cross_entropy_with_logits,
    cross_entropy_labels, dropout, layer_norm, layer_norm_backward, mse_loss, Tensor,
};
use std::cell::RefCell;
mod common;

fn nn(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    let shape = [32, 64, 32, 32];
    let (gamma, beta) = (ctx.full(&[64], 1.5).unwrap(), ctx.full(&[64], 0.5).unwrap());
    let running = RefCell::new((ctx.zeros(&[64]).unwrap(), ctx.full(&[64], 1.0).unwrap()));
    let train = |x: &Tensor| {
        let (rm, rv) = &mut *running.borrow_mut();
        batch_norm2d_train(x, &gamma, &beta, rm, rv, 0.1, 1e-5)
    };
    common::bench_op(c, &ctx, "batch_norm_train", &shape, 8, |x| train(x).map(|r| r.0));
    common::bench_op(c, &ctx, "batch_norm_eval", &shape, 8, |x| {
        let (rm, rv) = &*running.borrow();
        batch_norm2d_eval(x, &gamma, &beta, rm, rv, 1e-5)
    });
    let x = ctx.randn(&shape, 9).unwrap();
    let (_, saved) = train(&x).unwrap();
    common::bench_op(c, &ctx, "batch_norm_backward", &shape, 12, |dy| {
        batch_norm2d_backward(dy, &x, &gamma, &saved).map(|r| r.0)
    });
    let n = 1 << 24;
    let target = ctx.rand(&[n], 3).unwrap();
    common::bench_op(c, &ctx, "mse_loss", &[n], 12, |p| mse_loss(p, &target).map(|r| r.1));
    common::bench_op(c, &ctx, "bce_with_logits", &[n], 12, |p| {
        binary_cross_entropy_with_logits(p, &target).map(|r| r.1)
    });
    common::bench_op(c, &ctx, "dropout", &[1 << 26], 8, |x| dropout(x, 0.1, 7));
    // Rows few and long, many and narrow, GPT-2's vocabulary, and model widths (issue 10).
    for shape in [[16, 1 << 22], [1 << 20, 16], [64, 50257], [16384, 768]] {
        let (gamma, beta) = (ctx.randn(&shape[1..], 13).unwrap(), ctx.randn(&shape[1..], 14).unwrap());
        common::bench_op(c, &ctx, "softmax", &shape, 8, Tensor::softmax);
        common::bench_op(c, &ctx, "layer_norm", &shape, 8, |x| {
            layer_norm(x, Some(&gamma), Some(&beta), 1e-5).map(|r| r.0)
        });
        let x = ctx.randn(&shape, 15).unwrap();
        let (_, saved) = layer_norm(&x, Some(&gamma), None, 1e-5).unwrap();
        common::bench_op(c, &ctx, "layer_norm_backward", &shape, 12, |dy| {
            layer_norm_backward(&x, Some(&gamma), dy, &saved).map(|r| r.0)
        });
    }
    for (rows, classes) in [(8192, 50257), (16384, 73)] {
        let ids: Vec<u32> = (0..rows).map(|r| (r * 7919 % classes) as u32).collect();
        let labels = ctx.labels(&ids, classes).unwrap();
        common::bench_op(c, &ctx, "cross_entropy_fwd_bwd", &[rows, classes], 8, |x| {
            cross_entropy_labels(x, &labels).map(|r| r.1)
        });
    }
}

criterion_group!(benches, nn);
criterion_main!(benches);
