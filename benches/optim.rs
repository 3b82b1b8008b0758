//! Optimizers and gradient clipping, timed with CUDA events, on the parameter list of the
//! character-level GPT of `gpt_char_ref.py` (6 layers, width 384, block 256: 76 tensors, 10.8M
//! parameters) and on one 2^24-element tensor, beside a device copy for the bandwidth ceiling.
//! Throughput counts the floor's bytes: Adam 28 B per parameter (f32 or mixed precision), the
//! gradient norm one read of every gradient, scaling a read and a write.
use criterion::{BenchmarkId, Criterion, Throughput};
use ferrocuda::{clip_grad_norm, timing, Adam, Context, DType, LrSchedule, Optimizer, Result, Tensor};
mod common;

/// The GPT's parameter shapes: token and position embeddings, per layer two layer norms, the
/// attention's qkv and output projections and the MLP (weights and biases), the final norm.
fn gpt_shapes() -> Vec<Vec<usize>> {
    let (d, vocab, block) = (384, 73, 256);
    let mut shapes = vec![vec![vocab, d], vec![block, d]];
    for _ in 0..6 {
        for s in [
            [d].as_slice(),
            &[d],
            &[d, 3 * d],
            &[3 * d],
            &[d, d],
            &[d],
            &[d],
            &[d],
            &[d, 4 * d],
            &[4 * d],
            &[4 * d, d],
            &[d],
        ] {
            shapes.push(s.to_vec());
        }
    }
    shapes.extend([vec![d], vec![d]]);
    shapes
}

fn gpt_tensors(ctx: &Context, dtype: DType, seed: u64) -> Vec<Tensor> {
    gpt_shapes()
        .iter()
        .enumerate()
        .map(|(i, s)| ctx.randn(s, seed + i as u64).and_then(|t| t.to_dtype(dtype)).expect("tensor"))
        .collect()
}

fn bench(
    c: &mut Criterion,
    ctx: &Context,
    group: &str,
    id: &str,
    bytes: usize,
    mut op: impl FnMut() -> Result<()>,
) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function(BenchmarkId::from_parameter(id), |b| {
        b.iter_custom(|iters| timing::total(ctx, iters, &mut op).expect("op"))
    });
    g.finish();
}

fn optim(c: &mut Criterion) {
    let Some(ctx) = common::cuda() else { return };
    common::bench_op(c, &ctx, "copy", &[1 << 26], 8, |x| x.copy());
    let n = 1 << 24;
    let (mut params, grads) = ([ctx.randn(&[n], 1).unwrap()], [ctx.randn(&[n], 2).unwrap()]);
    let mut adam = Adam::new(1e-3);
    bench(c, &ctx, "adam", "16777216", n * 28, || adam.step(&mut params, &grads));

    let count: usize = gpt_shapes().iter().map(|s| s.iter().product::<usize>()).sum();
    eprintln!("gpt_char parameters: {} tensors, {count} elements", gpt_shapes().len());
    let schedule = LrSchedule::WarmupCosine { peak: 1e-3, min: 1e-4, warmup: 100, total: 2000 };
    let adamw = || Adam::adamw(1e-3, 0.1).betas(0.9, 0.99).decay_matrices_only(true).schedule(schedule);
    for dtype in [DType::F32, DType::BF16] {
        let name = format!("{dtype:?}").to_lowercase();
        let (mut params, grads) = (gpt_tensors(&ctx, dtype, 100), gpt_tensors(&ctx, dtype, 200));
        let refs: Vec<&Tensor> = grads.iter().collect();
        let bytes = count * dtype.size_bytes();
        bench(c, &ctx, "clip_grad_norm", &format!("gpt_char_{name}"), bytes, || {
            clip_grad_norm(&refs, 1.0).map(drop)
        });
        let graph = ctx.capture(|| clip_grad_norm(&refs, 1.0).map(drop)).unwrap();
        bench(c, &ctx, "clip_grad_norm_graph", &format!("gpt_char_{name}"), bytes, || graph.launch());
        let norm = clip_grad_norm(&refs, 1.0).unwrap();
        let mut scaled = grads.clone();
        bench(c, &ctx, "scale_grads", &format!("gpt_char_{name}"), 2 * bytes, || {
            norm.scale_grads(&mut scaled.iter_mut().collect::<Vec<_>>())
        });
        let mut opt = adamw();
        bench(c, &ctx, "adamw", &format!("gpt_char_{name}"), count * 28, || opt.step(&mut params, &grads));
        let mut opt = adamw();
        bench(c, &ctx, "adamw_clipped", &format!("gpt_char_{name}"), count * 28 + bytes, || {
            let norm = clip_grad_norm(&refs, 1.0)?;
            opt.step_clipped(&mut params, &grads, &norm)
        });
        let mut opt = adamw().max_grad_norm(1.0);
        bench(c, &ctx, "adamw_max_grad_norm", &format!("gpt_char_{name}"), count * 28 + bytes, || {
            opt.step(&mut params, &grads)
        });
        let mut opt = adamw().max_grad_norm(1.0).capturable(true);
        opt.step(&mut params, &grads).unwrap();
        let graph = ctx.capture(|| opt.step(&mut params, &grads)).unwrap();
        bench(c, &ctx, "adamw_max_grad_norm_graph", &format!("gpt_char_{name}"), count * 28 + bytes, || {
            graph.launch()
        });
        let mut opt = adamw().capturable(true);
        opt.step(&mut params, &grads).unwrap();
        let graph = ctx
            .capture(|| {
                let norm = clip_grad_norm(&refs, 1.0)?;
                opt.step_clipped(&mut params, &grads, &norm)
            })
            .unwrap();
        bench(c, &ctx, "adamw_clipped_graph", &format!("gpt_char_{name}"), count * 28 + bytes, || {
            graph.launch()
        });
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
}

criterion::criterion_group!(name = benches; config = config(); targets = optim);
criterion::criterion_main!(benches);
