//! Train an MLP (64 → 128 → 10, ReLU) on the hand-written digits in `data/digits.csv.gz`
//! (1,797 8×8 images; 80/20 split with a fixed seed) with Adam and mini-batches of 64, built from
//! the layer API. Prints a progress bar, loss and test accuracy per epoch, the final accuracy and
//! training samples/s, then the same throughput on the CPU backend for comparison (`--no-cpu`
//! skips that), and writes the curves to `target/train_mlp.svg`. Runs on the GPU, or on the CPU
//! backend where there is none (`--cpu` forces it). `--graph` captures the whole training step
//! into a CUDA graph once and replays it for every batch.
//! `--profile FILE` profiles the training run: the per-kernel table, copies and pool activity
//! are printed at the end, the Chrome trace (Perfetto) goes to FILE and the JSON summary to FILE
//! with `.json` replaced by `.summary.json`.
mod common;
use common::{Example, CLASSES, PIXELS};
use ferrocuda::layers::{Linear, Relu};
use ferrocuda::{Context, Result, Sequential};

const HIDDEN: usize = 128;

fn mlp(ctx: &Context) -> Result<Sequential> {
    Ok(Sequential::new()
        .layer(Linear::new(ctx, PIXELS, HIDDEN, 1)?)
        .layer(Relu::new())
        .layer(Linear::new(ctx, HIDDEN, CLASSES, 2)?))
}

fn main() -> Result<()> {
    common::run(Example {
        name: "MLP",
        build: mlp,
        sample_shape: &[PIXELS],
        batch: 64,
        epochs: 30,
        learning_rate: 3e-3,
        target_accuracy: 0.95,
    })
}
