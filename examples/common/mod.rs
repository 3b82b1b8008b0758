//! What the training examples share: the digits data (80/20 split with a fixed seed), the
//! training loop with a progress bar per epoch, and the loss/accuracy curves (plotters, SVG).
use ferrocuda::{
    cross_entropy_labels, Adam, Context, DeviceDataset, Graph, Labels, Layer, Optimizer, Result, Sequential,
    Sgd, Tensor,
};
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use std::collections::HashMap;
use std::io::Read;
use std::time::Instant;

mod profile;
use profile::{profile_path, write_profile};

/// Pixels of one 8×8 digit image.
pub const PIXELS: usize = 64;
pub const CLASSES: usize = 10;

/// The 1,797 hand-written digits of `data/digits.csv.gz`, pixels scaled to [0, 1], split 80/20.
pub struct Digits {
    pixels: Vec<f32>,
    labels: Vec<u32>,
    pub train: Vec<usize>,
    pub test: Vec<usize>,
}

impl Digits {
    pub fn load() -> Digits {
        // From the working directory (a copied checkout or bundle), else from the source tree.
        let path = ["data/digits.csv.gz", concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits.csv.gz")]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file())
            .expect("data/digits.csv.gz not found (run from the repository root)");
        let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut text = String::new();
        flate2::read::GzDecoder::new(file).read_to_string(&mut text).expect("gzip");
        let (mut pixels, mut labels) = (Vec::new(), Vec::new());
        for line in text.lines().filter(|l| !l.is_empty()) {
            let v: Vec<f32> = line.split(',').map(|f| f.trim().parse().expect("number")).collect();
            pixels.extend(v[..PIXELS].iter().map(|p| p / 16.0));
            labels.push(v[PIXELS] as u32);
        }
        let order = permutation(labels.len(), 2026);
        let (train, test) = order.split_at(labels.len() * 4 / 5);
        Digits { pixels, labels, train: train.to_vec(), test: test.to_vec() }
    }

    /// The training images and labels on `ctx` (one copy), images shaped `sample_shape`, to
    /// serve the training steps' mini-batches from without a copy per step; row `i` is
    /// `train[i]`.
    pub fn train_on_device(&self, ctx: &Context, sample_shape: &[usize]) -> Result<DeviceDataset> {
        let (pixels, labels) = self.batch_host(&self.train);
        let mut shape = vec![labels.len()];
        shape.extend_from_slice(sample_shape);
        DeviceDataset::new(ctx.from_slice(&pixels, &shape)?, ctx.labels(&labels, CLASSES)?)
    }

    /// The images and labels at `idx`, as a tensor of `[idx.len()] + sample_shape`.
    pub fn batch(&self, ctx: &Context, idx: &[usize], sample_shape: &[usize]) -> Result<(Tensor, Vec<u32>)> {
        let (x, labels) = self.batch_host(idx);
        let mut shape = vec![idx.len()];
        shape.extend_from_slice(sample_shape);
        Ok((ctx.from_slice(&x, &shape)?, labels))
    }

    /// The pixels and labels at `idx`, on the host.
    pub fn batch_host(&self, idx: &[usize]) -> (Vec<f32>, Vec<u32>) {
        let x = idx.iter().flat_map(|&i| self.pixels[i * PIXELS..(i + 1) * PIXELS].iter().copied()).collect();
        (x, idx.iter().map(|&i| self.labels[i]).collect())
    }
}

/// A fixed-seed permutation (xorshift + Fisher–Yates).
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut s = seed | 1;
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        p.swap(i, (s % (i as u64 + 1)) as usize);
    }
    p
}

/// Per-epoch mean training loss and test accuracy, and the training throughput.
#[derive(Default)]
pub struct History {
    pub losses: Vec<f64>,
    pub accuracies: Vec<f64>,
    pub samples_per_s: f64,
    /// The throughput after the first epoch (which also grows the pool and, with `--graph`,
    /// captures the graphs); `None` for a run of one epoch.
    pub steady_samples_per_s: Option<f64>,
    /// Samples and seconds of training steps: every epoch, and every epoch after the first.
    timed: [(usize, f64); 2],
    /// Host ms of each capture (batch size, ms of `Context::capture`, ms of the first launch).
    pub captures: Vec<(usize, f64, f64)>,
    /// Host ms of the eager step before the first capture.
    pub warm_up_ms: Option<f64>,
    /// Ms spent loading kernel modules (each at its first launch) during the run; CUDA only.
    pub module_load_ms: Option<f64>,
}

