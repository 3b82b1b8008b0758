//! Pooling layers [`MaxPool2d`] and [`AvgPool2d`] over NCHW, and [`Flatten`] to go from them to
//! [`Linear`](super::Linear).
use super::{saved, InLayer, Layer};
use crate::ops::pool::{
    avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward, MaxPoolSaved, Pool2dParams,
};
use crate::runtime::error::Result;
use crate::tensor::Tensor;

/// Max pooling; keeps the argmax of each window for backward.
pub struct MaxPool2d {
    params: Pool2dParams,
    kept: Option<MaxPoolSaved>,
    training: bool,
}

impl MaxPool2d {
    /// A square window of `kernel`, stride `kernel`, no padding.
    pub fn new(kernel: usize) -> Self {
        MaxPool2d { params: Pool2dParams::new(kernel), kept: None, training: true }
    }
}

params_builders!(MaxPool2d: stride, padding);

impl Layer for MaxPool2d {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let (y, argmax) = max_pool2d(x, self.params).in_layer(self)?;
        self.kept = self.training.then_some(argmax);
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let argmax = saved(self.kept.take(), self, dy)?;
        max_pool2d_backward(dy, &argmax).in_layer(self)
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
    }
    fn describe(&self) -> String {
        let p = self.params;
        format!("MaxPool2d({:?}, stride {:?}, padding {:?})", p.kernel, p.stride, p.padding)
    }
}

/// Average pooling (padding counted in the divisor, as PyTorch's default).
pub struct AvgPool2d {
    params: Pool2dParams,
    input_shape: Option<Vec<usize>>,
    training: bool,
}

impl AvgPool2d {
    /// A square window of `kernel`, stride `kernel`, no padding.
    pub fn new(kernel: usize) -> Self {
        AvgPool2d { params: Pool2dParams::new(kernel), input_shape: None, training: true }
    }
}

params_builders!(AvgPool2d: stride, padding);

impl Layer for AvgPool2d {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let y = avg_pool2d(x, self.params).in_layer(self)?;
        self.input_shape = self.training.then(|| x.shape().to_vec());
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let shape = saved(self.input_shape.take(), self, dy)?;
        avg_pool2d_backward(dy, &shape, self.params).in_layer(self)
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.input_shape = None;
    }
    fn describe(&self) -> String {
        let p = self.params;
        format!("AvgPool2d({:?}, stride {:?}, padding {:?})", p.kernel, p.stride, p.padding)
    }
}

/// `[N, d1, d2, ...]` → `[N, d1·d2·…]` (a view; no copy).
#[derive(Default)]
pub struct Flatten {
    input_shape: Option<Vec<usize>>,
}

impl Flatten {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Layer for Flatten {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let batch = x.shape().first().copied().unwrap_or(1);
        let rest = x.shape().iter().skip(1).product();
        let y = x.reshape(&[batch, rest]).in_layer(self)?;
        self.input_shape = Some(x.shape().to_vec());
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let shape = saved(self.input_shape.take(), self, dy)?;
        dy.reshape(&shape).in_layer(self)
    }
    fn describe(&self) -> String {
        "Flatten".into()
    }
}
