//! `sum_all_*`, `max_all_*`, `min_all_*` (f32, f16, bf16): one value from the whole tensor, in one
//! launch, accumulated in f32.
//!
//! Floor: one read per element (4 B f32, 2 B 16-bit); 2^28 f32 (1 GiB) at ~3.0 TB/s is about
//! 0.36 ms.
//! Each block writes its partial; the last block to finish (found with a GPU-scope atomic counter)
//! folds the partials in block order and resets the counter for the next launch on the stream.
use super::fold_strided;
use crate::prelude::*;

/// `out[0] = scale * fold(x[0..n])`. `partials` holds `gridDim.x` floats; `counter` is zero on
/// entry and is left zero.
#[inline(always)]
unsafe fn reduce_all<F: Float, R: ReduceOp>(
    x: *const F::Raw,
    n: usize,
    partials: *mut f32,
    counter: *mut u32,
    out: *mut F::Raw,
    scale: f32,
) {
    let acc = fold_strided::<F, R>(x, n, global_x(), grid_threads_x());
    let block_total = block_reduce::<R>(acc);
    if let Some(total) = grid_reduce_in_last_block::<R>(block_total, partials, counter) {
        F::store(out, total * scale);
    }
}

macro_rules! reduce_all_kernels {
    ($($name:ident: $f:ty, $op:ty;)*) => {$(
        /// Whole-tensor reduction; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const <$f as Float>::Raw, n: usize, partials: *mut f32, counter: *mut u32,
            out: *mut <$f as Float>::Raw, scale: f32,
        ) {
            grid_dependency_sync();
            reduce_all::<$f, $op>(x, n, partials, counter, out, scale)
        }
    )*};
}

reduce_all_kernels! {
    sum_all_f32: f32, Sum;
    max_all_f32: f32, Max;
    min_all_f32: f32, Min;
    sum_all_f16: F16, Sum;
    max_all_f16: F16, Max;
    min_all_f16: F16, Min;
    sum_all_bf16: BF16, Sum;
    max_all_bf16: BF16, Max;
    min_all_bf16: BF16, Min;
}
