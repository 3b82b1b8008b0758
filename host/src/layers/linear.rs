//! [`Linear`]: `y = x·Wᵀ + b` on the fused GEMM.
use super::{layer_error, saved, uniform_init, InLayer, Layer, Param, WeightBias};
use crate::ops::matmul::{linear, Activation, Gemm};
use crate::runtime::error::Result;
use crate::tensor::Tensor;
use crate::Context;

/// Fully connected layer: input `[batch, in]`, weight `[out, in]`, bias `[out]`.
pub struct Linear {
    weights: WeightBias,
    input: Option<Tensor>,
    training: bool,
}

impl Linear {
    /// PyTorch's initialisation (uniform ±1/√in), from `seed`.
    pub fn new(ctx: &Context, in_features: usize, out_features: usize, seed: u64) -> Result<Self> {
        let weight = uniform_init(ctx, &[out_features, in_features], in_features, seed)?;
        let bias = uniform_init(ctx, &[out_features], in_features, seed ^ 0x9e37_79b9)?;
        Ok(Linear { weights: WeightBias::new(weight, Some(bias)), input: None, training: true })
    }
    /// Without a bias term.
    pub fn without_bias(mut self) -> Self {
        self.weights.bias = None;
        self
    }
    pub fn weight(&self) -> &Param {
        &self.weights.weight
    }
    pub fn bias(&self) -> Option<&Param> {
        self.weights.bias.as_ref()
    }
    fn sizes(&self) -> (usize, usize) {
        let s = self.weights.weight.value().shape();
        (s[1], s[0])
    }
}

impl Layer for Linear {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let (inputs, _) = self.sizes();
        if x.rank() != 2 || x.shape()[1] != inputs {
            return Err(layer_error(self, x.shape(), format!("expects [batch, {inputs}]")));
        }
        let y = linear(x, self.weights.weight.value(), self.weights.bias_value(), Activation::None)
            .in_layer(self)?;
        self.input = self.training.then(|| x.clone());
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let x = saved(self.input.take(), self, dy)?;
        let grads = (|| {
            let dw = Gemm::new(dy, &x).transpose_a(true).run()?;
            let db = match self.weights.bias {
                Some(_) => Some(dy.context().full(&[1, dy.shape()[0]], 1.0)?.matmul(dy)?),
                None => None,
            };
            Ok((dy.matmul(self.weights.weight.value())?, dw, db))
        })();
        let (dx, dw, db) = grads.in_layer(self)?;
        self.weights.set_grads(dw, db)?;
        Ok(dx)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        self.weights.params_mut()
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.input = None;
    }
    fn describe(&self) -> String {
        let (i, o) = self.sizes();
        format!("Linear({i} → {o}{})", if self.weights.bias.is_some() { "" } else { ", no bias" })
    }
}
