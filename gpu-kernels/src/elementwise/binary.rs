//! add, sub, mul, div: tensor-tensor (`<op>_<dtype>`) and tensor-scalar (`<op>_scalar_<dtype>`),
//! for f32, f16 and bf16 (the 16-bit formats compute in f32 and round once).
use super::{map1, map1_half, map2, map2_half};
use crate::prelude::{grid_dependency_sync, BF16, F16};

macro_rules! binary_kernels {
    ($($f32:ident, $f32s:ident, $f16:ident, $f16s:ident, $bf16:ident, $bf16s:ident: |$a:ident, $b:ident| $body:expr;)*) => {$(
        /// f32 tensor-tensor form: `out[i] = a[i] op b[i]`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $f32(a: *const f32, b: *const f32, out: *mut f32, n: usize) {
            grid_dependency_sync();
            map2(a, b, out, n, |$a, $b| $body)
        }
        /// f32 tensor-scalar form: `out[i] = a[i] op s`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $f32s(a: *const f32, s: f32, out: *mut f32, n: usize) {
            grid_dependency_sync();
            map1(a, out, n, |$a| {
                let $b = s;
                $body
            })
        }
        /// f16 tensor-tensor form.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $f16(a: *const u16, b: *const u16, out: *mut u16, n: usize) {
            grid_dependency_sync();
            map2_half::<F16>(a, b, out, n, |$a, $b| $body)
        }
        /// f16 tensor-scalar form (`s` in f32).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $f16s(a: *const u16, s: f32, out: *mut u16, n: usize) {
            grid_dependency_sync();
            map1_half::<F16>(a, out, n, |$a| {
                let $b = s;
                $body
            })
        }
        /// bf16 tensor-tensor form.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $bf16(a: *const u16, b: *const u16, out: *mut u16, n: usize) {
            grid_dependency_sync();
            map2_half::<BF16>(a, b, out, n, |$a, $b| $body)
        }
        /// bf16 tensor-scalar form (`s` in f32).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $bf16s(a: *const u16, s: f32, out: *mut u16, n: usize) {
            grid_dependency_sync();
            map1_half::<BF16>(a, out, n, |$a| {
                let $b = s;
                $body
            })
        }
    )*};
}

binary_kernels! {
    add_f32, add_scalar_f32, add_f16, add_scalar_f16, add_bf16, add_scalar_bf16: |x, y| x + y;
    sub_f32, sub_scalar_f32, sub_f16, sub_scalar_f16, sub_bf16, sub_scalar_bf16: |x, y| x - y;
    mul_f32, mul_scalar_f32, mul_f16, mul_scalar_f16, mul_bf16, mul_scalar_bf16: |x, y| x * y;
    div_f32, div_scalar_f32, div_f16, div_scalar_f16, div_bf16, div_scalar_bf16: |x, y| x / y;
}
