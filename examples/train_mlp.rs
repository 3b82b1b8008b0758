//! Train a two-layer MLP (64 → 128 → 10, ReLU) on the hand-written digits in
//! `data/digits.csv.gz` (1,797 8×8 images): 80/20 split with a fixed seed, Adam, mini-batches of
//! 64; prints loss and accuracy per epoch, the final test accuracy and samples/s, and writes the
//! curves to `target/train_mlp.svg` (run from the repository root). Runs on the GPU, or on the CPU backend where there is none
//! (`--cpu` forces it).
//!
//! Written directly on the ops (linear, relu, cross_entropy, their backward passes, Adam); the
//! layer API of the NN issue will replace the hand-written backward pass.
use ferrocuda::{cross_entropy, linear, Activation, Adam, Context, Gemm, Result, Tensor};
use std::io::Read;
use std::time::Instant;

const HIDDEN: usize = 128;
const CLASSES: usize = 10;
const BATCH: usize = 64;
const EPOCHS: usize = 30;

fn load_digits() -> (Vec<f32>, Vec<u32>) {
    // From the working directory (a copied checkout or bundle), else from the source tree.
    let path = ["data/digits.csv.gz", concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits.csv.gz")]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .expect("data/digits.csv.gz not found (run from the repository root)");
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(file).read_to_string(&mut text).expect("gzip");
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.is_empty()) {
        let v: Vec<f32> = line.split(',').map(|f| f.trim().parse().expect("number")).collect();
        x.extend(v[..64].iter().map(|p| p / 16.0));
        y.push(v[64] as u32);
    }
    (x, y)
}

/// A fixed-seed permutation (xorshift + Fisher–Yates).
fn permutation(n: usize, seed: u64) -> Vec<usize> {
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

struct Mlp {
    params: Vec<Tensor>, // w1 [128, 64], b1 [128], w2 [10, 128], b2 [10]
}

impl Mlp {
    fn new(ctx: &Context) -> Result<Self> {
        let w1 = ctx.randn(&[HIDDEN, 64], 1)?.mul_scalar((2.0f32 / 64.0).sqrt())?;
        let w2 = ctx.randn(&[CLASSES, HIDDEN], 2)?.mul_scalar((2.0f32 / HIDDEN as f32).sqrt())?;
        Ok(Mlp { params: vec![w1, ctx.zeros(&[HIDDEN])?, w2, ctx.zeros(&[CLASSES])?] })
    }

    /// (pre-activation of the hidden layer, hidden activations, logits)
    fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let pre = linear(x, &self.params[0], Some(&self.params[1]), Activation::None)?;
        let h = pre.relu()?;
        let logits = linear(&h, &self.params[2], Some(&self.params[3]), Activation::None)?;
        Ok((pre, h, logits))
    }

    /// Gradients of the mean cross-entropy w.r.t. the parameters, and the loss.
    fn backward(&self, x: &Tensor, labels: &[u32]) -> Result<(Vec<Tensor>, f32)> {
        let (pre, h, logits) = self.forward(x)?;
        let (loss, dlogits) = cross_entropy(&logits, labels)?;
        let ones = x.context().full(&[1, labels.len()], 1.0)?;
        let dw2 = Gemm::new(&dlogits, &h).transpose_a(true).run()?;
        let db2 = ones.matmul(&dlogits)?.reshape(&[CLASSES])?;
        let dh = dlogits.matmul(&self.params[2])?;
        let dpre = pre.relu_backward(&dh)?;
        let dw1 = Gemm::new(&dpre, x).transpose_a(true).run()?;
        let db1 = ones.matmul(&dpre)?.reshape(&[HIDDEN])?;
        Ok((vec![dw1, db1, dw2, db2], loss.to_scalar()?))
    }

    fn accuracy(&self, x: &Tensor, labels: &[u32]) -> Result<f64> {
        let logits = self.forward(x)?.2.to_vec()?;
        let correct = logits
            .chunks(CLASSES)
            .zip(labels)
            .filter(|(row, &l)| {
                let best = row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i);
                best == Some(l as usize)
            })
            .count();
        Ok(correct as f64 / labels.len() as f64)
    }
}

