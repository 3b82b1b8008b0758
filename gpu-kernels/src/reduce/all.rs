//! `sum_all_*`, `max_all_*`, `min_all_*` (f32, f16, bf16): one value from the whole tensor, in one
//! launch, accumulated in f32.
//!
//! Floor: one read per element (4 B f32, 2 B 16-bit); 2^28 f32 (1 GiB) at ~3.0 TB/s is about
//! 0.36 ms.
//! Each block writes its partial; the last block to finish (found with a GPU-scope atomic counter)
//! folds the partials in block order and resets the counter for the next launch on the stream.
use super::fold_strided;
use crate::prelude::*;

shared_array!(static REDUCE_ALL_IS_LAST: [u32; 1]);

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
    let is_last = shared_ptr(&raw mut REDUCE_ALL_IS_LAST);
    if thread_x() == 0 {
        *partials.add(block_x()) = block_total;
        fence_gpu();
        let finished = atomic_add_u32(counter, 1);
        *is_last = (finished as usize == grid_dim_x() - 1) as u32;
    }
    sync_threads();
    if *is_last != 0 {
        fence_gpu();
        let mut acc = R::IDENTITY;
        let mut i = thread_x();
        while i < grid_dim_x() {
            acc = R::combine(acc, load_l2_f32(partials.add(i)));
            i += block_dim_x();
        }
        let total = block_reduce::<R>(acc);
        if thread_x() == 0 {
            F::store(out, total * scale);
            *counter = 0;
        }
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
