//! relu, sigmoid, tanh, gelu (tanh form), from the prelude's activations, for f32, f16 and bf16
//! (the 16-bit formats compute in f32 and round once).
use super::{map1, map1_half};
use crate::prelude::{gelu_tanh, grid_dependency_sync, relu, sigmoid, tanh, BF16, F16};

macro_rules! unary_kernels {
    ($($f32:ident, $f16:ident, $bf16:ident: $f:path;)*) => {$(
        /// f32: `out[i] = f(x[i])`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $f32(x: *const f32, out: *mut f32, n: usize) {
            grid_dependency_sync();
            map1(x, out, n, $f)
        }
        /// f16: `out[i] = f(x[i])`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $f16(x: *const u16, out: *mut u16, n: usize) {
            grid_dependency_sync();
            map1_half::<F16>(x, out, n, $f)
        }
        /// bf16: `out[i] = f(x[i])`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $bf16(x: *const u16, out: *mut u16, n: usize) {
            grid_dependency_sync();
            map1_half::<BF16>(x, out, n, $f)
        }
    )*};
}

unary_kernels! {
    relu_f32, relu_f16, relu_bf16: relu;
    sigmoid_f32, sigmoid_f16, sigmoid_bf16: sigmoid;
    tanh_f32, tanh_f16, tanh_bf16: tanh;
    gelu_f32, gelu_f16, gelu_bf16: gelu_tanh;
}
