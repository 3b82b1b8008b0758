//! Global-norm gradient clipping over every gradient tensor, f32, f16 or bf16 (slot words 1 and
//! the meta word; see the module documentation). `grad_sq_partials`: each block writes its
//! chunk's sum of squares (f32); floor: every gradient's bytes read once (~10.7M bf16 gradients,
//! 21 MB: ~7 µs at 3 TB/s). `grad_norm_finish`: one block folds the partials in block order into
//! the norm and the clip factor, so the result depends only on the tensors and their order (no
//! atomics). `grad_scale`: every gradient times the factor, in place (read and write: twice the
//! bytes).
use super::{clip_factor, my_chunk, update_chunk, with_element};
use crate::prelude::*;
use crate::shapes::GRAD_NORM_EPS;

/// `partials[b]` ← Σ g² over block b's chunk.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grad_sq_partials(
    slots: *const u64,
    chunks: *const u32,
    partials: *mut f32,
) {
    let chunk = my_chunk(slots, chunks);
    let mut acc = 0.0f32;
    let range = (chunk.start, chunk.end);
    let square = |g: &mut f32, _: &mut [f32; 0]| acc = fma(*g, *g, acc);
    with_element!(chunk.dtype, E => update_chunk::<E, 0>(chunk.words[1], false, [], 0, range, square));
    let total = block_reduce::<Sum>(acc);
    if thread_x() == 0 {
        *partials.add(block_x()) = total;
    }
}

/// One block of `GRAD_NORM_FINISH_BLOCK` threads: `out[0]` ← `√Σ partials[0..blocks]`, `out[1]` ←
/// the clip factor `min(1, max_norm / (norm + GRAD_NORM_EPS))` (NaN stays NaN, as in PyTorch).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grad_norm_finish(
    partials: *const f32,
    blocks: u32,
    max_norm: f32,
    out: *mut f32,
) {
    let mut acc = 0.0f32;
    let mut i = thread_x();
    while i < blocks as usize {
        acc += *partials.add(i);
        i += block_dim_x();
    }
    let total = block_reduce::<Sum>(acc);
    if thread_x() == 0 {
        let norm = sqrt_rn(total);
        let factor = max_norm / (norm + GRAD_NORM_EPS);
        *out = norm;
        *out.add(1) = if factor > 1.0 { 1.0 } else { factor };
    }
}

/// Every gradient ← gradient × `norm[1]` (the clip factor of `grad_norm_finish`), rounded to its
/// type.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grad_scale(slots: *const u64, chunks: *const u32, norm: *const f32) {
    let chunk = my_chunk(slots, chunks);
    let factor = clip_factor(norm);
    let range = (chunk.start, chunk.end);
    let scale = |g: &mut f32, _: &mut [f32; 0]| *g *= factor;
    with_element!(chunk.dtype, E => update_chunk::<E, 0>(chunk.words[1], true, [], 0, range, scale));
}
