//! Normalisation layers: [`LayerNorm`] (over the last axis) and [`BatchNorm2d`] (per channel of
//! NCHW, with running statistics).
use super::{saved, InLayer, Layer, Param};
use crate::ops::nn::{layer_norm, layer_norm_backward, LayerNormSaved};
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
