//! [`Dropout`]: zero each element with probability `p` in training (scaling the rest by
//! 1/(1−p)); the identity in evaluation.
use super::{layer_error, saved, InLayer, Layer};
use crate::ops::nn::{dropout, dropout_backward};
use crate::runtime::error::Result;
use crate::tensor::Tensor;

/// Each forward pass draws a fresh mask from the counter-based generator (seed, then seed + 1, …),
/// so a run is reproducible; backward regenerates the same mask from the saved seed. The seed is
/// a launch argument, so a CUDA graph would replay one mask forever: in training mode the layer
/// refuses a capture (`NotCapturable`).
pub struct Dropout {
    p: f32,
    next_seed: u64,
    kept: Option<u64>,
    training: bool,
}

impl Dropout {
    pub fn new(p: f32, seed: u64) -> Self {
        Dropout { p, next_seed: seed, kept: None, training: true }
    }
}

impl Layer for Dropout {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        if !(0.0..1.0).contains(&self.p) {
            return Err(layer_error(self, x.shape(), "p must lie in [0, 1)"));
        }
        if !self.training {
            return Ok(x.clone());
        }
        x.context()
            .refuse_in_capture(
                "Dropout (its seed is a launch argument: every replay would draw the same mask)",
            )
            .in_layer(self)?;
        let seed = self.next_seed;
        self.next_seed = self.next_seed.wrapping_add(1);
        let y = dropout(x, self.p, seed).in_layer(self)?;
        self.kept = Some(seed);
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let seed = saved(self.kept.take(), self, dy)?;
        dropout_backward(dy, self.p, seed).in_layer(self)
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
    }
    fn describe(&self) -> String {
        format!("Dropout(p = {})", self.p)
    }
}
