//! Matrix multiply kernels.
pub mod gemm_f32;
pub mod gemm_half;
pub mod gemm_tf32;

use crate::prelude::{gelu_tanh, relu};
use crate::shapes::{ACTIVATION_GELU, ACTIVATION_RELU};

/// The fused epilogue on one output: `alpha·acc + beta·c + bias`, then the activation.
#[inline(always)]
pub(crate) fn epilogue(acc: f32, alpha: f32, beta_c: f32, bias: f32, activation: u32) -> f32 {
    let v = alpha * acc + beta_c + bias;
    match activation {
        ACTIVATION_RELU => relu(v),
        ACTIVATION_GELU => gelu_tanh(v),
        _ => v,
    }
}
