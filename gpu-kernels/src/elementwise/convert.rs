//! Conversions between f32, f16 and bf16, rounding to nearest even (`to_dtype`).
//! Floor: (source + destination bytes) per element.
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
