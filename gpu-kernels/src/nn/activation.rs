//! Backward passes of the activations, as elementwise kernels on (saved tensor, dy), for f32, f16
//! and bf16: `relu_bwd` and `gelu_bwd` take the forward input x, `sigmoid_bwd` and `tanh_bwd` the
//! forward output y. Floor: 8 B read and 4 B written per f32 element.
use crate::elementwise::{map2, map2_half};
use crate::prelude::{gelu_grad, grid_dependency_sync, BF16, F16};

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
