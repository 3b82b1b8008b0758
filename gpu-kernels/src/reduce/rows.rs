//! `sum_rows_*`, `max_rows_*`, `min_rows_*` (f32, f16, bf16): reduce along the last axis of
//! `[rows, cols]`, accumulated in f32, each result rounded once to the input's format.
//!
//! Floor: one read per element (the `rows` outputs are noise); 4096×4096 f32 is 64 MiB, about
//! 22 µs at ~3.0 TB/s.
//! Launch (see `prelude::rows` and the host's dispatch): a team of threads per row (several rows
//! per warp when rows are narrow, a warp, or a block); rows longer than a block holds are split
//! over `gridDim.y`: `ROW_PARTIAL` writes each chunk's fold to `partials[row · chunks + chunk]`,
//! then `ROW_APPLY` (one chunk per row, `cols` = the chunk count) folds those rows of partials;
//! or one `ROW_CLUSTER` launch merges a row's chunks within its cluster.
use crate::prelude::*;
use crate::shapes::{ROW_APPLY, ROW_WHOLE};

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_rows<F: Float, R: ReduceOp, const K: usize>(
    x: *const F::Raw,
    partials: *mut f32,
    out: *mut F::Raw,
    (rows, cols, team, chunk, mode): (usize, usize, usize, usize, u32),
    scale: f32,
) {
    // The second pass's rows are the partials: whole rows of f32 to fold, not a split row.
    if mode == ROW_APPLY {
        fold_rows::<f32, F, R, K>(partials, partials, out, (rows, cols, team, chunk, ROW_WHOLE), scale)
    } else {
        fold_rows::<F, F, R, K>(x, partials, out, (rows, cols, team, chunk, mode), scale)
    }
}

/// `out[row] = scale · fold_R(src[row])` for rows of `L` values (written as `F`), in the launch's
/// `mode` (`ROW_PARTIAL` writes the chunks' folds to `partials` instead).
#[inline(always)]
unsafe fn fold_rows<L: Float, F: Float, R: ReduceOp, const K: usize>(
    src: *const L::Raw,
    partials: *mut f32,
    out: *mut F::Raw,
    (rows, cols, team, chunk, mode): (usize, usize, usize, usize, u32),
    scale: f32,
) {
    row_items::<L, K>(
        (rows, cols, team, chunk),
        mode,
        #[inline(always)]
        |t, mode| {
            let v = t.load_first::<L, K>(src.wrapping_add(t.row * cols), R::IDENTITY);
            // Folded before `row_stat` (which takes it by value): a closure over `v` left the f32
            // builds' values in local memory (a 208-byte stack frame, 3.8× slower split rows).
            let folded = t.combine(Folded::<R>::new(fold_slots::<R, K>(t, &v, |e| e)));
            let Some(total) = t.row_stat(mode, partials, move || folded) else { return };
            if t.lane == 0 && t.chunk == 0 && t.begin < t.end {
                F::store(out.add(t.row), total.0 * scale);
            }
        },
    );
}

macro_rules! reduce_rows_kernels {
    ($($name:ident: $f:ty, $op:ty, $k:literal;)*) => {$(
        /// Row reduction; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const <$f as Float>::Raw, partials: *mut f32, out: *mut <$f as Float>::Raw, rows: usize,
            cols: usize, team: usize, chunk: usize, mode: u32, scale: f32,
        ) {
            grid_dependency_sync();
            reduce_rows::<$f, $op, $k>(x, partials, out, (rows, cols, team, chunk, mode), scale)
        }
    )*};
}

reduce_rows_kernels! {
    sum_rows_f32: f32, Sum, 4;
    max_rows_f32: f32, Max, 4;
    min_rows_f32: f32, Min, 4;
    sum_rows_f16: F16, Sum, 4;
    max_rows_f16: F16, Max, 4;
    min_rows_f16: F16, Min, 4;
    sum_rows_bf16: BF16, Sum, 4;
    max_rows_bf16: BF16, Max, 4;
    min_rows_bf16: BF16, Min, 4;
    sum_rows_v16_f32: f32, Sum, 2;
    max_rows_v16_f32: f32, Max, 2;
    min_rows_v16_f32: f32, Min, 2;
    sum_rows_v16_f16: F16, Sum, 2;
    max_rows_v16_f16: F16, Max, 2;
    min_rows_v16_f16: F16, Min, 2;
    sum_rows_v16_bf16: BF16, Sum, 2;
    max_rows_v16_bf16: BF16, Max, 2;
    min_rows_v16_bf16: BF16, Min, 2;
    sum_rows_v8_f32: f32, Sum, 1;
    max_rows_v8_f32: f32, Max, 1;
    min_rows_v8_f32: f32, Min, 1;
    sum_rows_v8_f16: F16, Sum, 1;
    max_rows_v8_f16: F16, Max, 1;
    min_rows_v8_f16: F16, Min, 1;
    sum_rows_v8_bf16: BF16, Sum, 1;
    max_rows_v8_bf16: BF16, Max, 1;
    min_rows_v8_bf16: BF16, Min, 1;
}
