//! `sum_rows_f32`, `max_rows_f32`, `min_rows_f32`: reduce along the last axis of `[rows, cols]`.
//!
//! Floor: 4 B read per element (the `rows` outputs are noise); 4096×4096 is 64 MiB, about
//! 22 µs at ~3.0 TB/s.
//! Launch shape (chosen by the host): `blockDim = (32, k)` gives each warp its own row, for short
//! rows; `blockDim = (t, 1)` with `t > 32` gives the whole block one row.
use super::{fold_strided, fold_strided_scalar};
use crate::prelude::*;

#[inline(always)]
unsafe fn reduce_rows<R: ReduceOp>(x: *const f32, rows: usize, cols: usize, out: *mut f32, scale: f32) {
    let warp_per_row = block_dim_x() == 32;
    let row = if warp_per_row { block_x() * block_dim_y() + thread_y() } else { block_x() };
    // A whole warp (or block) shares `row`, so this exit keeps every barrier below uniform.
    if row >= rows {
        return;
    }
    let base = x.add(row * cols);
    let acc = if cols % 4 == 0 {
        fold_strided::<R>(base, cols, thread_x(), block_dim_x())
    } else {
        fold_strided_scalar::<R>(base, cols, thread_x(), block_dim_x())
    };
    let total = if warp_per_row { warp_reduce::<R>(acc) } else { block_reduce::<R>(acc) };
    if thread_x() == 0 {
        *out.add(row) = total * scale;
    }
}

macro_rules! reduce_rows_kernels {
    ($($name:ident: $op:ty;)*) => {$(
        /// Row reduction; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const f32, rows: usize, cols: usize, out: *mut f32, scale: f32,
        ) {
            reduce_rows::<$op>(x, rows, cols, out, scale)
        }
    )*};
}

reduce_rows_kernels! {
    sum_rows_f32: Sum;
    max_rows_f32: Max;
    min_rows_f32: Min;
}
