//! [`Linear`]: `y = x·Wᵀ + b` on the fused GEMM.
use super::{layer_error, saved, uniform_init, InLayer, Layer, Param};
use crate::ops::matmul::{linear, Activation, Gemm};
use crate::runtime::error::Result;
use crate::tensor::Tensor;
use crate::Context;

/// Fully connected layer: input `[batch, in]`, weight `[out, in]`, bias `[out]`.
pub struct Linear {
    weight: Param,
    bias: Option<Param>,
    input: Option<Tensor>,
    training: bool,
}

impl Linear {
    /// PyTorch's initialisation (uniform ±1/√in), from `seed`.
    pub fn new(ctx: &Context, in_features: usize, out_features: usize, seed: u64) -> Result<Self> {
        let weight = uniform_init(ctx, &[out_features, in_features], in_features, seed)?;
        let bias = uniform_init(ctx, &[out_features], in_features, seed ^ 0x9e37_79b9)?;
        Ok(Linear { weight: Param::new(weight), bias: Some(Param::new(bias)), input: None, training: true })
    }
    /// Without a bias term.
    pub fn without_bias(mut self) -> Self {
        self.bias = None;
        self
    }
    pub fn weight(&self) -> &Param {
        &self.weight
    }
    pub fn bias(&self) -> Option<&Param> {
        self.bias.as_ref()
    }
    fn sizes(&self) -> (usize, usize) {
        let s = self.weight.value().shape();
        (s[1], s[0])
    }
}

impl Layer for Linear {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let (inputs, _) = self.sizes();
        if x.rank() != 2 || x.shape()[1] != inputs {
            return Err(layer_error(self, x.shape(), format!("expects [batch, {inputs}]")));
        }
        let y = linear(x, self.weight.value(), self.bias.as_ref().map(Param::value), Activation::None)
            .in_layer(self)?;
        self.input = self.training.then(|| x.clone());
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let x = saved(self.input.take(), self, dy)?;
        let grads = (|| {
            let dw = Gemm::new(dy, &x).transpose_a(true).run()?;
            let db = match self.bias {
                Some(_) => Some(dy.context().full(&[1, dy.shape()[0]], 1.0)?.matmul(dy)?),
                None => None,
            };
            Ok((dy.matmul(self.weight.value())?, dw, db))
        })();
        let (dx, dw, db) = grads.in_layer(self)?;
        self.weight.set_grad(dw);
        if let (Some(b), Some(db)) = (self.bias.as_mut(), db) {
            let shape = b.value().shape().to_vec();
            b.set_grad(db.reshape(&shape)?);
        }
        Ok(dx)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        let mut p = vec![&mut self.weight];
        p.extend(self.bias.as_mut());
        p
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.input = None;
    }
    fn describe(&self) -> String {
        let (i, o) = self.sizes();
        format!("Linear({i} → {o}{})", if self.bias.is_some() { "" } else { ", no bias" })
    }
}
