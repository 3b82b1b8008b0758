//! Elementwise ops: add, sub, mul, div (tensor-tensor and tensor-scalar), relu, sigmoid, tanh,
//! gelu (tanh form), fill and dtype conversion, for f32, f16 and bf16 (16-bit tensors compute in
//! f32 and round once). Kernels: `gpu-kernels/src/elementwise/`.
//!
//! Shapes must match exactly (no broadcasting yet; the `_scalar` forms cover the common case).
use super::CPU_CHUNK;
use crate::kernels;
use crate::runtime::context::{Backend, Context};
use crate::runtime::error::Result;
use crate::runtime::kernel::{ByDType, DevPtr, DevPtrMut};
use crate::runtime::launch::LaunchConfig;
use crate::shapes::{ELEMENTWISE_BLOCK, ELEMENTWISE_UNROLL};
use crate::tensor::{element_count, DType, Storage, Tensor};
use rayon::prelude::*;

/// One thread per `ELEMENTWISE_UNROLL` vectors of 16 bytes: measured faster on the H100 than
/// grids capped at 1-16 device occupancies (docs/perf-notes.md).
fn config(n: usize, dtype: DType) -> LaunchConfig {
    let per_vector = 16 / dtype.size_bytes();
    LaunchConfig::covering(n.div_ceil(per_vector * ELEMENTWISE_UNROLL), ELEMENTWISE_BLOCK)
}

type Binary<E> = (DevPtr<E>, DevPtr<E>, DevPtrMut<E>, usize);
type Scalar<E> = (DevPtr<E>, f32, DevPtrMut<E>, usize);
type Unary<E> = (DevPtr<E>, DevPtrMut<E>, usize);
type BinaryKernels = ByDType<Binary<f32>, Binary<u16>>;
type ScalarKernels = ByDType<Scalar<f32>, Scalar<u16>>;

#[derive(Clone, Copy, Debug)]
enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// Activation gradients: (saved forward tensor, dy) -> dx; kernels in `gpu-kernels/src/nn/`.
    ReluGrad,
    SigmoidGrad,
    TanhGrad,
    GeluGrad,
}

impl BinaryOp {
    /// The tensor-tensor op's name and kernels.
    fn tensor_kernels(self) -> (&'static str, BinaryKernels) {
        match self {
            BinaryOp::Add => ("add", by_dtype!(add_f32, add_f16, add_bf16)),
            BinaryOp::Sub => ("sub", by_dtype!(sub_f32, sub_f16, sub_bf16)),
            BinaryOp::Mul => ("mul", by_dtype!(mul_f32, mul_f16, mul_bf16)),
            BinaryOp::Div => ("div", by_dtype!(div_f32, div_f16, div_bf16)),
            BinaryOp::ReluGrad => ("relu_backward", by_dtype!(relu_bwd_f32, relu_bwd_f16, relu_bwd_bf16)),
            BinaryOp::SigmoidGrad => {
                ("sigmoid_backward", by_dtype!(sigmoid_bwd_f32, sigmoid_bwd_f16, sigmoid_bwd_bf16))
            }
            BinaryOp::TanhGrad => ("tanh_backward", by_dtype!(tanh_bwd_f32, tanh_bwd_f16, tanh_bwd_bf16)),
            BinaryOp::GeluGrad => ("gelu_backward", by_dtype!(gelu_bwd_f32, gelu_bwd_f16, gelu_bwd_bf16)),
        }
    }

