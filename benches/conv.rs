//! 2-D convolution, timed with CUDA events: the forward at (32,64,128,128)⊛(128,64,3,3) and
//! (1,32,64,64)⊛(64,32,3,3), padding 1, exact f32 and TF32 (the shapes `torch_ref.py --only
//! conv2d` times with cuDNN), and the three gradients at the first shape. Throughput is in flops.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrocuda::{conv2d, conv2d_backward_data, conv2d_backward_weight, timing, Conv2dParams};
mod common;

const SHAPES: [([usize; 4], [usize; 4]); 2] =
    [([32, 64, 128, 128], [128, 64, 3, 3]), ([1, 32, 64, 64], [64, 32, 3, 3])];

fn conv(c: &mut Criterion) {
    let Some(gpu) = common::cuda() else { return };
    let p = Conv2dParams::new().padding(1);
    let mut g = c.benchmark_group("conv2d");
    for tf32 in [false, true] {
        let ctx = gpu.new_stream().expect("stream");
        ctx.set_allow_tf32(tf32);
        let precision = if tf32 { "tf32" } else { "f32" };
        for (i, (xs, ws)) in SHAPES.iter().enumerate() {
            let flops = 2 * xs[0] * ws[0] * xs[2] * xs[3] * ws[1] * ws[2] * ws[3];
            g.throughput(Throughput::Elements(flops as u64));
            let x = ctx.randn(xs, 1).expect("x");
            let w = ctx.randn(ws, 2).expect("w");
            let bias = ctx.randn(&[ws[0]], 3).expect("bias");
            let dy = ctx.randn(&[xs[0], ws[0], xs[2], xs[3]], 4).expect("dy");
            let id = format!("{precision}/{xs:?}x{ws:?}");
            g.bench_function(BenchmarkId::new("forward", &id), |b| {
                b.iter_custom(|iters| {
                    timing::total(&ctx, iters, || conv2d(&x, &w, Some(&bias), p).map(drop)).expect("conv2d")
                })
            });
            if i == 0 {
                g.bench_function(BenchmarkId::new("backward_data", &id), |b| {
                    b.iter_custom(|iters| {
                        timing::total(&ctx, iters, || conv2d_backward_data(&dy, &w, xs, p).map(drop))
                            .expect("dx")
                    })
                });
                g.bench_function(BenchmarkId::new("backward_weight", &id), |b| {
                    b.iter_custom(|iters| {
                        timing::total(&ctx, iters, || conv2d_backward_weight(&x, &dy, ws, p).map(drop))
                            .expect("dw")
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, conv);
criterion_main!(benches);