impl History {
    /// Count one epoch's training steps.
    fn timed_epoch(&mut self, epoch: usize, samples: usize, seconds: f64) {
        for (i, (n, t)) in self.timed.iter_mut().enumerate() {
            if i == 0 || epoch > 1 {
                (*n, *t) = (*n + samples, *t + seconds);
            }
        }
        let [(n, t), (n_after, t_after)] = self.timed;
        self.samples_per_s = n as f64 / t;
        self.steady_samples_per_s = (n_after > 0).then(|| n_after as f64 / t_after);
    }

    /// Where the first epoch's time went: its ms beside a later epoch's mean, and the captures.
    pub fn first_epoch_line(&self) -> String {
        let [(n, t), (n_after, t_after)] = self.timed;
        let first_ms = (t - t_after) * 1e3;
        let later = (n_after > 0).then(|| t_after * 1e3 / (n_after as f64 / (n - n_after) as f64));
        let mut line = format!("first epoch {first_ms:.1} ms");
        if let Some(ms) = later {
            line += &format!(", a later one {ms:.2} ms");
        }
        if let Some(ms) = self.warm_up_ms {
            line += &format!("; eager warm-up step {ms:.2} ms");
        }
        if let Some(ms) = self.module_load_ms {
            line += &format!(" (kernel module loads {ms:.2} ms in all)");
        }
        for (batch, capture_ms, launch_ms) in &self.captures {
            line += &format!(
                "; capture of the batch-{batch} step {capture_ms:.2} ms, its first launch {launch_ms:.2} ms"
            );
        }
        line
    }
}

/// Fraction of `idx` that `model` (in eval mode) classifies right.
pub fn accuracy(
    ctx: &Context,
    model: &mut Sequential,
    data: &Digits,
    idx: &[usize],
    shape: &[usize],
) -> Result<f64> {
    model.eval();
    let (x, labels) = data.batch(ctx, idx, shape)?;
    let logits = model.forward(&x)?.to_vec()?;
    model.train();
    let correct = logits
        .chunks(CLASSES)
        .zip(&labels)
        .filter(|(row, &l)| {
            row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i) == Some(l as usize)
        })
        .count();
    Ok(correct as f64 / labels.len() as f64)
}

/// Train `model` with mean cross-entropy for `epochs` over shuffled mini-batches of `batch`
/// images shaped `shape` each; `progress` shows a bar per epoch. Throughput counts training
/// steps only (not the per-epoch evaluation).
pub fn train(
    ctx: &Context,
    model: &mut Sequential,
    optimizer: &mut impl Optimizer,
    data: &Digits,
    (shape, batch, epochs): (&[usize], usize, usize),
    progress: bool,
) -> Result<History> {
    let mut history = History::default();
    let mut dataset = data.train_on_device(ctx, shape)?;
    model.train();
    for epoch in 1..=epochs {
        let order = epoch_order(data, epoch);
        let batches: Vec<usize> = order.chunks(batch).map(<[usize]>::len).collect();
        let bar = epoch_bar(epoch, batches.len(), progress, ", loss {msg}");
        let started = Instant::now();
        dataset.set_order(&order)?;
        let mut total = 0.0f64;
        for &size in &batches {
            let (x, labels) = dataset.next_batch(size)?;
            let logits = model.forward(&x)?;
            let (loss, dlogits) = cross_entropy_labels(&logits, &labels)?;
            model.backward_params(&dlogits)?;
            model.step(optimizer)?;
            let loss = loss.to_scalar()? as f64;
            total += loss;
            bar.set_message(format!("{loss:.4}"));
            bar.inc(1);
        }
        ctx.synchronize()?;
        history.timed_epoch(epoch, order.len(), started.elapsed().as_secs_f64());
        bar.finish_and_clear();
        end_epoch(ctx, model, data, shape, &mut history, epoch, total / batches.len() as f64)?;
    }
    Ok(history)
}

/// The training images of `epoch` (rows of [`Digits::train_on_device`]), shuffled (the same
/// order for every run).
fn epoch_order(data: &Digits, epoch: usize) -> Vec<usize> {
    permutation(data.train.len(), epoch as u64)
}

