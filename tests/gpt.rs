//! The GPT model and its layers (`Embedding`, `TransformerBlock`): three training steps on the
//! GPU against the CPU backend (losses and every parameter), learning on the CPU backend, the
//! checkpoint round trip with the optimizer state, and bad input as errors naming the layer.
mod common;
use common::*;
use ferrocuda::layers::TransformerBlock;
use ferrocuda::models::{Gpt, GptConfig};
use ferrocuda::{clip_grad_norm, Adam, Context, DType, Error, Layer, LrSchedule, Optimizer, Tensor};

fn config(dtype: DType, dropout: f32) -> GptConfig {
    GptConfig { vocab: 13, block: 16, layers: 2, heads: 2, embed: 64, dropout, dtype }
}

fn optimizer() -> Adam {
    // eps 1e-3: Adam turns any gradient far above eps into a ±lr step, and some gradients here
    // are rounding noise (the key projection's bias has a zero gradient in exact arithmetic:
    // adding one vector to every key shifts each query's scores by a constant), which would give
    // the two backends opposite steps. With this eps those steps are lr·g/eps, negligible.
    Adam::adamw(3e-3, 0.1)
        .betas(0.9, 0.99)
        .eps(1e-3)
        .decay_matrices_only(true)
        .schedule(LrSchedule::WarmupCosine { peak: 3e-3, min: 3e-4, warmup: 2, total: 10 })
}

/// `batch` sequences of `seq` random tokens and their shifted targets.
fn tokens(vocab: usize, batch: usize, seq: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let r = randn_host(batch * (seq + 1), seed);
    let stream: Vec<u32> = r.iter().map(|v| ((v.abs() * 1000.0) as usize % vocab) as u32).collect();
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for b in 0..batch {
        let s = &stream[b * (seq + 1)..(b + 1) * (seq + 1)];
        x.extend_from_slice(&s[..seq]);
        y.extend_from_slice(&s[1..]);
    }
    (x, y)
}

/// One training step (loss, backward, clipping at 1.0, AdamW): the loss.
fn step(model: &mut Gpt, adam: &mut Adam, ctx: &Context, (x, y): &(Vec<u32>, Vec<u32>), seq: usize) -> f32 {
    let vocab = model.config().vocab;
    let (x, y) = (ctx.labels(x, vocab).unwrap(), ctx.labels(y, vocab).unwrap());
    let loss = model.loss(&x, &y, seq).unwrap();
    model.backward(&x).unwrap();
    let (mut values, grads) = model.params_and_grads().unwrap();
    let norm = clip_grad_norm(&grads, 1.0).unwrap();
    adam.step_clipped(&mut values, &grads, &norm).unwrap();
    loss.to_scalar().unwrap()
}

fn params(model: &mut Gpt) -> Vec<Vec<f32>> {
    model.params_mut().iter().map(|p| p.value().to_vec().unwrap()).collect()
}

fn gpu_three_steps_match_cpu(gpu: &Context) {
    let cpu = Context::cpu();
    for (dtype, dropout, loss_tol, tol) in
        [(DType::F32, 0.0, 2e-3, 1e-2), (DType::F32, 0.1, 2e-3, 1e-2), (DType::BF16, 0.1, 3e-2, 3e-2)]
    {
        let cfg = config(dtype, dropout);
        let (mut mg, mut mc) = (Gpt::new(gpu, cfg, 7).unwrap(), Gpt::new(&cpu, cfg, 7).unwrap());
        assert_eq!(params(&mut mg), params(&mut mc), "{dtype:?}: identical initial parameters");
        let (mut ag, mut ac) = (optimizer(), optimizer());
        for s in 0..3 {
            let batch = tokens(cfg.vocab, 3, 11, 100 + s);
            poison_pool(gpu, &[3 * 11, cfg.vocab]);
            let (lg, lc) =
                (step(&mut mg, &mut ag, gpu, &batch, 11), step(&mut mc, &mut ac, &cpu, &batch, 11));
            assert!(
                lg.is_finite() && (lg - lc).abs() <= loss_tol as f32 * lc.abs(),
                "{dtype:?} p={dropout} step {s}: loss {lg} vs {lc}"
            );
        }
        let names: Vec<String> = mg.named_params_mut().into_iter().map(|(n, _)| n).collect();
        for ((g, c), name) in params(&mut mg).iter().zip(params(&mut mc)).zip(&names) {
            assert_close(&format!("{dtype:?} p={dropout}: {name} after 3 steps"), g, &c, tol);
        }
    }
}

/// A tiny model learns a periodic text on the CPU backend: the loss falls well below the
/// uniform guess's ln(vocab).
fn cpu_learns_a_pattern() {
    let ctx = Context::cpu();
    let cfg = config(DType::F32, 0.0);
    let mut model = Gpt::new(&ctx, cfg, 3).unwrap();
    let mut adam = Adam::adamw(3e-3, 0.0).betas(0.9, 0.99);
    let text: Vec<u32> = (0..200).map(|i| [1, 5, 2, 9, 5, 12][i % 6]).collect();
    let (x, y) = (text[..16 * 8].to_vec(), text[1..16 * 8 + 1].to_vec());
    let first = step(&mut model, &mut adam, &ctx, &(x.clone(), y.clone()), 16);
    let mut last = first;
    for _ in 0..40 {
        last = step(&mut model, &mut adam, &ctx, &(x.clone(), y.clone()), 16);
    }
    assert!((first - (13f32).ln()).abs() < 0.3, "initial loss {first} near ln(13)");
    assert!(last < 0.5, "loss after 41 steps {last}");
}

