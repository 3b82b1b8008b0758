//! Layers: modules that own their parameters and know their backward pass, and [`Sequential`].
//!
//! `forward` in training mode keeps what `backward` needs (the input, saved statistics, the
//! dropout seed); `backward` takes the gradient of the loss w.r.t. the output of the last forward,
//! stores the gradients of the layer's parameters (replacing the previous step's, like
//! `zero_grad` + `backward` in PyTorch) and returns the gradient w.r.t. the input. In eval mode
//! nothing is kept, batch norm uses its running statistics and dropout passes its input through.
//! Every error a layer returns is an [`Error::Layer`] that names the layer and its sizes.
/// Builder methods (`stride`, `padding`, ...) of a layer that forward to its `params` field's.
macro_rules! params_builders {
    ($layer:ty: $($name:ident),*) => {
        impl $layer {$(
            #[doc = concat!("Set the ", stringify!($name), " (both spatial axes).")]
            pub fn $name(mut self, $name: usize) -> Self {
                self.params = self.params.$name($name);
                self
            }
        )*}
    };
}

mod activation;
mod attention;
mod conv;
mod dropout;
mod embedding;
mod linear;
mod norm;
mod pool;
mod sequential;
mod transformer;

pub use activation::{Gelu, Relu, Sigmoid, Tanh};
pub use attention::MultiHeadAttention;
pub use conv::Conv2d;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use linear::Linear;
pub use norm::{BatchNorm2d, LayerNorm};
pub use pool::{AvgPool2d, Flatten, MaxPool2d};
pub use sequential::Sequential;
pub use transformer::TransformerBlock;

use crate::runtime::error::{Error, Result};
use crate::tensor::{DType, Tensor};
use crate::Context;

/// A trainable tensor and the gradient the last backward pass gave it.
#[derive(Debug, Clone)]
pub struct Param {
    value: Tensor,
    grad: Option<Tensor>,
}

impl Param {
    pub fn new(value: Tensor) -> Self {
        Param { value, grad: None }
    }
    pub fn value(&self) -> &Tensor {
        &self.value
    }
    /// The gradient from the last backward pass, if there was one.
    pub fn grad(&self) -> Option<&Tensor> {
        self.grad.as_ref()
    }
    /// Replace the value (keeps its shape; for loading weights).
    pub fn set_value(&mut self, value: Tensor) -> Result<()> {
        self.value.check_pair("Param::set_value", &value)?;
        self.value = value;
        Ok(())
    }
    /// Replace the value by the same values in `dtype` (dropping the gradient): a layer built in
    /// f32 becomes a 16-bit one.
    pub(crate) fn convert(&mut self, dtype: DType) -> Result<()> {
        self.value = self.value.to_dtype(dtype)?;
        self.grad = None;
        Ok(())
    }
    pub(crate) fn set_grad(&mut self, grad: Tensor) {
        self.grad = Some(grad);
    }
    pub(crate) fn parts(&mut self) -> (&mut Tensor, Option<&Tensor>) {
        (&mut self.value, self.grad.as_ref())
    }
}

/// A network layer.
pub trait Layer: Send {
    /// The output for `x`; in training mode also keeps what [`backward`](Layer::backward) needs.
    fn forward(&mut self, x: &Tensor) -> Result<Tensor>;
    /// From dL/d(output) of the last training-mode forward: store the parameters' gradients and
    /// return dL/d(input).
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor>;
    /// [`backward`](Layer::backward) where dL/d(input) is not wanted (the layer reads the
    /// network's input, as PyTorch's first layer does with an input that needs no gradient): only
    /// the parameters' gradients are stored, the same values. Layers whose input gradient is work
    /// of its own (a matrix product, a convolution) skip that work.
    fn backward_params(&mut self, dy: &Tensor) -> Result<()> {
        self.backward(dy).map(drop)
    }
    /// The trainable parameters, in a fixed order.
    fn params_mut(&mut self) -> Vec<&mut Param> {
        Vec::new()
    }
    /// Training (`true`, the default) or evaluation mode.
    fn set_training(&mut self, _training: bool) {}
    /// The layer's type and sizes, e.g. `Linear(64 → 128)`.
    fn describe(&self) -> String;
    /// The layer with its parameters converted to `dtype` (a 16-bit layer takes and gives 16-bit
    /// tensors).
    fn to_dtype(mut self, dtype: DType) -> Result<Self>
    where
        Self: Sized,
    {
        self.params_mut().into_iter().try_for_each(|p| p.convert(dtype))?;
        Ok(self)
    }
}

/// Errors of the ops inside a layer, named after the layer.
pub(crate) trait InLayer<T> {
    fn in_layer(self, layer: &dyn Layer) -> Result<T>;
    /// The same for a layer that is not a [`Layer`] (it takes token ids, say): `describe` names it.
    fn in_described(self, describe: impl FnOnce() -> String) -> Result<T>;
}

impl<T> InLayer<T> for Result<T> {
    fn in_layer(self, layer: &dyn Layer) -> Result<T> {
        self.in_described(|| layer.describe())
    }
    /// An error of a layer inside this one keeps its source and gets the path of layers
    /// (`TransformerBlock(..) › LayerNorm(384)`).
    fn in_described(self, describe: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| match e {
            Error::Layer { layer, source } => {
                Error::Layer { layer: format!("{} › {layer}", describe()), source }
            }
            e => Error::Layer { layer: describe(), source: Box::new(e) },
        })
    }
}

