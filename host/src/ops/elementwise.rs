//! Elementwise ops: add, sub, mul, div (tensor-tensor and tensor-scalar), relu, sigmoid, tanh,
//! gelu (tanh form), and fill. Kernels: `gpu-kernels/src/elementwise/`.
//!
//! Shapes must match exactly (no broadcasting yet; the `_scalar` forms cover the common case).
use super::CPU_CHUNK;
use crate::runtime::context::{Backend, Context};
use crate::runtime::error::Result;
use crate::runtime::launch::{kernel_args, launch, LaunchConfig};
use crate::shapes::{ELEMENTWISE_BLOCK, ELEMENTWISE_UNROLL};
use crate::tensor::{element_count, Storage, Tensor};
use rayon::prelude::*;

/// One thread per `ELEMENTWISE_UNROLL` vectors: measured faster on the H100 than grids capped
/// at 1-16 device occupancies (docs/perf-notes.md).
fn config(n: usize) -> LaunchConfig {
    LaunchConfig::covering(n.div_ceil(4 * ELEMENTWISE_UNROLL), ELEMENTWISE_BLOCK)
}

#[derive(Clone, Copy, Debug)]
enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinaryOp {
    fn names(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            BinaryOp::Add => ("add", "add_f32", "add_scalar", "add_scalar_f32"),
            BinaryOp::Sub => ("sub", "sub_f32", "sub_scalar", "sub_scalar_f32"),
            BinaryOp::Mul => ("mul", "mul_f32", "mul_scalar", "mul_scalar_f32"),
            BinaryOp::Div => ("div", "div_f32", "div_scalar", "div_scalar_f32"),
        }
    }

    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum UnaryOp {
    Relu,
    Sigmoid,
    Tanh,
    Gelu,
}

impl UnaryOp {
    fn names(self) -> (&'static str, &'static str) {
        match self {
            UnaryOp::Relu => ("relu", "relu_f32"),
            UnaryOp::Sigmoid => ("sigmoid", "sigmoid_f32"),
            UnaryOp::Tanh => ("tanh", "tanh_f32"),
            UnaryOp::Gelu => ("gelu", "gelu_f32"),
        }
    }

    /// The CPU twin, in f64.
    fn apply(self, x: f64) -> f64 {
        match self {
            UnaryOp::Relu => {
                if x < 0.0 {
                    0.0
                } else {
                    x
                }
            }
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Gelu => {
                let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x * x * x);
                0.5 * x * (1.0 + u.tanh())
            }
        }
    }
}

fn cpu_map(x: &[f32], f: impl Fn(f64) -> f64 + Sync) -> Vec<f32> {
    x.par_iter().with_min_len(CPU_CHUNK).map(|&v| f(v as f64) as f32).collect()
}

