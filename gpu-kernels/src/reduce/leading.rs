//! `sum_leading_*` (f32, f16, bf16): sums over every axis but the last, `[rows, cols]` → `[cols]`
//! (a linear layer's bias gradient, a positional embedding's gradient), accumulated in f32.
//!
//! Floor: one read per element; 16384×768 bf16 (24 MiB) at ~3.0 TB/s is about 8 µs.
//! One launch, deterministic, no float atomics: column teams (see `prelude::rows::ColumnTeam`)
//! each sum one group of rows for `8 · c_lanes` columns and write the group's sums to
//! `partials[g·cols ..]` (or the result itself when the grid has one group); the last group of a
//! column block to finish (`counters[blockIdx.x]`, see `last_of_blocks`) then adds every group's
//! sums of its columns in group order. (A second launch for that last pass cost ~2-4 µs more a
//! call, 24 calls a GPT step.)
use crate::prelude::*;

macro_rules! sum_leading_kernels {
    ($($name:ident: $f:ty;)*) => {$(
        /// Column sums; see the module documentation. `counters` holds `gridDim.x` zeroed words
        /// when the grid has more than one row group (left zero).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const <$f as Float>::Raw, rows: usize, cols: usize, c_lanes: usize, rows_per_group: usize,
            partials: *mut f32, counters: *mut u32, out: *mut <$f as Float>::Raw,
        ) {
            grid_dependency_sync();
            let t = ColumnTeam::new::<$f>(rows, cols, c_lanes, rows_per_group);
            let groups = grid_dim_y();
            t.sum(|r| [t.load::<$f>(x.add(r * cols))], |c, [s]| {
                if groups == 1 {
                    <$f as Float>::store(out.add(c), s);
                } else {
                    store_f32(partials.add(block_y() * cols + c), s);
                }
            });
            let counter = counters.wrapping_add(block_x());
            if groups == 1 || !last_of_blocks(counter, groups) {
                return;
            }
            let all = ColumnTeam::on_rows::<f32>(0, groups, cols, c_lanes);
            all.sum(|g| [all.load_l2(partials.add(g * cols))], |c, [s]| <$f as Float>::store(out.add(c), s));
            if thread_x() == 0 {
                *counter = 0;
            }
        }
    )*};
}

sum_leading_kernels! {
    sum_leading_f32: f32;
    sum_leading_f16: F16;
    sum_leading_bf16: BF16;
}
