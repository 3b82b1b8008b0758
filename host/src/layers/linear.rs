//! [`Linear`]: `y = x·Wᵀ + b` on the fused GEMM.
use super::{bias_grad, layer_error, saved, uniform_init, InLayer, Layer, Param, WeightBias};
use crate::ops::matmul::{linear, Activation, Gemm};
use crate::ops::reduce::gelu_backward_bias;
use crate::runtime::error::Result;
use crate::tensor::{DType, Tensor};
use crate::Context;

/// Fully connected layer: input `[batch, in]`, weight `[out, in]`, bias `[out]`.
///
/// With an [`activation`](Linear::activation), `y = act(x·Wᵀ + b)`: in evaluation one fused
/// GEMM; in training the GEMM writes the pre-activation, which backward needs, and one
/// elementwise pass applies the activation (cheaper than the fused GEMM plus a second GEMM in
/// backward to recompute it: 33 µs against ~130 µs for a GPT MLP's 16384×1536 bf16 output).
pub struct Linear {
    weights: WeightBias,
    activation: Activation,
    /// The input, and the pre-activation when there is an activation.
    kept: Option<(Tensor, Option<Tensor>)>,
    training: bool,
}

impl Linear {
    /// PyTorch's initialisation (uniform ±1/√in), from `seed`.
    pub fn new(ctx: &Context, in_features: usize, out_features: usize, seed: u64) -> Result<Self> {
        let weight = uniform_init(ctx, &[out_features, in_features], in_features, seed)?;
        let bias = uniform_init(ctx, &[out_features], in_features, seed ^ 0x9e37_79b9)?;
        Ok(Linear {
            weights: WeightBias::new(weight, Some(bias)),
            activation: Activation::None,
            kept: None,
            training: true,
        })
    }
    /// Apply `activation` in the GEMM's epilogue.
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }
    /// Weights from `N(0, std)` and a zero bias, from `seed` (GPT-2's initialisation).
    pub fn normal_init(mut self, std: f32, seed: u64) -> Result<Self> {
        self.weights.normal_init(std, seed)?;
        Ok(self)
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

impl Linear {
    /// Store the parameters' gradients from `dy`; dL/d(input) too when `input_grad`.
    fn gradients(&mut self, dy: &Tensor, input_grad: bool) -> Result<Option<Tensor>> {
        let (x, pre) = saved(self.kept.take(), self, dy)?;
        let grads = (|| {
            let w = self.weights.weight.value();
            let biased = self.weights.bias.is_some();
            let (dpre, db) = match (self.activation, pre) {
                (Activation::Relu, Some(pre)) => (pre.relu_backward(dy)?, None),
                (Activation::Gelu, Some(pre)) if biased => {
                    let (dpre, db) = gelu_backward_bias(&pre, dy)?;
                    (dpre, Some(db))
                }
                (Activation::Gelu, Some(pre)) => (pre.gelu_backward(dy)?, None),
                _ => (dy.clone(), None),
            };
            let dw = Gemm::new(&dpre, &x).transpose_a(true).run()?;
            let db = match db {
                Some(db) => Some(db),
                None => biased.then(|| bias_grad(&dpre)).transpose()?,
            };
            let dx = input_grad.then(|| dpre.matmul(w)).transpose()?;
            Ok((dx, dw, db))
        })();
        let (dx, dw, db) = grads.in_layer(self)?;
        self.weights.set_grads(dw, db)?;
        Ok(dx)
    }
}

impl Layer for Linear {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let (inputs, _) = self.sizes();
        if x.rank() != 2 || x.shape()[1] != inputs {
            return Err(layer_error(self, x.shape(), format!("expects [batch, {inputs}]")));
        }
        let (w, b) = (self.weights.weight.value(), self.weights.bias_value());
        if !self.training || self.activation == Activation::None {
            let y = linear(x, w, b, self.activation).in_layer(self)?;
            self.kept = self.training.then(|| (x.clone(), None));
            return Ok(y);
        }
        let pre = linear(x, w, b, Activation::None).in_layer(self)?;
        let y = match self.activation {
            Activation::Relu => pre.relu(),
            _ => pre.gelu(),
        }
        .in_layer(self)?;
        self.kept = Some((x.clone(), Some(pre)));
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        Ok(self.gradients(dy, true)?.expect("asked for"))
    }
    fn backward_params(&mut self, dy: &Tensor) -> Result<()> {
        self.gradients(dy, false).map(drop)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        self.weights.params_mut()
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
    }
    fn describe(&self) -> String {
        let (i, o) = self.sizes();
        let act = match self.activation {
            Activation::None => "",
            Activation::Relu => ", ReLU",
            Activation::Gelu => ", GELU",
        };
        let bias = if self.weights.bias.is_some() { "" } else { ", no bias" };
        let dtype = match self.weights.weight.value().dtype() {
            DType::F32 => String::new(),
            d => format!(", {d:?}"),
        };
        format!("Linear({i} → {o}{bias}{act}{dtype})")
    }
}
