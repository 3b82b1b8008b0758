//! Train an MLP (64 → 128 → 10, ReLU) on the hand-written digits in `data/digits.csv.gz`
//! (1,797 8×8 images; 80/20 split with a fixed seed) with Adam and mini-batches of 64, built from
//! the layer API. Prints a progress bar, loss and test accuracy per epoch, the final accuracy and
//! training samples/s, then the same throughput on the CPU backend for comparison (`--no-cpu`
//! skips that), and writes the curves to `target/train_mlp.svg`. Runs on the GPU, or on the CPU
//! backend where there is none (`--cpu` forces it).
mod common;
use common::{train, write_curves, Digits, CLASSES, PIXELS};
use ferrocuda::layers::{Linear, Relu};
use ferrocuda::{Adam, Context, Result, Sequential};

const HIDDEN: usize = 128;
const BATCH: usize = 64;
const EPOCHS: usize = 30;
/// The accuracy this example promises in the README.
const TARGET_ACCURACY: f64 = 0.95;

fn mlp(ctx: &Context) -> Result<Sequential> {
    Ok(Sequential::new()
        .layer(Linear::new(ctx, PIXELS, HIDDEN, 1)?)
        .layer(Relu::new())
        .layer(Linear::new(ctx, HIDDEN, CLASSES, 2)?))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let ctx = if args.iter().any(|a| a == "--cpu") { Context::cpu() } else { Context::new()? };
    println!("device: {}", ctx.device());
    let data = Digits::load();
    println!("{} training and {} test images", data.train.len(), data.test.len());
    let mut model = mlp(&ctx)?;
    println!("{model} with {} parameters", model.parameter_count());
    let history = train(&ctx, &mut model, &mut Adam::new(3e-3), &data, (&[PIXELS], BATCH, EPOCHS), true)?;
    let final_acc = history.accuracies.last().copied().unwrap_or(0.0);
    println!(
        "final test accuracy {:.2}% after {EPOCHS} epochs; {:.0} training samples/s on {}",
        final_acc * 100.0,
        history.samples_per_s,
        ctx.device()
    );
    if ctx.is_cuda() && !args.iter().any(|a| a == "--no-cpu") {
        let cpu = Context::cpu();
        let mut model = mlp(&cpu)?;
        let h = train(&cpu, &mut model, &mut Adam::new(3e-3), &data, (&[PIXELS], BATCH, 1), false)?;
        println!("CPU backend, one epoch: {:.0} training samples/s", h.samples_per_s);
    }
    let svg = "target/train_mlp.svg";
    match write_curves(svg, "MLP", &history) {
        Ok(()) => println!("curves: {svg}"),
        Err(e) => println!("curves not written ({svg}: {e})"),
    }
    if final_acc < TARGET_ACCURACY {
        eprintln!("test accuracy below {:.0}%", TARGET_ACCURACY * 100.0);
        std::process::exit(1);
    }
    Ok(())
}
