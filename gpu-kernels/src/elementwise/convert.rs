//! Conversions between f32, f16 and bf16, rounding to nearest even (`to_dtype`), and f32's TF32
//! low parts (`tf32_low_f32`, the second operand of a 3xTF32 product).
//! Floor: (source + destination bytes) per element.
use super::map1;
use crate::prelude::*;

/// `out[i] = convert(x[i])`, one element per step of a grid-stride loop (the 2- and 4-byte sides
/// differ in width, and these run once per tensor, not per step of a model).
#[inline(always)]
unsafe fn convert<S: Copy, D>(x: *const S, out: *mut D, n: usize, f: impl Fn(S) -> D) {
    for i in grid_stride(n) {
        *out.add(i) = f(*x.add(i));
    }
}

#[no_mangle]
pub unsafe extern "ptx-kernel" fn convert_f32_f16(x: *const f32, out: *mut u16, n: usize) {
    grid_dependency_sync();
    convert(x, out, n, F16::from_f32)
}
#[no_mangle]
pub unsafe extern "ptx-kernel" fn convert_f32_bf16(x: *const f32, out: *mut u16, n: usize) {
    grid_dependency_sync();
    convert(x, out, n, BF16::from_f32)
}
#[no_mangle]
pub unsafe extern "ptx-kernel" fn convert_f16_f32(x: *const u16, out: *mut f32, n: usize) {
    grid_dependency_sync();
    convert(x, out, n, F16::to_f32)
}
#[no_mangle]
pub unsafe extern "ptx-kernel" fn convert_bf16_f32(x: *const u16, out: *mut f32, n: usize) {
    grid_dependency_sync();
    convert(x, out, n, BF16::to_f32)
}
#[no_mangle]
pub unsafe extern "ptx-kernel" fn convert_f16_bf16(x: *const u16, out: *mut u16, n: usize) {
    grid_dependency_sync();
    convert(x, out, n, |v| BF16::from_f32(F16::to_f32(v)))
}
#[no_mangle]
pub unsafe extern "ptx-kernel" fn convert_bf16_f16(x: *const u16, out: *mut u16, n: usize) {
    grid_dependency_sync();
    convert(x, out, n, |v| F16::from_f32(BF16::to_f32(v)))
}

/// `out[i] = tf32_low(x[i])`: what the tensor cores drop of `x[i]`, for the f32 GEMM's 3xTF32
/// path (`gemm_wgmma_f32x3_nt` reads `x` and these; 16-byte vectors, it runs per product).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn tf32_low_f32(x: *const f32, out: *mut f32, n: usize) {
    grid_dependency_sync();
    map1(x, out, n, tf32_low)
}
