//! Train the character-level GPT of `../shared/baselines/gpt_char_ref.py` on the King James
//! Bible (`data/kjv.txt.gz`): tokens are the text's distinct bytes, the last 10% is validation.
//! Defaults as the reference: 6 layers, 6 heads, width 384, 256 positions, batch 64, dropout
//! 0.1, bf16 with f32 master weights, AdamW (lr 1e-3, 100 warm-up steps, cosine decay to 1e-4,
//! betas 0.9/0.99, weight decay 0.1 on matrices only), gradient clipping at 1.0, 2000 steps.
//! Prints a progress bar, the validation loss every 250 steps, the training speed; writes the
//! curve (SVG, beside the reference's if `--compare ref.json` gives its `--json` output), a
//! checkpoint with the optimizer state, and 500 characters sampled from a prompt.
//!
//!     cargo run --release --example train_gpt -- [--iters N] [--batch B] [--cpu] [--small]
//!         [--eval-every N] [--eval-batches N] [--json OUT] [--compare REF.json]
//!         [--profile TRACE.json] [--out DIR]
//!
//! `--small`: a tiny model (2 layers, 1 head, width 32, 32 positions, batch 16, 200 steps, lr
//! 3e-3 after 20 warm-up steps) for the CPU backend in CI; it fails unless the validation loss
//! ends below the text's unigram entropy. `--profile` profiles 20 training steps after warm-up and prints where the time goes.
#[path = "common/profile.rs"]
mod profile;

use ferrocuda::models::{Gpt, GptConfig, SplitMix64};
use ferrocuda::{Adam, Context, DType, LrSchedule, Optimizer, Result};
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use std::io::Read;
use std::time::Instant;

/// The reference's command-line defaults.
struct Settings {
    iters: usize,
    batch: usize,
    eval_every: usize,
    eval_batches: usize,
    lr: f32,
    min_lr: f32,
    warmup: usize,
    seed: u64,
}

/// The text as token ids, the byte of each token, and the 90/10 split point.
struct Corpus {
    ids: Vec<u32>,
    chars: Vec<u8>,
    split: usize,
}

impl Corpus {
    fn load(path: &str) -> std::io::Result<Corpus> {
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path)?).read_to_end(&mut text)?;
        let mut chars: Vec<u8> = text.clone();
        chars.sort_unstable();
        chars.dedup();
        let mut lut = [0u32; 256];
        for (i, &c) in chars.iter().enumerate() {
            lut[c as usize] = i as u32;
        }
        let ids: Vec<u32> = text.iter().map(|&b| lut[b as usize]).collect();
        let split = ids.len() * 9 / 10;
        Ok(Corpus { ids, chars, split })
    }

    /// The unigram entropy of the training text, in nats: the loss of predicting each character
    /// from its frequency alone.
    fn unigram_entropy(&self) -> f64 {
        let mut counts = vec![0usize; self.chars.len()];
        self.ids[..self.split].iter().for_each(|&i| counts[i as usize] += 1);
        let n = self.split as f64;
        counts.iter().filter(|&&c| c > 0).map(|&c| -(c as f64 / n) * (c as f64 / n).ln()).sum()
    }

    /// `batch` random windows of `block + 1` tokens from the training or validation part:
    /// inputs and next-token targets.
    fn batch(&self, train: bool, batch: usize, block: usize, rng: &mut SplitMix64) -> (Vec<u32>, Vec<u32>) {
        let part = if train { &self.ids[..self.split] } else { &self.ids[self.split..] };
        let (mut x, mut y) = (Vec::with_capacity(batch * block), Vec::with_capacity(batch * block));
        for _ in 0..batch {
            let start = (rng.next_u64() % (part.len() - block - 1) as u64) as usize;
            x.extend_from_slice(&part[start..start + block]);
            y.extend_from_slice(&part[start + 1..start + block + 1]);
        }
        (x, y)
    }

    fn decode(&self, ids: &[u32]) -> String {
        ids.iter().map(|&i| self.chars[i as usize] as char).collect()
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().filter_map(|b| self.chars.iter().position(|&c| c == b).map(|i| i as u32)).collect()
    }
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    match args.iter().position(|a| a == name) {
        Some(at) => args.get(at + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("{name} needs a value");
            std::process::exit(2)
        }),
        None => default,
    }
}