/// The epoch's progress bar over `batches` (hidden without `progress`); `tail` ends its template.
fn epoch_bar(epoch: usize, batches: usize, progress: bool, tail: &str) -> ProgressBar {
    let bar = if progress { ProgressBar::new(batches as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "epoch {{prefix:>2}} [{{bar:30}}] {{pos}}/{{len}} batches{tail}"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(epoch.to_string());
    bar
}

/// Test accuracy after `epoch`, recorded with its mean training `loss` and printed.
fn end_epoch(
    ctx: &Context,
    model: &mut Sequential,
    data: &Digits,
    shape: &[usize],
    history: &mut History,
    epoch: usize,
    loss: f64,
) -> Result<()> {
    let acc = accuracy(ctx, model, data, &data.test, shape)?;
    history.losses.push(loss);
    history.accuracies.push(acc);
    println!("epoch {epoch:>2}: loss {loss:.4}  test accuracy {:.2}%", acc * 100.0);
    Ok(())
}

/// One training step on a batch; the batch's mean loss is added to `loss_sum` on the device
/// (SGD with learning rate −1 on `loss_sum` is an in-place `+=`), so the host reads the loss once
/// per epoch.
fn graph_step(
    model: &mut Sequential,
    adam: &mut Adam,
    (x, labels): (&Tensor, &Labels),
    (sum, loss_sum): (&mut Sgd, &mut Tensor),
) -> Result<()> {
    let logits = model.forward(x)?;
    let (loss, dlogits) = cross_entropy_labels(&logits, labels)?;
    model.backward_params(&dlogits)?;
    model.step(adam)?;
    sum.step(&mut [loss_sum], &[&loss])
}

/// [`train`] with CUDA graphs: the whole step (the batch gathered on the device, forward,
/// backward, Adam) is captured once per batch size, after one eager step has made the optimizer's
/// state, and replayed for every later batch; each replay serves the next batch of the epoch's
/// order. `adam` must be [`Adam::capturable`].
pub fn train_graph(
    ctx: &Context,
    model: &mut Sequential,
    adam: &mut Adam,
    data: &Digits,
    (shape, batch, epochs): (&[usize], usize, usize),
    progress: bool,
) -> Result<History> {
    let mut history = History::default();
    let mut dataset = data.train_on_device(ctx, shape)?;
    let mut graphs: HashMap<usize, Graph> = HashMap::new();
    let (mut sum, mut loss_sum, mut warmed) = (Sgd::new(-1.0), ctx.zeros(&[])?, false);
    model.train();
    for epoch in 1..=epochs {
        let order = epoch_order(data, epoch);
        let batches: Vec<usize> = order.chunks(batch).map(<[usize]>::len).collect();
        let bar = epoch_bar(epoch, batches.len(), progress, " (CUDA graph)");
        let started = Instant::now();
        dataset.set_order(&order)?;
        loss_sum.copy_from_slice(&[0.0f32])?;
        for &size in &batches {
            let mut step = |dataset: &mut DeviceDataset| {
                let (x, labels) = dataset.next_batch(size)?;
                graph_step(model, adam, (&x, &labels), (&mut sum, &mut loss_sum))
            };
            match graphs.get(&size) {
                Some(graph) => graph.launch()?,
                None if warmed => {
                    let captured = Instant::now();
                    let graph = ctx.capture(|| step(&mut dataset))?;
                    let launched = Instant::now();
                    graph.launch()?;
                    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
                    history.captures.push((size, ms(captured, launched), ms(launched, Instant::now())));
                    graphs.insert(size, graph);
                }
                None => {
                    let started = Instant::now();
                    step(&mut dataset)?;
                    history.warm_up_ms = Some(started.elapsed().as_secs_f64() * 1e3);
                    warmed = true;
                }
            }
            bar.inc(1);
        }
        let total = loss_sum.to_scalar()? as f64;
        history.timed_epoch(epoch, order.len(), started.elapsed().as_secs_f64());
        bar.finish_and_clear();
        end_epoch(ctx, model, data, shape, &mut history, epoch, total / batches.len() as f64)?;
    }
    Ok(history)
}

/// The loss and accuracy curves side by side, as an SVG at `path`.
pub fn write_curves(
    path: &str,
    title: &str,
    history: &History,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(path, (900, 360)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(450);
    let epochs = history.losses.len().max(2) as f64;
    let max_loss = history.losses.iter().cloned().fold(0.0, f64::max).max(1e-6) * 1.05;
    let mut loss = ChartBuilder::on(&left)
        .caption(format!("{title}: training loss"), ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(45)
        .build_cartesian_2d(1.0..epochs, 0.0..max_loss)?;
    loss.configure_mesh().x_desc("epoch").y_desc("cross-entropy").draw()?;
    loss.draw_series(LineSeries::new(
        history.losses.iter().enumerate().map(|(i, &l)| (i as f64 + 1.0, l)),
        &RED,
    ))?;
    let low = history.accuracies.iter().cloned().fold(1.0, f64::min).min(0.9) * 100.0;
    let mut acc = ChartBuilder::on(&right)
        .caption(format!("{title}: test accuracy"), ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(45)
        .build_cartesian_2d(1.0..epochs, low..100.0)?;
    acc.configure_mesh().x_desc("epoch").y_desc("%").draw()?;
    acc.draw_series(LineSeries::new(
        history.accuracies.iter().enumerate().map(|(i, &a)| (i as f64 + 1.0, a * 100.0)),
        &BLUE,
    ))?;
    root.present()?;
    Ok(())
}

/// One training example: a model, its input shape and schedule.
pub struct Example {
    /// Short name for the curves' titles and the SVG's file name (`target/train_<name>.svg`).
    pub name: &'static str,
    pub build: fn(&Context) -> Result<Sequential>,
    pub sample_shape: &'static [usize],
    pub batch: usize,
    pub epochs: usize,
    pub learning_rate: f32,
    /// The test accuracy the README promises; the example exits non-zero below it.
    pub target_accuracy: f64,
}

/// The examples' `main`: train on the GPU (or the CPU backend with `--cpu`, or without a
/// device; `--graph` replays each training step as a CUDA graph, see [`train_graph`]), report, time
/// one epoch on the CPU backend for comparison (`--no-cpu` skips it), write the curves, and fail
/// below the promised accuracy. `--profile FILE` profiles the training run (every epoch, the
/// evaluations included), prints the report, and writes the Chrome trace to FILE and the summary
/// to [`summary_path`]`(FILE)`.
pub fn run(example: Example) -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let ctx = if args.iter().any(|a| a == "--cpu") { Context::cpu() } else { Context::new()? };
    println!("device: {}", ctx.device());
    let data = Digits::load();
    println!("{} training and {} test images", data.train.len(), data.test.len());
    let mut model = (example.build)(&ctx)?;
    println!("{model} with {} parameters", model.parameter_count());
    let profile = profile_path(&args);
    let guard = profile.as_ref().map(|_| ctx.profiler_guard()).transpose()?;
    let schedule = (example.sample_shape, example.batch, example.epochs);
    let graphs = ctx.is_cuda() && args.iter().any(|a| a == "--graph");
    let loaded_before = ctx.module_load_time();
    let mut history = if graphs {
        let mut adam = Adam::new(example.learning_rate).capturable(true);
        train_graph(&ctx, &mut model, &mut adam, &data, schedule, true)?
    } else {
        train(&ctx, &mut model, &mut Adam::new(example.learning_rate), &data, schedule, true)?
    };
    if let (Some(before), Some(after)) = (loaded_before, ctx.module_load_time()) {
        history.module_load_ms = Some((after - before).as_secs_f64() * 1e3);
    }
    if let Some(trace) = &profile {
        drop(guard);
        write_profile(&ctx, trace)?;
    }
    let final_acc = history.accuracies.last().copied().unwrap_or(0.0);
    let steady = history.steady_samples_per_s.map(|s| format!(" ({s:.0} after the first epoch)"));
    println!(
        "final test accuracy {:.2}% after {} epochs; {:.0} training samples/s{} on {}{}",
        final_acc * 100.0,
        example.epochs,
        history.samples_per_s,
        steady.unwrap_or_default(),
        ctx.device(),
        if graphs { " (CUDA graphs)" } else { "" }
    );
    println!("{}", history.first_epoch_line());
    if ctx.is_cuda() && !args.iter().any(|a| a == "--no-cpu") {
        let cpu = Context::cpu();
        let mut model = (example.build)(&cpu)?;
        let schedule = (example.sample_shape, example.batch, 1);
        let h = train(&cpu, &mut model, &mut Adam::new(example.learning_rate), &data, schedule, false)?;
        println!("CPU backend, one epoch: {:.0} training samples/s", h.samples_per_s);
    }
    let svg = format!("target/train_{}.svg", example.name.to_lowercase());
    match write_curves(&svg, example.name, &history) {
        Ok(()) => println!("curves: {svg}"),
        Err(e) => println!("curves not written ({svg}: {e})"),
    }
    if final_acc < example.target_accuracy {
        eprintln!("test accuracy below {:.0}%", example.target_accuracy * 100.0);
        std::process::exit(1);
    }
    Ok(())
}