fn round_trip_on(ctx: &Context) {
    // No dropout: its generator's position is not part of a checkpoint (nor of PyTorch's).
    let cfg = config(DType::BF16, 0.0);
    let path = std::env::temp_dir().join(format!(
        "ferrocuda-gpt-{}-{}.safetensors",
        std::process::id(),
        ctx.is_cuda()
    ));
    let mut model = Gpt::new(ctx, cfg, 11).unwrap();
    let mut adam = optimizer();
    for s in 0..2 {
        step(&mut model, &mut adam, ctx, &tokens(cfg.vocab, 2, 9, 200 + s), 9);
    }
    let state: Vec<(String, Tensor)> =
        adam.state_tensors().unwrap().into_iter().map(|(n, t)| (format!("optimizer.{n}"), t)).collect();
    model.save(&path, &state).unwrap();
    // A different model and a fresh optimizer, then the checkpoint: the next step is the same.
    let mut restored = Gpt::new(ctx, cfg, 12).unwrap();
    let file = restored.load(&path).unwrap();
    let saved: Vec<(String, Tensor)> = file
        .tensors
        .iter()
        .filter_map(|(n, t)| n.strip_prefix("optimizer.").map(|n| (n.to_string(), t.clone())))
        .collect();
    assert_eq!(saved.len(), state.len(), "every optimizer tensor saved");
    let mut adam2 = optimizer();
    let values: Vec<Tensor> = restored.params_mut().iter().map(|p| p.value().clone()).collect();
    adam2.load_state(&values.iter().collect::<Vec<_>>(), &saved).unwrap();
    drop(values);
    assert_eq!(params(&mut model), params(&mut restored), "parameters after load");
    let next = tokens(cfg.vocab, 2, 9, 300);
    let (a, b) = (step(&mut model, &mut adam, ctx, &next, 9), step(&mut restored, &mut adam2, ctx, &next, 9));
    assert_eq!(a.to_bits(), b.to_bits(), "loss after the round trip");
    assert_eq!(params(&mut model), params(&mut restored), "parameters one step after the round trip");
    std::fs::remove_file(&path).ok();
}

fn gpu_checkpoint_round_trip(gpu: &Context) {
    round_trip_on(gpu);
}

fn cpu_checkpoint_round_trip() {
    round_trip_on(&Context::cpu());
}

fn expect_layer_error<T>(result: ferrocuda::Result<T>, layer: &str, what: &str) {
    match result {
        Err(e @ Error::Layer { .. }) => {
            assert!(e.to_string().contains(layer), "{what}: {e} should name {layer}")
        }
        Err(e) => panic!("{what}: expected an error naming {layer}, got {e}"),
        Ok(_) => panic!("{what}: expected an error naming {layer}, got a result"),
    }
}

fn cpu_bad_input_is_a_typed_error() {
    let ctx = Context::cpu();
    let cfg = config(DType::BF16, 0.0);
    let mut model = Gpt::new(&ctx, cfg, 1).unwrap();
    let err = ctx.labels(&[0, 13], cfg.vocab).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "token id = vocabulary: {err}");
    let other_vocab = ctx.labels(&[0, 1, 2, 3], 14).unwrap();
    expect_layer_error(model.logits(&other_vocab, 4), "Embedding", "ids of another vocabulary");
    let ids = ctx.labels(&[1; 34], cfg.vocab).unwrap();
    expect_layer_error(model.logits(&ids, 17), "Gpt(", "sequences longer than the positions");
    expect_layer_error(model.logits(&ids, 4), "Gpt(", "ids not a multiple of the sequence");
    expect_layer_error(model.backward(&ids), "Gpt(", "backward before a loss");
    let mut block = TransformerBlock::new(&ctx, 64, 2, 0.0, 5, DType::BF16).unwrap();
    expect_layer_error(block.forward(&ctx.zeros(&[4, 64]).unwrap()), "TransformerBlock", "rank 2");
    let f32_input = ctx.randn(&[2, 3, 64], 4).unwrap();
    expect_layer_error(block.forward(&f32_input), "TransformerBlock", "f32 input to a bf16 block");
    expect_layer_error(block.backward(&f32_input), "TransformerBlock", "backward before forward");
    expect_layer_error(
        Gpt::new(&ctx, GptConfig { heads: 5, ..cfg }, 1),
        "Gpt(",
        "width not a multiple of the heads",
    );
}

fn main() {
    run(&[
        ("gpu_three_steps_match_cpu", Case::Gpu(gpu_three_steps_match_cpu)),
        ("gpu_checkpoint_round_trip", Case::Gpu(gpu_checkpoint_round_trip)),
        ("cpu_checkpoint_round_trip", Case::Cpu(cpu_checkpoint_round_trip)),
        ("cpu_learns_a_pattern", Case::Cpu(cpu_learns_a_pattern)),
        ("cpu_bad_input_is_a_typed_error", Case::Cpu(cpu_bad_input_is_a_typed_error)),
    ]);
}
