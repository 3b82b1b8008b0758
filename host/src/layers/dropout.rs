//! [`Dropout`]: zero each element with probability `p` in training (scaling the rest by
//! 1/(1−p)); the identity in evaluation.
use super::{layer_error, saved, InLayer, Layer};
use crate::ops::nn::{dropout_impl, DropoutSeed, DropoutSeeds};
use crate::runtime::error::Result;
use crate::tensor::Tensor;

/// Each forward pass draws a fresh mask from the counter-based generator (seed, then seed + 1, …),
/// so a run is reproducible; backward regenerates the same mask from the saved seed.
///
/// By default the seed is a launch argument, so a CUDA graph would replay one mask forever: in
/// training mode the layer refuses a capture (`NotCapturable`). [`Dropout::capturable`] keeps the
/// count on the device instead (one extra one-thread launch per forward pass), where a captured
/// forward pass advances it at every replay: the same masks, in the same order, as the default.
pub struct Dropout {
    p: f32,
    next_seed: u64,
    kept: Option<Kept>,
    training: bool,
    capturable: bool,
    /// The device-side count of a capturable layer, made at its first forward pass on a device
    /// (from `next_seed`); from then on the count lives there.
    seeds: Option<DropoutSeeds>,
}

/// Where the seed of the last forward pass is, for its backward pass.
#[derive(Clone, Copy)]
enum Kept {
    Host(u64),
    Device,
}

impl Dropout {
    pub fn new(p: f32, seed: u64) -> Self {
        Dropout { p, next_seed: seed, kept: None, training: true, capturable: false, seeds: None }
    }

    /// Keep the seed count on the device, so that the layer may be captured into a CUDA graph
    /// (its first forward pass on a device must come before the capture).
    pub fn capturable(mut self, capturable: bool) -> Self {
        self.capturable = capturable;
        self
    }

    fn seed(&self, kept: Kept) -> DropoutSeed<'_> {
        match (kept, &self.seeds) {
            (Kept::Device, Some(seeds)) => DropoutSeed::Device(seeds),
            // A device pass always made the seeds first; the host count is the fallback.
            (Kept::Device, None) => DropoutSeed::Host(self.next_seed),
            (Kept::Host(seed), _) => DropoutSeed::Host(seed),
        }
    }
}

impl Dropout {
    /// `residual + self.forward(x)` in one pass (a residual connection's dropout and add), rounded
    /// once; [`Layer::backward`] then gives the gradient of `x` (that of `residual` is `dy`).
    pub fn forward_add(&mut self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        self.forward_with(x, Some(residual))
    }

    fn forward_with(&mut self, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        if !(0.0..1.0).contains(&self.p) {
            return Err(layer_error(self, x.shape(), "p must lie in [0, 1)"));
        }
        if !self.training {
            return match residual {
                Some(r) => r.add(x).in_layer(self),
                None => Ok(x.clone()),
            };
        }
        let kept = if self.capturable && x.context().is_cuda() {
            if self.seeds.is_none() {
                let ctx = x.context();
                ctx.refuse_in_capture("Dropout::capturable (first forward pass; take it before the capture)")
                    .in_layer(self)?;
                self.seeds = Some(DropoutSeeds::new(ctx, self.next_seed).in_layer(self)?);
            }
            self.seeds.as_ref().expect("made above").advance().in_layer(self)?;
            Kept::Device
        } else {
            x.context()
                .refuse_in_capture("Dropout (host-side seed: every replay would draw the same mask; use Dropout::capturable)")
                .in_layer(self)?;
            let seed = self.next_seed;
            self.next_seed = self.next_seed.wrapping_add(1);
            Kept::Host(seed)
        };
        let op = if residual.is_some() { "dropout_add" } else { "dropout" };
        let y = dropout_impl(op, x, residual, self.p, self.seed(kept)).in_layer(self)?;
        self.kept = Some(kept);
        Ok(y)
    }
}

impl Layer for Dropout {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, None)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let kept = saved(self.kept.take(), self, dy)?;
        dropout_impl("dropout_backward", dy, None, self.p, self.seed(kept)).in_layer(self)
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
    }
    fn describe(&self) -> String {
        format!("Dropout(p = {}{})", self.p, if self.capturable { ", capturable" } else { "" })
    }
}
