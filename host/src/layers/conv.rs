//! [`Conv2d`]: 2-D convolution of NCHW tensors (implicit GEMM forward and backward).
use super::{layer_error, saved, uniform_init, InLayer, Layer, Param, WeightBias};
use crate::ops::conv::{
    conv2d, conv2d_backward_bias, conv2d_backward_data, conv2d_backward_weight, Conv2dParams,
};
use crate::runtime::error::Result;
use crate::tensor::Tensor;
use crate::Context;

/// Convolution with weight `[out, in, kh, kw]` and bias `[out]`.
pub struct Conv2d {
    weights: WeightBias,
    params: Conv2dParams,
    input: Option<Tensor>,
    training: bool,
}

impl Conv2d {
    /// A square `kernel`, stride 1, no padding; PyTorch's initialisation from `seed`.
    pub fn new(
        ctx: &Context,
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        seed: u64,
    ) -> Result<Self> {
        let fan_in = in_channels * kernel * kernel;
        let weight = uniform_init(ctx, &[out_channels, in_channels, kernel, kernel], fan_in, seed)?;
        let bias = uniform_init(ctx, &[out_channels], fan_in, seed ^ 0x9e37_79b9)?;
        Ok(Conv2d {
            weights: WeightBias::new(weight, Some(bias)),
            params: Conv2dParams::default(),
            input: None,
            training: true,
        })
    }
    pub fn without_bias(mut self) -> Self {
        self.weights.bias = None;
        self
    }
    pub fn weight(&self) -> &Param {
        &self.weights.weight
    }
}

params_builders!(Conv2d: stride, padding, dilation);

impl Conv2d {
    /// Store the parameters' gradients from `dy`; dL/d(input) too when `input_grad`.
    fn gradients(&mut self, dy: &Tensor, input_grad: bool) -> Result<Option<Tensor>> {
        let x = saved(self.input.take(), self, dy)?;
        let w = self.weights.weight.value();
        let grads = (|| {
            let dx = input_grad.then(|| conv2d_backward_data(dy, w, x.shape(), self.params)).transpose()?;
            let dw = conv2d_backward_weight(&x, dy, w.shape(), self.params)?;
            let db = self.weights.bias.as_ref().map(|_| conv2d_backward_bias(dy)).transpose()?;
            Ok((dx, dw, db))
        })();
        let (dx, dw, db) = grads.in_layer(self)?;
        self.weights.set_grads(dw, db)?;
        Ok(dx)
    }
}

impl Layer for Conv2d {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let channels = self.weights.weight.value().shape()[1];
        if x.rank() != 4 || x.shape()[1] != channels {
            return Err(layer_error(self, x.shape(), format!("expects [N, {channels}, H, W]")));
        }
        let y =
            conv2d(x, self.weights.weight.value(), self.weights.bias_value(), self.params).in_layer(self)?;
        self.input = self.training.then(|| x.clone());
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
        self.input = None;
    }
    fn describe(&self) -> String {
        let s = self.weights.weight.value().shape();
        let p = self.params;
        format!(
            "Conv2d({} → {}, {}×{}, stride {:?}, padding {:?}, dilation {:?})",
            s[1], s[0], s[2], s[3], p.stride, p.padding, p.dilation
        )
    }
}
