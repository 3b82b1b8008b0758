//! `fill_f32`: every element set to one value (`full`). Floor: 4 B written per element.
use crate::prelude::*;

/// `out[i] = value` for `i < n`; `out` 16-byte aligned.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_f32(out: *mut f32, value: f32, n: usize) {
    let n4 = n / 4;
    for i in grid_stride(n4) {
        store_f32x4(out.add(4 * i), F32x4([value; 4]));
    }
    let t = 4 * n4 + global_x();
    if t < n {
        store_f32(out.add(t), value);
    }
}
