//! `fill_f32`, `fill_u16`: every element set to one value (`full`; `fill_u16` takes the f16 or
//! bf16 bits). Floor: the bytes written.
use crate::prelude::*;

/// `out[i] = value` for `i < n`; `out` 16-byte aligned.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_f32(out: *mut f32, value: f32, n: usize) {
    grid_dependency_sync();
    let n4 = n / 4;
    for i in grid_stride(n4) {
        store_f32x4(out.add(4 * i), F32x4([value; 4]));
    }
    let t = 4 * n4 + global_x();
    if t < n {
        store_f32(out.add(t), value);
    }
}

/// `out[i] = bits` for `i < n` 16-bit elements; `out` 16-byte aligned.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_u16(out: *mut u16, bits: u32, n: usize) {
    grid_dependency_sync();
    let n8 = n / 8;
    for i in grid_stride(n8) {
        store_u16x8(out.add(8 * i), U16x8([bits as u16; 8]));
    }
    let t = 8 * n8 + global_x();
    if t < n {
        store_u16(out.add(t), bits as u16);
    }
}
