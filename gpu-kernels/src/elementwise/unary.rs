//! relu, sigmoid, tanh, gelu (tanh form), from the prelude's activations.
use super::map1;
use crate::prelude::{gelu_tanh, relu, sigmoid, tanh};

macro_rules! unary_kernels {
    ($($name:ident: $f:path;)*) => {$(
        /// `out[i] = f(x[i])`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(x: *const f32, out: *mut f32, n: usize) {
            map1(x, out, n, $f)
        }
    )*};
}

unary_kernels! {
    relu_f32: relu;
    sigmoid_f32: sigmoid;
    tanh_f32: tanh;
    gelu_f32: gelu_tanh;
}
