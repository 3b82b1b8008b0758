//! Backward passes of the activations, as elementwise kernels on (saved tensor, dy), for f32, f16
//! and bf16: `relu_bwd` and `gelu_bwd` take the forward input x, `sigmoid_bwd` and `tanh_bwd` the
//! forward output y. Floor: 8 B read and 4 B written per f32 element.
use crate::elementwise::{map2, map2_half};
use crate::prelude::{exp_fast, fma, grid_dependency_sync, rcp_approx, BF16, F16};

/// d relu / dx · dy.
#[inline(always)]
fn relu_grad(x: f32, dy: f32) -> f32 {
    if x > 0.0 {
        dy
    } else {
        0.0
    }
}

/// d sigmoid / dx · dy from y = sigmoid(x).
#[inline(always)]
fn sigmoid_grad(y: f32, dy: f32) -> f32 {
    dy * y * (1.0 - y)
}

/// d tanh / dx · dy from y = tanh(x).
#[inline(always)]
fn tanh_grad(y: f32, dy: f32) -> f32 {
    dy * (1.0 - y * y)
}

/// d gelu / dx · dy for the tanh form, written as `gelu = x·s` with `s = sigmoid(2u)`,
/// `u = √(2/π)(x + 0.044715 x³)`: `gelu' = s + x·s(1-s)·2√(2/π)(1 + 3·0.044715 x²)`.
#[inline(always)]
fn gelu_grad(x: f32, dy: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const C: f32 = 0.044_715;
    let u = SQRT_2_OVER_PI * fma(C * x, x * x, x);
    let s = rcp_approx(1.0 + exp_fast(-2.0 * u));
    let du = 2.0 * SQRT_2_OVER_PI * fma(3.0 * C * x, x, 1.0);
    dy * fma(x * s * (1.0 - s), du, s)
}

macro_rules! grad_kernels {
    ($($f32:ident, $f16:ident, $bf16:ident: $grad:ident;)*) => {$(
        /// f32: `dx[i] = grad(saved[i], dy[i])`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $f32(saved: *const f32, dy: *const f32, dx: *mut f32, n: usize) {
            grid_dependency_sync();
            map2(saved, dy, dx, n, $grad)
        }
        /// f16, computed in f32.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $f16(saved: *const u16, dy: *const u16, dx: *mut u16, n: usize) {
            grid_dependency_sync();
            map2_half::<F16>(saved, dy, dx, n, $grad)
        }
        /// bf16, computed in f32.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $bf16(saved: *const u16, dy: *const u16, dx: *mut u16, n: usize) {
            grid_dependency_sync();
            map2_half::<BF16>(saved, dy, dx, n, $grad)
        }
    )*};
}

grad_kernels! {
    relu_bwd_f32, relu_bwd_f16, relu_bwd_bf16: relu_grad;
    sigmoid_bwd_f32, sigmoid_bwd_f16, sigmoid_bwd_bf16: sigmoid_grad;
    tanh_bwd_f32, tanh_bwd_f16, tanh_bwd_bf16: tanh_grad;
    gelu_bwd_f32, gelu_bwd_f16, gelu_bwd_bf16: gelu_grad;
}
