//! `conv2d_flip_weights_f32`: `out[c, k, R−1−r, S−1−s] = w[k, c, r, s]`, the filter bank of the
//! convolution whose forward pass is the backward data gradient of a stride-1 convolution: with
//! it, dx = dy ⊛ out at padding `dilation·(R−1) − padding`, which runs on the forward's implicit
//! GEMM (B a dense `[C, K·R·S]` matrix read as vectors) instead of the backward one (B gathered
//! element by element, every tap's output coordinate tested).
//!
//! Floor: the filter bank read and written once (a few hundred KB): launch-bound.
//! Launch: grid-stride over the K·C·R·S elements, `ELEMENTWISE_BLOCK` threads.
use crate::prelude::*;

#[no_mangle]
pub unsafe extern "ptx-kernel" fn conv2d_flip_weights_f32(
    w: *const f32,
    out: *mut f32,
    k: usize,
    c: usize,
    rs: usize,
) {
    let (k, c, rs) = (k as u32, c as u32, rs as u32);
    for i in grid_stride((k * c * rs) as usize) {
        let i = i as u32;
        let (filter, tap) = (i / rs, i % rs);
        let (kk, cc) = (filter / c, filter % c);
        // Reversing the flattened R·S taps flips both axes at once.
        let dst = (cc * k + kk) * rs + (rs - 1 - tap);
        store_f32(out.add(dst as usize), load_nc_f32(w.add(i as usize)));
    }
}
