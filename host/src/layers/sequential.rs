//! [`Sequential`]: layers applied in order, trained with any [`Optimizer`].
use super::{values_and_grads, Layer, Param};
use crate::ops::optim::{clip_grad_norm, GradNorm, Optimizer};
use crate::runtime::error::{Error, Result};
use crate::tensor::Tensor;
use std::fmt;

/// Layers applied one after another; backward runs them in reverse.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Layer>>,
}

impl Sequential {
    pub fn new() -> Self {
        Self::default()
    }
    /// Append a layer (builder style).
    pub fn layer(mut self, layer: impl Layer + 'static) -> Self {
        self.layers.push(Box::new(layer));
        self
    }
    pub fn len(&self) -> usize {
        self.layers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
    /// Training mode: batch statistics, dropout on, forward passes saved for backward.
    pub fn train(&mut self) {
        self.set_training(true);
    }
    /// Evaluation mode: running statistics, no dropout, nothing saved.
    pub fn eval(&mut self) {
        self.set_training(false);
    }
    /// Number of trainable scalars.
    pub fn parameter_count(&mut self) -> usize {
        self.params_mut().iter().map(|p| p.value().len()).sum()
    }
    /// One optimizer step (one fused launch) over every parameter, from the last backward's
    /// gradients.
    pub fn step(&mut self, optimizer: &mut impl Optimizer) -> Result<()> {
        let (mut values, grads) = self.values_and_grads()?;
        optimizer.update(&mut values, &grads)
    }
    /// [`Sequential::step`] with the gradients clipped to a global norm of `max_norm` inside the
    /// step ([`clip_grad_norm`] then [`Optimizer::step_clipped`]); returns the norm (on the device).
    pub fn step_clipped(&mut self, optimizer: &mut impl Optimizer, max_norm: f32) -> Result<GradNorm> {
        let (mut values, grads) = self.values_and_grads()?;
        let norm = clip_grad_norm(&grads, max_norm)?;
        optimizer.update_clipped(&mut values, &grads, Some(&norm))?;
        Ok(norm)
    }
    /// Every parameter's value and gradient (an error naming the first without one).
    fn values_and_grads(&mut self) -> Result<(Vec<&mut Tensor>, Vec<&Tensor>)> {
        values_and_grads(self.params_mut().into_iter().enumerate(), |i, shape| Error::InvalidArgument {
            op: "Sequential::step",
            shape,
            reason: format!("parameter {i} has no gradient (run backward first)"),
        })
    }
}

impl Layer for Sequential {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let mut y = x.clone();
        for layer in &mut self.layers {
            y = layer.forward(&y)?;
        }
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let mut d = dy.clone();
        for layer in self.layers.iter_mut().rev() {
            d = layer.backward(&d)?;
        }
        Ok(d)
    }
    /// Layers before the first with parameters get no gradient at all, that one only its
    /// parameters' (see [`Layer::backward_params`]).
    fn backward_params(&mut self, dy: &Tensor) -> Result<()> {
        let Some(first) = self.layers.iter_mut().position(|l| !l.params_mut().is_empty()) else {
            return Ok(());
        };
        let mut d = dy.clone();
        for layer in self.layers[first + 1..].iter_mut().rev() {
            d = layer.backward(&d)?;
        }
        self.layers[first].backward_params(&d)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        self.layers.iter_mut().flat_map(|l| l.params_mut()).collect()
    }
    fn set_training(&mut self, training: bool) {
        for layer in &mut self.layers {
            layer.set_training(training);
        }
    }
    fn describe(&self) -> String {
        format!("Sequential({} layers)", self.layers.len())
    }
}

impl fmt::Display for Sequential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Sequential(")?;
        for layer in &self.layers {
            writeln!(f, "  {},", layer.describe())?;
        }
        write!(f, ")")
    }
}
