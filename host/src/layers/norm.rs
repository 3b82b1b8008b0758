//! Normalisation layers: [`LayerNorm`] (over the last axis) and [`BatchNorm2d`] (per channel of
//! NCHW, with running statistics).
use super::{layer_error, saved, InLayer, Layer, Param};
use crate::ops::nn::{
    batch_norm2d_backward, batch_norm2d_eval, batch_norm2d_train, layer_norm, layer_norm_backward,
    BatchNormSaved, LayerNormSaved,
};
use crate::runtime::error::Result;
use crate::tensor::Tensor;
use crate::Context;

/// Layer normalisation over the last axis of size `features`, with learnt scale and shift.
pub struct LayerNorm {
    gamma: Param,
    beta: Param,
    eps: f32,
    kept: Option<(Tensor, LayerNormSaved)>,
    training: bool,
}

impl LayerNorm {
    pub fn new(ctx: &Context, features: usize) -> Result<Self> {
        Ok(LayerNorm {
            gamma: Param::new(ctx.full(&[features], 1.0)?),
            beta: Param::new(ctx.zeros(&[features])?),
            eps: 1e-5,
            kept: None,
            training: true,
        })
    }
    pub fn eps(mut self, eps: f32) -> Self {
        self.eps = eps;
        self
    }
}

impl Layer for LayerNorm {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let (y, stats) =
            layer_norm(x, Some(self.gamma.value()), Some(self.beta.value()), self.eps).in_layer(self)?;
        self.kept = self.training.then(|| (x.clone(), stats));
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let (x, stats) = saved(self.kept.take(), self, dy)?;
        let (dx, dgamma, dbeta) =
            layer_norm_backward(&x, Some(self.gamma.value()), dy, &stats).in_layer(self)?;
        self.gamma.set_grad(dgamma);
        self.beta.set_grad(dbeta);
        Ok(dx)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        vec![&mut self.gamma, &mut self.beta]
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
    }
    fn describe(&self) -> String {
        format!("LayerNorm({})", self.gamma.value().len())
    }
}

/// Batch normalisation of `[N, C, H, W]` per channel: batch statistics in training (and a
/// momentum update of the running ones), running statistics in evaluation.
pub struct BatchNorm2d {
    gamma: Param,
    beta: Param,
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
            gamma: Param::new(ctx.full(&[channels], 1.0)?),
            beta: Param::new(ctx.zeros(&[channels])?),
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
        let channels = self.gamma.value().len();
        if x.rank() != 4 || x.shape()[1] != channels {
            return Err(layer_error(self, x.shape(), format!("expects [N, {channels}, H, W]")));
        }
        if !self.training {
            let (g, b) = (self.gamma.value(), self.beta.value());
            return batch_norm2d_eval(x, g, b, &self.running_mean, &self.running_var, self.eps)
                .in_layer(self);
        }
        let (y, stats) = batch_norm2d_train(
            x,
            self.gamma.value(),
            self.beta.value(),
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
        let (dx, dgamma, dbeta) = batch_norm2d_backward(dy, &x, self.gamma.value(), &stats).in_layer(self)?;
        self.gamma.set_grad(dgamma);
        self.beta.set_grad(dbeta);
        Ok(dx)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        vec![&mut self.gamma, &mut self.beta]
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
    }
    fn describe(&self) -> String {
        format!("BatchNorm2d({})", self.gamma.value().len())
    }
}