fn binary(a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Tensor> {
    let (name, kernel, _, _) = op.names();
    a.check_pair(name, b)?;
    match (a.storage(), b.storage()) {
        (Storage::Cpu(x), Storage::Cpu(y)) => {
            let out = x
                .par_iter()
                .zip(y)
                .with_min_len(CPU_CHUNK)
                .map(|(&p, &q)| op.apply(p as f64, q as f64) as f32);
            Ok(Tensor::from_cpu(a.context(), a.shape(), out.collect()))
        }
        _ => {
            let out = Tensor::uninit(a.context(), a.shape(), name)?;
            let n = a.len();
            if n > 0 {
                let stream = a.context().stream(name)?;
                let (pa, pb, po) = (a.device_ptr(), b.device_ptr(), out.device_ptr());
                // SAFETY: `<op>_f32(a, b, out, n)`: three live buffers of `n` floats from the
                // pool (16-byte aligned), `out` distinct from the inputs; any grid is valid.
                unsafe { launch(stream, kernel, config(n), &mut kernel_args![&pa, &pb, &po, &n])? };
            }
            Ok(out)
        }
    }
}

fn binary_scalar(a: &Tensor, s: f32, op: BinaryOp) -> Result<Tensor> {
    let (_, _, name, kernel) = op.names();
    a.require_f32(name)?;
    match a.storage() {
        Storage::Cpu(x) => {
            Ok(Tensor::from_cpu(a.context(), a.shape(), cpu_map(x, |v| op.apply(v, s as f64))))
        }
        Storage::Cuda(_) => {
            let out = Tensor::uninit(a.context(), a.shape(), name)?;
            let n = a.len();
            if n > 0 {
                let stream = a.context().stream(name)?;
                let (pa, po) = (a.device_ptr(), out.device_ptr());
                // SAFETY: `<op>_scalar_f32(a, s, out, n)`: two live, distinct buffers of `n`
                // floats (16-byte aligned); any grid is valid.
                unsafe { launch(stream, kernel, config(n), &mut kernel_args![&pa, &s, &po, &n])? };
            }
            Ok(out)
        }
    }
}

fn unary(x: &Tensor, op: UnaryOp) -> Result<Tensor> {
    let (name, kernel) = op.names();
    x.require_f32(name)?;
    match x.storage() {
        Storage::Cpu(v) => Ok(Tensor::from_cpu(x.context(), x.shape(), cpu_map(v, |e| op.apply(e)))),
        Storage::Cuda(_) => {
            let out = Tensor::uninit(x.context(), x.shape(), name)?;
            let n = x.len();
            if n > 0 {
                let stream = x.context().stream(name)?;
                let (px, po) = (x.device_ptr(), out.device_ptr());
                // SAFETY: `<op>_f32(x, out, n)`: two live, distinct buffers of `n` floats
                // (16-byte aligned); any grid is valid.
                unsafe { launch(stream, kernel, config(n), &mut kernel_args![&px, &po, &n])? };
            }
            Ok(out)
        }
    }
}

/// A tensor of `shape` with every element `value` (`Context::full`).
pub(crate) fn fill(ctx: &Context, shape: &[usize], value: f32) -> Result<Tensor> {
    match &ctx.backend {
        Backend::Cpu => Ok(Tensor::from_cpu(ctx, shape, vec![value; element_count("full", shape)?])),
        Backend::Cuda(stream) => {
            let out = Tensor::uninit(ctx, shape, "full")?;
            let n = out.len();
            if n > 0 {
                let po = out.device_ptr();
                // SAFETY: `fill_f32(out, value, n)`: a live buffer of `n` floats (16-byte
                // aligned); any grid is valid.
                unsafe { launch(stream, "fill_f32", config(n), &mut kernel_args![&po, &value, &n])? };
            }
            Ok(out)
        }
    }
}

macro_rules! tensor_ops {
    ($($(#[$doc:meta])* $method:ident => $f:ident($($arg:ident: $ty:ty),*) with $op:expr;)*) => {
        impl Tensor {$(
            $(#[$doc])*
            pub fn $method(&self $(, $arg: $ty)*) -> Result<Tensor> {
                $f(self $(, $arg)*, $op)
            }
        )*}
    };
}

tensor_ops! {
    /// `self + other`, elementwise; shapes must match.
    add => binary(other: &Tensor) with BinaryOp::Add;
    /// `self - other`, elementwise; shapes must match.
    sub => binary(other: &Tensor) with BinaryOp::Sub;
    /// `self * other`, elementwise; shapes must match.
    mul => binary(other: &Tensor) with BinaryOp::Mul;
    /// `self / other`, elementwise; shapes must match.
    div => binary(other: &Tensor) with BinaryOp::Div;
    /// `self + s` for every element.
    add_scalar => binary_scalar(s: f32) with BinaryOp::Add;
    /// `self - s` for every element.
    sub_scalar => binary_scalar(s: f32) with BinaryOp::Sub;
    /// `self * s` for every element.
    mul_scalar => binary_scalar(s: f32) with BinaryOp::Mul;
    /// `self / s` for every element.
    div_scalar => binary_scalar(s: f32) with BinaryOp::Div;
    /// `max(x, 0)`; NaN stays NaN.
    relu => unary() with UnaryOp::Relu;
    /// `1 / (1 + e^-x)`.
    sigmoid => unary() with UnaryOp::Sigmoid;
    /// Hyperbolic tangent.
    tanh => unary() with UnaryOp::Tanh;
    /// GELU, tanh approximation (PyTorch's `approximate="tanh"`).
    gelu => unary() with UnaryOp::Gelu;
}