/// Mean validation loss over `batches` batches, in evaluation mode.
fn evaluate(
    model: &mut Gpt,
    ctx: &Context,
    corpus: &Corpus,
    s: &Settings,
    rng: &mut SplitMix64,
) -> Result<f64> {
    let block = model.config().block;
    model.set_training(false);
    let mut total = 0.0;
    for _ in 0..s.eval_batches {
        let (x, y) = corpus.batch(false, s.batch, block, rng);
        let (x, y) = (ctx.labels(&x, corpus.chars.len())?, ctx.labels(&y, corpus.chars.len())?);
        total += model.loss(&x, &y, block)?.to_scalar()? as f64;
    }
    model.set_training(true);
    Ok(total / s.eval_batches as f64)
}

/// The validation curves (ours, and the reference's if given) as an SVG.
fn write_curve(
    path: &str,
    ours: &[(usize, f64)],
    reference: &[(usize, f64)],
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let all = ours.iter().chain(reference);
    let steps = all.clone().map(|p| p.0).max().unwrap_or(1).max(1) as f64;
    let top = all.clone().map(|p| p.1).fold(0.0, f64::max) * 1.05;
    let bottom = all.map(|p| p.1).fold(f64::INFINITY, f64::min).min(top) * 0.95;
    let mut chart = ChartBuilder::on(&root)
        .caption("character-level GPT on the KJV: validation loss", ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(45)
        .build_cartesian_2d(0.0..steps, bottom..top)?;
    chart.configure_mesh().x_desc("step").y_desc("cross-entropy (nats)").draw()?;
    chart
        .draw_series(LineSeries::new(ours.iter().map(|&(s, l)| (s as f64, l)), &RED))?
        .label("ferrocuda")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    if !reference.is_empty() {
        chart
            .draw_series(LineSeries::new(reference.iter().map(|&(s, l)| (s as f64, l)), &BLUE))?
            .label("PyTorch (gpt_char_ref.py)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw()?;
    }
    root.present()?;
    Ok(())
}

/// The `curve` of a `gpt_char_ref.py --json` summary.
fn reference_curve(path: &str) -> Vec<(usize, f64)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("--compare {path}: {e}");
        std::process::exit(2)
    });
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        eprintln!("--compare {path}: {e}");
        std::process::exit(2)
    });
    json["curve"]
        .as_array()
        .map(|c| {
            c.iter().filter_map(|p| Some((p["step"].as_u64()? as usize, p["val_loss"].as_f64()?))).collect()
        })
        .unwrap_or_default()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let small = args.iter().any(|a| a == "--small");
    let ctx = if args.iter().any(|a| a == "--cpu") { Context::cpu() } else { Context::new()? };
    let corpus = Corpus::load("data/kjv.txt.gz").map_err(|source| ferrocuda::Error::Io {
        op: "train_gpt",
        path: "data/kjv.txt.gz".into(),
        source,
    })?;
    let vocab = corpus.chars.len();
    let mut config = GptConfig::char_level(vocab);
    if small {
        config = GptConfig { dtype: DType::BF16, ..GptConfig::tiny(vocab) };
    }
    let s = Settings {
        iters: arg(&args, "--iters", if small { 200 } else { 2000 }),
        batch: arg(&args, "--batch", if small { 16 } else { 64 }),
        eval_every: arg(&args, "--eval-every", if small { 50 } else { 250 }),
        eval_batches: arg(&args, "--eval-batches", if small { 4 } else { 20 }),
        lr: if small { 3e-3 } else { 1e-3 },
        min_lr: if small { 3e-4 } else { 1e-4 },
        warmup: if small { 20 } else { 100 },
        seed: arg(&args, "--seed", 1337),
    };
    let out_dir: String = arg(&args, "--out", "target".to_string());
    let entropy = corpus.unigram_entropy();
    println!("device: {}", ctx.device());
    println!(
        "{} characters, vocabulary {vocab}, unigram entropy {entropy:.3} nats; {} training, {} validation",
        corpus.ids.len(),
        corpus.split,
        corpus.ids.len() - corpus.split
    );
    let mut model = Gpt::new(&ctx, config, s.seed)?;
    let params = model.parameter_count();
    println!("{config:?}: {params} parameters");
    // Clipping at global norm 1.0 inside the step, over the optimizer's own device tables.
    let mut adam =
        Adam::adamw(s.lr, 0.1).betas(0.9, 0.99).decay_matrices_only(true).max_grad_norm(1.0).schedule(
            LrSchedule::WarmupCosine { peak: s.lr, min: s.min_lr, warmup: s.warmup, total: s.iters },
        );
    let block = config.block;
    let mut rng = SplitMix64(s.seed);
    let mut eval_rng = SplitMix64(s.seed ^ 0xe7a1);
    let (x0, y0) = corpus.batch(true, s.batch, block, &mut rng);
    let (mut x, mut y) = (ctx.labels(&x0, vocab)?, ctx.labels(&y0, vocab)?);
    let trace = profile::profile_path(&args);
    let mut guard = None;
    let bar = ProgressBar::new(s.iters as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} steps, {msg} [{elapsed_precise} < {eta_precise}]")
            .expect("a valid progress template"),
    );
    let mut curve = Vec::new();
    let (mut busy, mut timed) = (0.0f64, 0usize);
    let mut last_loss = f64::NAN;
    for it in 0..=s.iters {
        if it % s.eval_every == 0 || it == s.iters {
            let vl = evaluate(&mut model, &ctx, &corpus, &s, &mut eval_rng)?;
            curve.push((it, vl));
            bar.println(format!("step {it:5}  val loss {vl:.4}"));
        }
        if it == s.iters {
            break;
        }
        if trace.is_some() && it == 10 {
            guard = Some(ctx.profiler_guard()?);
        }
        if trace.is_some() && it == 30 {
            drop(guard.take());
        }
        let (bx, by) =
            if it == 0 { (x0.clone(), y0.clone()) } else { corpus.batch(true, s.batch, block, &mut rng) };
        let started = Instant::now();
        x.copy_from_slice(&bx)?;
        y.copy_from_slice(&by)?;
        let loss = model.loss(&x, &y, block)?;
        model.backward(&x)?;
        let (mut values, grads) = model.params_and_grads()?;
        adam.step(&mut values, &grads)?;
        last_loss = loss.to_scalar()? as f64;
        if it >= 10 {
            busy += started.elapsed().as_secs_f64();
            timed += 1;
        }
        bar.set_message(format!("loss {last_loss:.3}"));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let ms = 1e3 * busy / timed.max(1) as f64;
    let tokens = (s.batch * block) as f64;
    let flops_per_token = 6.0 * params as f64 + 6.0 * (config.layers * block * config.embed) as f64;
    let final_val = curve.last().map_or(f64::NAN, |p| p.1);
    println!(
        "{} steps: last training loss {last_loss:.4}, validation {final_val:.4}; {ms:.2} ms/step, {:.0} tokens/s, {:.1} model TFLOP/s on {}",
        s.iters,
        tokens / ms * 1e3,
        flops_per_token * tokens / ms / 1e9,
        ctx.device()
    );
    if let Some(trace) = &trace {
        profile::write_profile(&ctx, trace)?;
    }
    std::fs::create_dir_all(&out_dir).map_err(|source| ferrocuda::Error::Io {
        op: "train_gpt",
        path: out_dir.clone(),
        source,
    })?;
    let reference =
        args.iter().position(|a| a == "--compare").and_then(|i| args.get(i + 1)).map(|p| reference_curve(p));
    let svg = format!("{out_dir}/train_gpt.svg");
    match write_curve(&svg, &curve, reference.as_deref().unwrap_or(&[])) {
        Ok(()) => println!("curve: {svg}"),
        Err(e) => println!("curve not written ({svg}: {e})"),
    }
    let ckpt = format!("{out_dir}/gpt_char.safetensors");
    let state: Vec<_> =
        adam.state_tensors()?.into_iter().map(|(n, t)| (format!("optimizer.{n}"), t)).collect();
    model.save(&ckpt, &state)?;
    println!("checkpoint: {ckpt} ({} tensors of optimizer state)", state.len());
    let prompt = "And God said";
    let sample = model.generate(&corpus.encode(prompt), 500, 0.8, 20, s.seed)?;
    println!("--- sample (temperature 0.8, top-k 20) ---\n{prompt}{}\n---", corpus.decode(&sample));
    if let Some(path) = args.iter().position(|a| a == "--json").and_then(|i| args.get(i + 1)) {
        let summary = serde_json::json!({
            "impl": "ferrocuda", "device": ctx.device().to_string(), "params": params, "vocab": vocab,
            "iters": s.iters, "batch": s.batch, "block": block, "layers": config.layers, "heads": config.heads,
            "embd": config.embed, "ms_per_step": ms, "tokens_per_s": tokens / ms * 1e3,
            "model_tflops": flops_per_token * tokens / ms / 1e9, "final_val_loss": final_val,
            "curve": curve.iter().map(|&(st, l)| serde_json::json!({"step": st, "val_loss": l})).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&summary).expect("JSON values serialise"))
            .map_err(|source| ferrocuda::Error::Io { op: "train_gpt", path: path.clone(), source })?;
    }
    if small && final_val >= entropy {
        eprintln!("validation loss {final_val:.3} did not fall below the unigram entropy {entropy:.3}");
        std::process::exit(1);
    }
    Ok(())
}