/// Each parameter's value and gradient, for an optimizer step; `missing(label, shape)` is the
/// error for the first parameter without a gradient.
pub(crate) fn values_and_grads<'a, L>(
    params: impl IntoIterator<Item = (L, &'a mut Param)>,
    missing: impl Fn(L, Vec<usize>) -> Error,
) -> Result<(Vec<&'a mut Tensor>, Vec<&'a Tensor>)> {
    let mut values = Vec::new();
    let mut grads = Vec::new();
    for (label, param) in params {
        let shape = param.value().shape().to_vec();
        let (value, grad) = param.parts();
        values.push(value);
        grads.push(grad.ok_or_else(|| missing(label, shape))?);
    }
    Ok((values, grads))
}

/// An argument error of `layer` itself (not of an op inside it).
pub(crate) fn layer_error(layer: &dyn Layer, shape: &[usize], reason: impl Into<String>) -> Error {
    described_error(layer.describe(), shape, reason)
}

/// An argument error of the layer that `describe` names.
pub(crate) fn described_error(describe: String, shape: &[usize], reason: impl Into<String>) -> Error {
    Error::Layer {
        layer: describe,
        source: Box::new(Error::InvalidArgument {
            op: "forward",
            shape: shape.to_vec(),
            reason: reason.into(),
        }),
    }
}

/// What a training-mode forward saved, taken by the backward pass.
pub(crate) fn saved<T>(kept: Option<T>, layer: &dyn Layer, dy: &Tensor) -> Result<T> {
    kept.ok_or_else(|| Error::Layer {
        layer: layer.describe(),
        source: Box::new(Error::InvalidArgument {
            op: "backward",
            shape: dy.shape().to_vec(),
            reason: "no saved forward pass (call forward in training mode before each backward)".into(),
        }),
    })
}

/// A layer's weight (or scale) and optional bias (or shift), with their gradients.
pub(crate) struct WeightBias {
    pub weight: Param,
    pub bias: Option<Param>,
}

impl WeightBias {
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        WeightBias { weight: Param::new(weight), bias: bias.map(Param::new) }
    }
    /// A normalisation's affine transform over `features`: scale 1, shift 0.
    pub fn affine(ctx: &Context, features: usize) -> Result<Self> {
        Ok(Self::new(ctx.full(&[features], 1.0)?, Some(ctx.zeros(&[features])?)))
    }
    /// Scale and shift of an [`affine`](Self::affine) transform.
    pub fn scale_shift(&self) -> (&Tensor, &Tensor) {
        (self.weight.value(), self.bias_value().expect("an affine transform always has a shift"))
    }
    /// The bias's value, if there is one (for the forward op).
    pub fn bias_value(&self) -> Option<&Tensor> {
        self.bias.as_ref().map(Param::value)
    }
    /// Store the gradients of a backward pass; `db` is reshaped to the bias's shape.
    pub fn set_grads(&mut self, dw: Tensor, db: Option<Tensor>) -> Result<()> {
        self.weight.set_grad(dw);
        if let (Some(b), Some(db)) = (self.bias.as_mut(), db) {
            let shape = b.value().shape().to_vec();
            b.set_grad(db.reshape(&shape)?);
        }
        Ok(())
    }
    /// GPT-2's initialisation: weight from `N(0, std)`, bias zero, in the weight's dtype.
    pub fn normal_init(&mut self, std: f32, seed: u64) -> Result<()> {
        let w = self.weight.value();
        let (ctx, shape, dtype) = (w.context().clone(), w.shape().to_vec(), w.dtype());
        self.weight.set_value(normal_init(&ctx, &shape, std, seed, dtype)?)?;
        if let Some(b) = self.bias.as_mut() {
            let v = b.value();
            b.set_value(ctx.full_as(v.shape(), 0.0, v.dtype())?)?;
        }
        Ok(())
    }
    pub fn params_mut(&mut self) -> Vec<&mut Param> {
        let mut p = vec![&mut self.weight];
        p.extend(self.bias.as_mut());
        p
    }
}

/// GPT-2's initialisation: normal with mean 0 and deviation `std`, in `dtype`.
pub(crate) fn normal_init(
    ctx: &Context,
    shape: &[usize],
    std: f32,
    seed: u64,
    dtype: DType,
) -> Result<Tensor> {
    ctx.randn(shape, seed)?.mul_scalar(std)?.to_dtype(dtype)
}

/// The gradient of a bias added to every row of `dy` `[rows, features]`: its column sums.
pub(crate) fn bias_grad(dy: &Tensor) -> Result<Tensor> {
    dy.sum_leading()
}

/// PyTorch's default initialisation of weights and biases: uniform in ±1/√fan_in.
pub(crate) fn uniform_init(ctx: &Context, shape: &[usize], fan_in: usize, seed: u64) -> Result<Tensor> {
    let bound = 1.0 / (fan_in.max(1) as f32).sqrt();
    ctx.rand(shape, seed)?.mul_scalar(2.0 * bound)?.sub_scalar(bound)
}
