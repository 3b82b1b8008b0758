//! `sum_leading_*` (f32, f16, bf16): sums over every axis but the last, `[rows, cols]` → `[cols]`
//! (a linear layer's bias gradient, a positional embedding's gradient), accumulated in f32.
//!
//! Floor: one read per element; 16384×768 bf16 (24 MiB) at ~3.0 TB/s is about 8 µs.
//! One launch, deterministic, no float atomics: column teams (see `prelude::rows::ColumnTeam`)
//! each sum one group of rows for `8 · c_lanes` columns and write the group's sums to
//! `partials[g·cols ..]` (or the result itself when the grid has one group); the last group of a
//! column block to finish (`counters[blockIdx.x]`, see `last_of_blocks`) then adds every group's
//! sums of its columns in group order. (Against a second launch for that pass: ~0.5 µs less
//! kernel time and one launch less a bias gradient in the GPT's step, but ~1 µs slower alone at
//! 384 columns, where the last block's fence and fold end the launch; perf-notes.)
//!
//! `gelu_bwd_sum_leading_*`: a GELU layer's backward and its bias gradient in one pass, `dx =
//! gelu'(x)·dy` stored and its column sums (of the f32 values, before the rounding to 16 bits)
//! taken on the way: the bias gradient does not read dx again.
use crate::prelude::*;

/// The column sums of the rows `map(r, load(r))` of this block's team into `out` (one row group),
/// or into `partials` and then, in the last group of the column block to finish, `out` (see the
/// module documentation).
///
/// # Safety
/// As the kernels: `partials` holds `gridDim.y · cols` floats and `counters` `gridDim.x` zeroed
/// words when `gridDim.y` > 1; `out` `cols` values.
#[inline(always)]
unsafe fn column_sums<F: Float, L: Copy>(
    t: &ColumnTeam,
    (cols, c_lanes): (usize, usize),
    (partials, counters, out): (*mut f32, *mut u32, *mut F::Raw),
    load: impl Fn(usize) -> L,
    mut map: impl FnMut(usize, L) -> [f32; 8],
) {
    let groups = grid_dim_y();
    t.sum_with(
        load,
        |r, l| [map(r, l)],
        |c, [s]| {
            if groups == 1 {
                F::store(out.add(c), s);
            } else {
                store_f32(partials.add(block_y() * cols + c), s);
            }
        },
    );
    let counter = counters.wrapping_add(block_x());
    if groups == 1 || !last_of_blocks(counter, groups) {
        return;
    }
    let all = ColumnTeam::on_rows::<f32>(0, groups, cols, c_lanes);
    all.sum(|g| [all.load_l2(partials.add(g * cols))], |c, [s]| F::store(out.add(c), s));
    if thread_x() == 0 {
        *counter = 0;
    }
}

macro_rules! sum_leading_kernels {
    ($($name:ident, $gelu:ident: $f:ty;)*) => {$(
        /// Column sums; see the module documentation. `counters` holds `gridDim.x` zeroed words
        /// when the grid has more than one row group (left zero).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const <$f as Float>::Raw, rows: usize, cols: usize, c_lanes: usize, rows_per_group: usize,
            partials: *mut f32, counters: *mut u32, out: *mut <$f as Float>::Raw,
        ) {
            grid_dependency_sync();
            let t = ColumnTeam::new::<$f>(rows, cols, c_lanes, rows_per_group);
            let load = |r: usize| t.load::<$f>(x.add(r * cols));
            column_sums::<$f, _>(&t, (cols, c_lanes), (partials, counters, out), load, |_, v| v);
        }
        /// `dx = gelu'(x)·dy` and the column sums of dx (in f32) into `out`, as the kernel above.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $gelu(
            x: *const <$f as Float>::Raw, dy: *const <$f as Float>::Raw, dx: *mut <$f as Float>::Raw,
            rows: usize, cols: usize, c_lanes: usize, rows_per_group: usize,
            partials: *mut f32, counters: *mut u32, out: *mut <$f as Float>::Raw,
        ) {
            grid_dependency_sync();
            let t = ColumnTeam::new::<$f>(rows, cols, c_lanes, rows_per_group);
            let load = |r: usize| (t.load::<$f>(x.add(r * cols)), t.load::<$f>(dy.add(r * cols)));
            column_sums::<$f, _>(&t, (cols, c_lanes), (partials, counters, out), load, |r, (x, g)| {
                let mut d = [0.0f32; 8];
                unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { d[e] = gelu_grad(x[e], g[e]); });
                t.store::<$f>(dx.add(r * cols), d);
                d
            });
        }
    )*};
}

sum_leading_kernels! {
    sum_leading_f32, gelu_bwd_sum_leading_f32: f32;
    sum_leading_f16, gelu_bwd_sum_leading_f16: F16;
    sum_leading_bf16, gelu_bwd_sum_leading_bf16: BF16;
}