fn gather(x: &[f32], y: &[u32], idx: &[usize]) -> (Vec<f32>, Vec<u32>) {
    (
        idx.iter().flat_map(|&i| x[i * 64..(i + 1) * 64].iter().copied()).collect(),
        idx.iter().map(|&i| y[i]).collect(),
    )
}

fn write_svg(path: &str, losses: &[f32], accuracies: &[f64]) -> std::io::Result<()> {
    let max_loss = losses.iter().cloned().fold(f32::MIN, f32::max).max(1e-6);
    let points = |values: &mut dyn Iterator<Item = f64>| {
        values
            .enumerate()
            .map(|(i, v)| {
                format!(
                    "{:.1},{:.1}",
                    40.0 + 520.0 * i as f64 / (losses.len().max(2) - 1) as f64,
                    260.0 - 220.0 * v
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let loss = points(&mut losses.iter().map(|&l| (l / max_loss) as f64));
    let acc = points(&mut accuracies.iter().copied());
    let svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='600' height='300' font-family='sans-serif' font-size='12'>\n\
         <rect width='600' height='300' fill='white'/>\n\
         <line x1='40' y1='260' x2='560' y2='260' stroke='black'/><line x1='40' y1='40' x2='40' y2='260' stroke='black'/>\n\
         <polyline fill='none' stroke='crimson' stroke-width='2' points='{loss}'/>\n\
         <polyline fill='none' stroke='steelblue' stroke-width='2' points='{acc}'/>\n\
         <text x='50' y='30' fill='crimson'>training loss (÷{max_loss:.2})</text>\n\
         <text x='300' y='30' fill='steelblue'>test accuracy (0..1)</text>\n\
         <text x='270' y='290'>epoch 1..{}</text>\n</svg>\n",
        losses.len()
    );
    std::fs::write(path, svg)
}

fn main() -> Result<()> {
    let ctx = if std::env::args().any(|a| a == "--cpu") { Context::cpu() } else { Context::new()? };
    println!("device: {}", ctx.device());
    let (x, y) = load_digits();
    let order = permutation(y.len(), 2026);
    let split = y.len() * 4 / 5;
    let (train_idx, test_idx) = order.split_at(split);
    let (test_x, test_y) = gather(&x, &y, test_idx);
    let test_x = ctx.from_slice(&test_x, &[test_y.len(), 64])?;
    println!("{} training and {} test images", train_idx.len(), test_idx.len());

    let mut model = Mlp::new(&ctx)?;
    let mut adam = Adam::new(3e-3);
    let (mut losses, mut accuracies) = (Vec::new(), Vec::new());
    let started = Instant::now();
    let mut seen = 0usize;
    for epoch in 1..=EPOCHS {
        let shuffled: Vec<usize> =
            permutation(train_idx.len(), epoch as u64).iter().map(|&i| train_idx[i]).collect();
        let mut total = 0.0f64;
        let batches = shuffled.chunks(BATCH);
        let count = batches.len();
        for batch in batches {
            let (bx, by) = gather(&x, &y, batch);
            let bx = ctx.from_slice(&bx, &[by.len(), 64])?;
            let (grads, loss) = model.backward(&bx, &by)?;
            adam.step(&mut model.params, &grads)?;
            total += loss as f64;
            seen += by.len();
        }
        let acc = model.accuracy(&test_x, &test_y)?;
        losses.push((total / count as f64) as f32);
        accuracies.push(acc);
        println!("epoch {epoch:>2}: loss {:.4}  test accuracy {:.2}%", total / count as f64, acc * 100.0);
    }
    ctx.synchronize()?;
    let secs = started.elapsed().as_secs_f64();
    let final_acc = accuracies.last().copied().unwrap_or(0.0);
    println!(
        "final test accuracy {:.2}% after {EPOCHS} epochs; {:.0} training samples/s on {}",
        final_acc * 100.0,
        seen as f64 / secs,
        ctx.device()
    );
    let svg = "target/train_mlp.svg";
    match std::fs::create_dir_all("target").and_then(|_| write_svg(svg, &losses, &accuracies)) {
        Ok(()) => println!("curves: {svg}"),
        Err(e) => println!("curves not written ({svg}: {e})"),
    }
    if final_acc < 0.95 {
        eprintln!("test accuracy below 95%");
        std::process::exit(1);
    }
    Ok(())
}
