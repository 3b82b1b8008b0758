//! Activation layers: [`Relu`], [`Sigmoid`], [`Tanh`], [`Gelu`] (tanh form).
use super::{saved, InLayer, Layer};
use crate::runtime::error::Result;
use crate::tensor::Tensor;

/// An activation layer: `$forward` elementwise; `$backward` called on the saved input (`x`) or
/// output (`y`), whichever its gradient formula needs.
macro_rules! activation_layer {
    ($(#[$doc:meta])* $name:ident: $forward:ident, $backward:ident from $keep:ident) => {
        $(#[$doc])*
        #[derive(Default)]
        pub struct $name {
            kept: Option<Tensor>,
            eval: bool,
        }

        impl $name {
            pub fn new() -> Self {
                Self::default()
            }
        }

        impl Layer for $name {
            fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
                let y = x.$forward().in_layer(self)?;
                if !self.eval {
                    self.kept = Some(activation_layer!(@keep $keep, x, y));
                }
                Ok(y)
            }
            fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
                let kept = saved(self.kept.take(), self, dy)?;
                kept.$backward(dy).in_layer(self)
            }
            fn set_training(&mut self, training: bool) {
                self.eval = !training;
                self.kept = None;
            }
            fn describe(&self) -> String {
                stringify!($name).into()
            }
        }
    };
    (@keep input, $x:ident, $y:ident) => { $x.clone() };
    (@keep output, $x:ident, $y:ident) => { $y.clone() };
}

activation_layer!(
    /// `max(x, 0)`.
    Relu: relu, relu_backward from input
);
activation_layer!(
    /// `1 / (1 + e^-x)`.
    Sigmoid: sigmoid, sigmoid_backward from output
);
activation_layer!(
    /// Hyperbolic tangent.
    Tanh: tanh, tanh_backward from output
);
activation_layer!(
    /// GELU, tanh approximation.
    Gelu: gelu, gelu_backward from input
);
