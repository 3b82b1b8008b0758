//! Train a LeNet-style CNN on the hand-written digits in `data/digits.csv.gz` (1,797 8×8 images;
//! the same 80/20 split as train_mlp): conv 3×3 → batch norm → ReLU → max pool, twice, then
//! dropout and two linear layers; Adam, mini-batches of 64. Prints a progress bar, loss and test
//! accuracy per epoch, the final accuracy and training samples/s, then the same throughput on the
//! CPU backend (`--no-cpu` skips it), and writes the curves to `target/train_cnn.svg`. Runs on
//! the GPU, or on the CPU backend where there is none (`--cpu` forces it). `--graph` captures the
//! whole training step into a CUDA graph once and replays it for every batch (the dropout layer
//! keeps its seed count on the device, so every replay draws a new mask, the same as eager
//! training's).
//! `--profile FILE` profiles the training run: the per-kernel table, copies and pool activity
//! are printed at the end, the Chrome trace (Perfetto) goes to FILE and the JSON summary to FILE
//! with `.json` replaced by `.summary.json`.
mod common;
use common::{Example, CLASSES};
use ferrocuda::layers::{BatchNorm2d, Conv2d, Dropout, Flatten, Linear, MaxPool2d, Relu};
use ferrocuda::{Context, Result, Sequential};

/// [1, 8, 8] → conv(16) → [16, 8, 8] → pool → [16, 4, 4] → conv(32) → [32, 4, 4] → pool →
/// [32, 2, 2] → 128 → 64 → 10.
fn lenet(ctx: &Context) -> Result<Sequential> {
    Ok(Sequential::new()
        .layer(Conv2d::new(ctx, 1, 16, 3, 1)?.padding(1))
        .layer(BatchNorm2d::new(ctx, 16)?)
        .layer(Relu::new())
        .layer(MaxPool2d::new(2))
        .layer(Conv2d::new(ctx, 16, 32, 3, 2)?.padding(1))
        .layer(BatchNorm2d::new(ctx, 32)?)
        .layer(Relu::new())
        .layer(MaxPool2d::new(2))
        .layer(Flatten::new())
        .layer(Dropout::new(0.25, 3).capturable(true))
        .layer(Linear::new(ctx, 128, 64, 4)?)
        .layer(Relu::new())
        .layer(Linear::new(ctx, 64, CLASSES, 5)?))
}

fn main() -> Result<()> {
    common::run(Example {
        name: "CNN",
        build: lenet,
        sample_shape: &[1, 8, 8],
        batch: 64,
        epochs: 20,
        learning_rate: 2e-3,
        target_accuracy: 0.95,
    })
}
