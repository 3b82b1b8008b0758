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

pub mod layers;
pub mod ops;
mod runtime;
mod tensor;
pub mod timing;

// Some of these only the kernels use.
#[allow(dead_code)]
#[path = "../../gpu-kernels/src/shapes.rs"]
pub(crate) mod shapes;

pub use half::{bf16, f16};
pub use layers::{Layer, Sequential};
pub use ops::attention::{attention, attention_backward, AttentionParams};
pub use ops::conv::{
    conv2d, conv2d_backward_bias, conv2d_backward_data, conv2d_backward_weight, Conv2dParams,
};
pub use ops::matmul::{linear, Activation, Gemm};
pub use ops::nn::{
    batch_norm2d_backward, batch_norm2d_eval, batch_norm2d_train, binary_cross_entropy,
    binary_cross_entropy_with_logits, cross_entropy, dropout, dropout_backward, layer_norm,
    layer_norm_backward, mse_loss, BatchNormSaved, LayerNormSaved,
};
pub use ops::optim::{Adam, Optimizer, Sgd};
pub use ops::pool::{
    avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward, MaxPoolSaved, Pool2dParams,
};
pub use runtime::context::{Context, Device};
pub use runtime::device::{cuda_device_count, cuda_devices, DeviceInfo};
pub use runtime::error::{Error, Result};
pub use runtime::module::{DISABLE_SM90A_VAR, KERNELS_PTX, KERNELS_PTX_SM90A};
pub use runtime::pool::PoolStats;
pub use runtime::stream::{Event, PinnedBuffer};
pub use tensor::{DType, Element, Tensor};
