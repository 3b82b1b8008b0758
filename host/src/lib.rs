//! ferrocuda: CUDA kernels written in Rust, with a safe host runtime and a CPU fallback.
//!
//! ```no_run
//! # fn main() -> ferrocuda::Result<()> {
//! let ctx = ferrocuda::Context::new()?; // CUDA device 0, or the CPU backend (said once)
//! let a = ctx.randn(&[4096, 1024], 7)?;
//! let b = ctx.full(&[4096, 1024], 0.5)?;
//! let y = a.add(&b)?.gelu()?;
//! let s = y.sum()?.to_vec()?;
//! println!("{} -> {s:?}", ctx.device());
//! # Ok(())
//! # }
//! ```
//!
//! Kernels live in `gpu-kernels/` (no_std Rust compiled to PTX by `build.rs`); each op's launcher
//! and its CPU twin live in [`ops`].

// First, so that its macros are in scope in the modules below.
#[macro_use]
mod runtime;

pub mod checkpoint;
pub mod layers;
pub mod models;
pub mod ops;
mod tensor;
pub mod timing;

/// One typed launcher per kernel, from the table the kernel crate checks its kernels against.
#[doc(hidden)]
#[path = "../../gpu-kernels/src/kernels.rs"]
pub mod kernels;

/// The typed launch API the ops use, reachable from outside only so that these compile-fail
/// tests can show that a launch whose arguments differ from the kernel's table entry does not
/// compile.
///
/// The right arguments compile:
/// ```no_run
/// use ferrocuda::typed_launch::{kernels, DevPtr, DevPtrMut, LaunchConfig, Stream};
/// fn add(s: &Stream, cfg: LaunchConfig, a: DevPtr<f32>, b: DevPtr<f32>, out: DevPtrMut<f32>, n: usize) {
///     let _ = unsafe { kernels::add_f32.launch(s, cfg, (a, b, out, n)) };
/// }
/// ```
/// A 16-bit buffer where the kernel reads f32 does not:
/// ```compile_fail,E0308
/// use ferrocuda::typed_launch::{kernels, DevPtr, DevPtrMut, LaunchConfig, Stream};
/// fn add(s: &Stream, cfg: LaunchConfig, a: DevPtr<u16>, b: DevPtr<f32>, out: DevPtrMut<f32>, n: usize) {
///     let _ = unsafe { kernels::add_f32.launch(s, cfg, (a, b, out, n)) };
/// }
/// ```
/// Nor an input where the kernel writes:
/// ```compile_fail,E0308
/// use ferrocuda::typed_launch::{kernels, DevPtr, LaunchConfig, Stream};
/// fn add(s: &Stream, cfg: LaunchConfig, a: DevPtr<f32>, b: DevPtr<f32>, out: DevPtr<f32>, n: usize) {
///     let _ = unsafe { kernels::add_f32.launch(s, cfg, (a, b, out, n)) };
/// }
/// ```
/// Nor a missing argument, or a count where a scalar of another type goes:
/// ```compile_fail,E0308
/// use ferrocuda::typed_launch::{kernels, DevPtr, DevPtrMut, LaunchConfig, Stream};
/// fn add(s: &Stream, cfg: LaunchConfig, a: DevPtr<f32>, b: DevPtr<f32>, out: DevPtrMut<f32>) {
///     let _ = unsafe { kernels::add_f32.launch(s, cfg, (a, b, out)) };
/// }
/// ```
/// ```compile_fail,E0308
/// use ferrocuda::typed_launch::{kernels, DevPtr, DevPtrMut, LaunchConfig, Stream};
/// fn add_scalar(s: &Stream, cfg: LaunchConfig, a: DevPtr<f32>, out: DevPtrMut<f32>, n: usize) {
///     let _ = unsafe { kernels::add_scalar_f32.launch(s, cfg, (a, 0.5f64, out, n)) };
/// }
/// ```
/// (The kernel side of the table is checked by the kernel build, and that a wrong entry fails it
/// by `scripts/check-kernel-signatures.sh`, which CI runs.)
#[doc(hidden)]
pub mod typed_launch {
    pub use crate::kernels;
    pub use crate::runtime::kernel::{DevPtr, DevPtrMut};
    pub use crate::runtime::launch::LaunchConfig;
    pub use crate::runtime::stream::Stream;
}

// Some of these only the kernels use.
#[allow(dead_code)]
#[path = "../../gpu-kernels/src/shapes.rs"]
pub(crate) mod shapes;

pub use half::{bf16, f16};
pub use layers::{Layer, Sequential};
pub use ops::attention::{
    attention, attention_backward, attention_qkv_packed, attention_qkv_packed_backward, AttentionParams,
};
pub use ops::conv::{
    conv2d, conv2d_backward_bias, conv2d_backward_data, conv2d_backward_weight, Conv2dParams,
};
pub use ops::embedding::{embedding, embedding_backward};
pub use ops::layout::DeviceDataset;
pub use ops::matmul::{linear, Activation, Gemm};
pub use ops::nn::{
    batch_norm2d_backward, batch_norm2d_eval, batch_norm2d_train, binary_cross_entropy,
    binary_cross_entropy_with_logits, cross_entropy, cross_entropy_labels, cross_entropy_labels_in_place,
    dropout, dropout_add, dropout_backward, layer_norm, layer_norm_backward, layer_norm_backward_add,
    mse_loss, BatchNormSaved, Labels, LayerNormSaved,
};
pub use ops::optim::{clip_grad_norm, Adam, GradNorm, LrSchedule, Optimizer, Sgd};
pub use ops::pool::{
    avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward, MaxPoolSaved, Pool2dParams,
};
pub use ops::reduce::gelu_backward_bias;
pub use runtime::context::{Context, Device};
pub use runtime::device::{cuda_device_count, cuda_devices, DeviceInfo};
pub use runtime::error::{Error, Result};
pub use runtime::graph::Graph;
pub use runtime::module::{ModuleSource, DISABLE_SM90A_VAR};
pub use runtime::pool::PoolStats;
pub use runtime::profiler::{
    CopyDirection, CopyStats, KernelStats, PoolSummary, ProfileGuard, ProfileReport, ProfiledKind, ProfiledOp,
};
pub use runtime::stream::{Event, PinnedBuffer};
pub use tensor::{DType, Element, Tensor};
