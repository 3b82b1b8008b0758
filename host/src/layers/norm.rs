//! Normalisation layers: [`LayerNorm`] (over the last axis) and [`BatchNorm2d`] (per channel of
//! NCHW, with running statistics).
use super::{layer_error, saved, InLayer, Layer, Param, WeightBias};
use crate::ops::nn::{
    batch_norm2d_backward, batch_norm2d_eval, batch_norm2d_train, layer_norm, layer_norm_backward,
    layer_norm_backward_add, BatchNormSaved, LayerNormSaved,
};
use crate::runtime::error::Result;
use crate::tensor::Tensor;
use crate::Context;

/// Layer normalisation over the last axis of size `features`, with learnt scale and shift.
pub struct LayerNorm {
    affine: WeightBias,
    eps: f32,
    kept: Option<(Tensor, LayerNormSaved)>,
    training: bool,
}

impl LayerNorm {
    pub fn new(ctx: &Context, features: usize) -> Result<Self> {
        Ok(LayerNorm { affine: WeightBias::affine(ctx, features)?, eps: 1e-5, kept: None, training: true })
    }
    pub fn eps(mut self, eps: f32) -> Self {
        self.eps = eps;
        self
    }

    /// [`Layer::backward`] plus `residual` (like `dy`): the input gradient of a pre-norm residual
    /// block in one pass where the one-launch kernel runs (`layer_norm_backward_add`).
    pub fn backward_add(&mut self, dy: &Tensor, residual: &Tensor) -> Result<Tensor> {
        self.backward_with(dy, Some(residual))
    }

    /// The parameters' gradients (stored) and the input's, plus `residual` where given.
    fn backward_with(&mut self, dy: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        let (x, stats) = saved(self.kept.take(), self, dy)?;
        let gamma = Some(self.affine.weight.value());
        let (dx, dgamma, dbeta) = match residual {
            Some(r) => layer_norm_backward_add(&x, gamma, dy, &stats, r),
            None => layer_norm_backward(&x, gamma, dy, &stats),
        }
        .in_layer(self)?;
        self.affine.set_grads(dgamma, Some(dbeta))?;
        Ok(dx)
    }
}

impl Layer for LayerNorm {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let (gamma, beta) = self.affine.scale_shift();
        let (y, stats) = layer_norm(x, Some(gamma), Some(beta), self.eps).in_layer(self)?;
        self.kept = self.training.then(|| (x.clone(), stats));
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        self.backward_with(dy, None)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        self.affine.params_mut()
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
    }
    fn describe(&self) -> String {
        format!("LayerNorm({})", self.affine.weight.value().len())
    }
}

/// Batch normalisation of `[N, C, H, W]` per channel: batch statistics in training (and a
/// momentum update of the running ones), running statistics in evaluation.
pub struct BatchNorm2d {
    affine: WeightBias,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: f32,
    eps: f32,
    kept: Option<(Tensor, BatchNormSaved)>,
    training: bool,
}

impl BatchNorm2d {
    /// PyTorch's defaults: γ = 1, β = 0, running mean 0 and variance 1, momentum 0.1, eps 1e-5.
    pub fn new(ctx: &Context, channels: usize) -> Result<Self> {
        Ok(BatchNorm2d {
            affine: WeightBias::affine(ctx, channels)?,
            running_mean: ctx.zeros(&[channels])?,
            running_var: ctx.full(&[channels], 1.0)?,
            momentum: 0.1,
            eps: 1e-5,
            kept: None,
            training: true,
        })
    }
    pub fn momentum(mut self, momentum: f32) -> Self {
        self.momentum = momentum;
        self
    }
    pub fn running_mean(&self) -> &Tensor {
        &self.running_mean
    }
    pub fn running_var(&self) -> &Tensor {
        &self.running_var
    }
}

impl Layer for BatchNorm2d {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let channels = self.affine.weight.value().len();
        if x.rank() != 4 || x.shape()[1] != channels {
            return Err(layer_error(self, x.shape(), format!("expects [N, {channels}, H, W]")));
        }
        if !self.training {
            let (g, b) = self.affine.scale_shift();
            return batch_norm2d_eval(x, g, b, &self.running_mean, &self.running_var, self.eps)
                .in_layer(self);
        }
        let (gamma, beta) = self.affine.scale_shift();
        let (y, stats) = batch_norm2d_train(
            x,
            gamma,
            beta,
            &mut self.running_mean,
            &mut self.running_var,
            self.momentum,
            self.eps,
        )
        .in_layer(self)?;
        self.kept = Some((x.clone(), stats));
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let (x, stats) = saved(self.kept.take(), self, dy)?;
        let (dx, dgamma, dbeta) =
            batch_norm2d_backward(dy, &x, self.affine.weight.value(), &stats).in_layer(self)?;
        self.affine.set_grads(dgamma, Some(dbeta))?;
        Ok(dx)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        self.affine.params_mut()
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
    }
    fn describe(&self) -> String {
        format!("BatchNorm2d({})", self.affine.weight.value().len())
    }
}
