//! `attention_heads`: moves 16-bit heads between the token-major layout of a projection's
//! output, `[B, S, Htot, D]`, and the head-major layout of the attention kernels, `[B, H, S, D]`
//! (heads `h0..h0 + H` of each token's row).
//!
//! Floor: 2 bytes read and 2 written per element, memory-bound; one element per thread-step, as
//! it only runs around the attention layer's projections.
use crate::prelude::*;

/// Copy `B·H·S·D` elements: to head-major (`to_heads` = 1: `src` token-major, `dst` head-major)
/// or back (`to_heads` = 0: `src` head-major, `dst` token-major, only heads `h0..h0 + H` of each
/// row written). Any 1-D grid.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn attention_heads(
    src: *const u16,
    dst: *mut u16,
    b: usize,
    s: usize,
    htot: usize,
    h0: usize,
    h: usize,
    d: usize,
    to_heads: u32,
) {
    for i in grid_stride(b * h * s * d) {
        let (e, r) = (i % d, i / d);
        let (t, r) = (r % s, r / s);
        let (head, batch) = (r % h, r / h);
        let token = ((batch * s + t) * htot + h0 + head) * d + e;
        if to_heads != 0 {
            store_u16(dst.add(i), load_nc_u16(src.add(token)));
        } else {
            store_u16(dst.add(token), load_nc_u16(src.add(i)));
        }
    }
}
