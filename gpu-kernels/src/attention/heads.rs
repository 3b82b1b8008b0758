//! `attention_heads`: moves 16-bit heads between the token-major layout of a projection's
//! output, `[B, S, Htot, D]`, and the head-major layout of the attention kernels, `[B, H, S, D]`
//! (heads `h0..h0 + H` of each token's row).
//!
//! Floor: 2 bytes read and 2 written per element, memory-bound (a [16384, 6, 64] bf16 tensor:
//! 25 MB, 8.4 µs at 3 TB/s). Each thread-step moves one 16-byte vector (D is a multiple of 8):
//! the first version moved one element per step with three 64-bit divisions each and ran at a
//! fifth of the bandwidth inside the GPT's step.
use crate::prelude::*;

/// Elements of one 16-byte vector.
const VECTOR: usize = 8;

/// Copy `B·H·S·D` elements: to head-major (`to_heads` = 1: `src` token-major, `dst` head-major)
/// or back (`to_heads` = 0: `src` head-major, `dst` token-major, only heads `h0..h0 + H` of each
/// row written). `D` a multiple of 8, both buffers 16-byte aligned, `B·H·S·D / 8 < 2^32`. Any
/// 1-D grid.
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
    // 32-bit index arithmetic: a 64-bit division costs several times a 32-bit one.
    let (per_row, s32, h32) = ((d / VECTOR) as u32, s as u32, h as u32);
    for i in grid_stride(b * h * s * d / VECTOR) {
        let r = i as u32;
        let (v, r) = (r % per_row, r / per_row);
        let (t, r) = (r % s32, r / s32);
        let (head, batch) = (r % h32, r / h32);
        let token = ((batch as usize * s + t as usize) * htot + h0 + head as usize) * d + v as usize * VECTOR;
        let heads = i * VECTOR;
        if to_heads != 0 {
            store_u16x8(dst.add(heads), load_nc_u16x8(src.add(token)));
        } else {
            store_u16x8(dst.add(token), load_nc_u16x8(src.add(heads)));
        }
    }
}