    /// The tensor-scalar op's name and kernels (the arithmetic ops only).
    fn scalar_kernels(self) -> (&'static str, ScalarKernels) {
        match self {
            BinaryOp::Add => ("add_scalar", by_dtype!(add_scalar_f32, add_scalar_f16, add_scalar_bf16)),
            BinaryOp::Sub => ("sub_scalar", by_dtype!(sub_scalar_f32, sub_scalar_f16, sub_scalar_bf16)),
            BinaryOp::Mul => ("mul_scalar", by_dtype!(mul_scalar_f32, mul_scalar_f16, mul_scalar_bf16)),
            BinaryOp::Div => ("div_scalar", by_dtype!(div_scalar_f32, div_scalar_f16, div_scalar_bf16)),
            _ => unreachable!("{self:?} has no tensor-scalar form"),
        }
    }

    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::ReluGrad => {
                if a > 0.0 {
                    b
                } else {
                    0.0
                }
            }
            BinaryOp::SigmoidGrad => b * a * (1.0 - a),
            BinaryOp::TanhGrad => b * (1.0 - a * a),
            BinaryOp::GeluGrad => {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                let t = (k * (a + 0.044_715 * a * a * a)).tanh();
                b * (0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044_715 * a * a))
            }
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
    fn kernels(self) -> (&'static str, ByDType<Unary<f32>, Unary<u16>>) {
        match self {
            UnaryOp::Relu => ("relu", by_dtype!(relu_f32, relu_f16, relu_bf16)),
            UnaryOp::Sigmoid => ("sigmoid", by_dtype!(sigmoid_f32, sigmoid_f16, sigmoid_bf16)),
            UnaryOp::Tanh => ("tanh", by_dtype!(tanh_f32, tanh_f16, tanh_bf16)),
            UnaryOp::Gelu => ("gelu", by_dtype!(gelu_f32, gelu_f16, gelu_bf16)),
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

/// The CPU twin of a unary map: f64, rounded once to `dtype`.
fn cpu_map(x: &[f32], dtype: DType, f: impl Fn(f64) -> f64 + Sync) -> Vec<f32> {
    x.par_iter().with_min_len(CPU_CHUNK).map(|&v| dtype.round(f(v as f64))).collect()
}

fn binary(a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Tensor> {
    let (name, kernels) = op.tensor_kernels();
    a.check_pair(name, b)?;
    let dtype = a.dtype();
    match (a.storage(), b.storage()) {
        (Storage::Cpu(x), Storage::Cpu(y)) => {
            let out = x
                .par_iter()
                .zip(y)
                .with_min_len(CPU_CHUNK)
                .map(|(&p, &q)| dtype.round(op.apply(p as f64, q as f64)));
            Ok(Tensor::from_cpu_as(a.context(), a.shape(), dtype, out.collect()))
        }
        _ => {
            let out = Tensor::uninit_as(a.context(), a.shape(), dtype, name)?;
            let n = a.len();
            if n > 0 {
                let stream = a.context().stream(name)?;
                // SAFETY: `<op>_<dtype>(a, b, out, n)`: three live buffers of `n` elements of the
                // kernel's dtype from the pool (16-byte aligned), `out` distinct from the inputs;
                // any grid is valid.
                launch_by_dtype!(kernels, dtype, |k| unsafe {
                    k.launch(stream, config(n, dtype), (a.ptr(), b.ptr(), out.ptr_mut(), n))
                })?;
            }
            Ok(out)
        }
    }
}

fn binary_scalar(a: &Tensor, s: f32, op: BinaryOp) -> Result<Tensor> {
    let (name, kernels) = op.scalar_kernels();
    let dtype = a.dtype();
    match a.storage() {
        Storage::Cpu(x) => Ok(Tensor::from_cpu_as(
            a.context(),
            a.shape(),
            dtype,
            cpu_map(x, dtype, |v| op.apply(v, s as f64)),
        )),
        Storage::Cuda(_) => {
            let out = Tensor::uninit_as(a.context(), a.shape(), dtype, name)?;
            let n = a.len();
            if n > 0 {
                let stream = a.context().stream(name)?;
                // SAFETY: `<op>_scalar_<dtype>(a, s, out, n)`: two live, distinct buffers of `n`
                // elements of the kernel's dtype (16-byte aligned), `s` an f32; any grid is valid.
                launch_by_dtype!(kernels, dtype, |k| unsafe {
                    k.launch(stream, config(n, dtype), (a.ptr(), s, out.ptr_mut(), n))
                })?;
            }
            Ok(out)
        }
    }
}

fn unary(x: &Tensor, op: UnaryOp) -> Result<Tensor> {
    let (name, kernels) = op.kernels();
    let dtype = x.dtype();
    match x.storage() {
        Storage::Cpu(v) => {
            Ok(Tensor::from_cpu_as(x.context(), x.shape(), dtype, cpu_map(v, dtype, |e| op.apply(e))))
        }
        Storage::Cuda(_) => {
            let out = Tensor::uninit_as(x.context(), x.shape(), dtype, name)?;
            let n = x.len();
            if n > 0 {
                let stream = x.context().stream(name)?;
                // SAFETY: `<op>_<dtype>(x, out, n)`: two live, distinct buffers of `n` elements of
                // the kernel's dtype (16-byte aligned); any grid is valid.
                launch_by_dtype!(kernels, dtype, |k| unsafe {
                    k.launch(stream, config(n, dtype), (x.ptr(), out.ptr_mut(), n))
                })?;
            }
            Ok(out)
        }
    }
}

/// A tensor of `shape` and `dtype` with every element `value` (`Context::full`, `full_as`).
pub(crate) fn fill(ctx: &Context, shape: &[usize], value: f32, dtype: DType) -> Result<Tensor> {
    match &ctx.backend {
        Backend::Cpu => Ok(Tensor::from_cpu_as(
            ctx,
            shape,
            dtype,
            vec![dtype.round(value as f64); element_count("full", shape)?],
        )),
        Backend::Cuda(stream) => {
            let out = Tensor::uninit_as(ctx, shape, dtype, "full")?;
            let n = out.len();
            if n > 0 {
                let cfg = config(n, dtype);
                if dtype == DType::F32 {
                    // SAFETY: `fill_f32(out, value, n)`: a live buffer of `n` floats (16-byte
                    // aligned); any grid is valid.
                    unsafe { kernels::fill_f32.launch(stream, cfg, (out.ptr_mut(), value, n))? };
                } else {
                    let bits = dtype.bits16(value) as u32;
                    // SAFETY: `fill_u16(out, bits, n)`: a live buffer of `n` 16-bit elements
                    // (16-byte aligned); any grid is valid.
                    unsafe { kernels::fill_u16.launch(stream, cfg, (out.ptr_mut(), bits, n))? };
                }
            }
            Ok(out)
        }
    }
}

impl Tensor {
    /// This tensor in `dtype`: itself where it already has that dtype, else [`Tensor::to_dtype`].
    pub fn into_dtype(self, dtype: DType) -> Result<Tensor> {
        if self.dtype() == dtype {
            Ok(self)
        } else {
            self.to_dtype(dtype)
        }
    }

    /// This tensor converted to `dtype`, rounding to nearest even (a copy even when the dtype is
    /// the same).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        const OP: &str = "to_dtype";
        let from = self.dtype();
        if from == dtype {
            return self.copy();
        }
        match self.storage() {
            Storage::Cpu(v) => {
                Ok(Tensor::from_cpu_as(self.context(), self.shape(), dtype, cpu_map(v, dtype, |x| x)))
            }
            Storage::Cuda(_) => {
                let out = Tensor::uninit_as(self.context(), self.shape(), dtype, OP)?;
                let n = self.len();
                if n > 0 {
                    let stream = self.context().stream(OP)?;
                    let cfg = LaunchConfig::covering(n, ELEMENTWISE_BLOCK);
                    // The conversion kernel for each (from, to) pair, launched with the same
                    // arguments (each infers its own pointer types).
                    macro_rules! convert {
                        ($($from:ident => $to:ident: $kernel:ident,)*) => {
                            match (from, dtype) {
                                $((DType::$from, DType::$to) => {
                                    kernels::$kernel.launch(stream, cfg, (self.ptr(), out.ptr_mut(), n))
                                })*
                                _ => unreachable!("same dtype returned a copy above"),
                            }
                        };
                    }
                    // SAFETY: `convert_<from>_<to>(x, out, n)`: `x` holds `n` elements of `from`,
                    // `out` `n` of `to`, distinct; any grid is valid.
                    unsafe {
                        convert! {
                            F32 => F16: convert_f32_f16,
                            F32 => BF16: convert_f32_bf16,
                            F16 => F32: convert_f16_f32,
                            BF16 => F32: convert_bf16_f32,
                            F16 => BF16: convert_f16_bf16,
                            BF16 => F16: convert_bf16_f16,
                        }?
                    };
                }
                Ok(out)
            }
        }
    }
}

impl Tensor {
    /// The low parts of this f32 CUDA tensor's values for a 3xTF32 product (`tf32_low_f32`):
    /// what the tensor cores drop of each value when they read it, rounded to TF32. The tensor
    /// itself is the high part.
    pub(crate) fn tf32_low(&self, op: &'static str) -> Result<Tensor> {
        let out = Tensor::uninit(self.context(), self.shape(), op)?;
        let n = self.len();
        if n > 0 {
            let stream = self.context().stream(op)?;
            // SAFETY: `tf32_low_f32(x, out, n)`: this tensor and the fresh `out` hold `n` f32
            // each, distinct, 16-byte aligned (pool blocks; the caller checked this tensor's
            // first element); any grid is valid.
            unsafe {
                kernels::tf32_low_f32.launch(stream, config(n, DType::F32), (self.ptr(), out.ptr_mut(), n))
            }?;
        }
        Ok(out)
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
    /// Gradient of relu: `self` is the forward input x, `dy` the gradient w.r.t. its output.
    relu_backward => binary(dy: &Tensor) with BinaryOp::ReluGrad;
    /// Gradient of sigmoid: `self` is the forward output y.
    sigmoid_backward => binary(dy: &Tensor) with BinaryOp::SigmoidGrad;
    /// Gradient of tanh: `self` is the forward output y.
    tanh_backward => binary(dy: &Tensor) with BinaryOp::TanhGrad;
    /// Gradient of gelu (tanh form): `self` is the forward input x.
    gelu_backward => binary(dy: &Tensor) with BinaryOp::GeluGrad;
    /// `max(x, 0)`; NaN stays NaN.
    relu => unary() with UnaryOp::Relu;
    /// `1 / (1 + e^-x)`.
    sigmoid => unary() with UnaryOp::Sigmoid;
    /// Hyperbolic tangent.
    tanh => unary() with UnaryOp::Tanh;
    /// GELU, tanh approximation (PyTorch's `approximate="tanh"`).
    gelu => unary() with UnaryOp::Gelu;
}
