//! `gather_batch_b32` / `gather_batch_b16`: the next mini-batch of a dataset held in device
//! memory (`DeviceDataset` on the host), by the raw bits of its elements (f32, or f16/bf16):
//! `out[r, :] = samples[order[(cursor + r) mod m], :]` and `out_labels[r]` likewise for
//! `r < size`, with `cursor = state[0]`. The last block to finish moves the cursor on by `size`
//! (mod `m`) and zeroes its counter `state[1]`, so the next launch, or the next replay of a graph
//! that captured this one, serves the next rows without the host.
//!
//! Floor: `size · row` elements read and written (64 images of 64 f32: 32 KB), launch-bound.
//! Launch: 1-D grid-stride over `size · row` elements, blocks of `GATHER_BLOCK`.
use crate::prelude::*;

/// # Safety
/// `samples` holds `n · row` elements and `labels` `n` u32, `order` `m` u32 each below `n`;
/// `state` is two u32, the cursor below `m` and a zero counter, used by no other running kernel;
/// `out` has room for `size · row` elements and `out_labels` for `size` u32; `size ≤ m`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gather_batch<T: Copy>(
    samples: *const T,
    labels: *const u32,
    order: *const u32,
    state: *mut u32,
    out: *mut T,
    out_labels: *mut u32,
    (m, row, size): (usize, usize, usize),
) {
    grid_dependency_sync();
    let start = *state as usize;
    let wrap = |p: usize| if p >= m { p - m } else { p };
    for i in grid_stride(size * row) {
        let r = i / row;
        let c = i - r * row;
        let pick = *order.add(wrap(start + r)) as usize;
        *out.add(i) = *samples.add(pick * row + c);
        if c == 0 {
            *out_labels.add(r) = *labels.add(pick);
        }
    }
    // Every block read the cursor before it counted itself: the last one may move it.
    if last_block_to_finish(state.add(1)) && thread_x() == 0 {
        *state = wrap(start + size) as u32;
        *state.add(1) = 0;
    }
}

macro_rules! gather_kernels {
    ($($name:ident: $t:ty;)*) => {$(
        /// The next mini-batch of a device-resident dataset; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            samples: *const $t, labels: *const u32, order: *const u32, state: *mut u32, out: *mut $t,
            out_labels: *mut u32, m: usize, row: usize, size: usize,
        ) {
            gather_batch::<$t>(samples, labels, order, state, out, out_labels, (m, row, size))
        }
    )*};
}

gather_kernels! {
    gather_batch_b32: u32;
    gather_batch_b16: u16;
}
