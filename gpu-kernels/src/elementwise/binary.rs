//! add, sub, mul, div: tensor-tensor (`<op>_f32`) and tensor-scalar (`<op>_scalar_f32`).
use super::{map1, map2};

macro_rules! binary_kernels {
    ($($tensor:ident, $scalar:ident: |$a:ident, $b:ident| $body:expr;)*) => {$(
        /// Tensor-tensor form: `out[i] = a[i] op b[i]`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $tensor(a: *const f32, b: *const f32, out: *mut f32, n: usize) {
            map2(a, b, out, n, |$a, $b| $body)
        }
        /// Tensor-scalar form: `out[i] = a[i] op s`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $scalar(a: *const f32, s: f32, out: *mut f32, n: usize) {
            map1(a, out, n, |$a| {
                let $b = s;
                $body
            })
        }
    )*};
}

binary_kernels! {
    add_f32, add_scalar_f32: |x, y| x + y;
    sub_f32, sub_scalar_f32: |x, y| x - y;
    mul_f32, mul_scalar_f32: |x, y| x * y;
    div_f32, div_scalar_f32: |x, y| x / y;
}
