//! `sum_all_f32`, `max_all_f32`, `min_all_f32`: one value from the whole tensor, in one launch.
//!
//! Floor: 4 B read per element; 2^28 elements (1 GiB) at ~3.0 TB/s is about 0.36 ms.
//! Each block writes its partial; the last block to finish (found with a GPU-scope atomic counter)
//! folds the partials in block order and resets the counter for the next launch on the stream.
use super::fold_strided;
use crate::prelude::*;

shared_array!(static REDUCE_ALL_IS_LAST: [u32; 1]);

/// `out[0] = scale * fold(x[0..n])`. `partials` holds `gridDim.x` floats; `counter` is zero on
/// entry and is left zero.
#[inline(always)]
unsafe fn reduce_all<R: ReduceOp>(
    x: *const f32,
    n: usize,
    partials: *mut f32,
    counter: *mut u32,
    out: *mut f32,
    scale: f32,
) {
    let acc = fold_strided::<R>(x, n, global_x(), grid_threads_x());
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
            *out = total * scale;
            *counter = 0;
        }
    }
}

macro_rules! reduce_all_kernels {
    ($($name:ident: $op:ty;)*) => {$(
        /// Whole-tensor reduction; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const f32, n: usize, partials: *mut f32, counter: *mut u32, out: *mut f32, scale: f32,
        ) {
            reduce_all::<$op>(x, n, partials, counter, out, scale)
        }
    )*};
}

reduce_all_kernels! {
    sum_all_f32: Sum;
    max_all_f32: Max;
    min_all_f32: Min;
}
