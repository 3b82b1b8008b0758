//! `sum_leading_*` (f32, f16, bf16): sums over every axis but the last, `[rows, cols]` → `[cols]`
//! (a linear layer's bias gradient, a positional embedding's gradient), accumulated in f32.
//!
//! Floor: one read per element; 16384×768 bf16 (24 MiB) at ~3.0 TB/s is about 8 µs.
//! Two passes, deterministic, no atomics: column teams (see `prelude::rows::ColumnTeam`) each sum
//! one group of rows for `8 · c_lanes` columns and write the group's sums to `partials[g·cols ..]`
//! (or the result itself when the grid has one group); `sum_partials_*` then adds the groups in
//! order.
use crate::prelude::*;

macro_rules! sum_leading_kernels {
    ($($name:ident, $partials:ident: $f:ty;)*) => {$(
        /// One row group's column sums; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const <$f as Float>::Raw, rows: usize, cols: usize, c_lanes: usize, rows_per_group: usize,
            partials: *mut f32, out: *mut <$f as Float>::Raw,
        ) {
            grid_dependency_sync();
            let t = ColumnTeam::new::<$f>(rows, cols, c_lanes, rows_per_group);
            let one_group = grid_dim_y() == 1;
            t.sum(|r| [t.load::<$f>(x.add(r * cols))], |c, [s]| {
                if one_group {
                    <$f as Float>::store(out.add(c), s);
                } else {
                    store_f32(partials.add(block_y() * cols + c), s);
                }
            });
        }
        /// The row groups' partial sums added in order.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $partials(
            partials: *const f32, groups: usize, cols: usize, stride: usize, c_lanes: usize,
            out: *mut <$f as Float>::Raw,
        ) {
            grid_dependency_sync();
            sum_column_partials::<$f>(partials, groups, cols, stride, c_lanes, out)
        }
    )*};
}

sum_leading_kernels! {
    sum_leading_f32, sum_partials_f32: f32;
    sum_leading_f16, sum_partials_f16: F16;
    sum_leading_bf16, sum_partials_bf16: BF16;
}
