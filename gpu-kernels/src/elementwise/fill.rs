//! `fill_f32`, `fill_u16`: every element set to one value (`full`; `fill_u16` takes the f16 or
//! bf16 bits). Floor: the bytes written. `fill_words`: a few words given in the launch's
//! parameters (small constant uploads inside a graph capture, without a host buffer).
use crate::prelude::*;
use crate::shapes::{ParamWords, FILL_WORDS_MAX};

/// `out[i] = value` for `i < n`; `out` 16-byte aligned.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_f32(out: *mut f32, value: f32, n: usize) {
    grid_dependency_sync();
    let n4 = n / 4;
    for i in grid_stride(n4) {
        store_f32x4(out.add(4 * i), F32x4([value; 4]));
    }
    let t = 4 * n4 + global_x();
    if t < n {
        store_f32(out.add(t), value);
    }
}

/// `out[i] = bits` for `i < n` 16-bit elements; `out` 16-byte aligned.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_u16(out: *mut u16, bits: u32, n: usize) {
    grid_dependency_sync();
    let n8 = n / 8;
    for i in grid_stride(n8) {
        store_u16x8(out.add(8 * i), U16x8([bits as u16; 8]));
    }
    let t = 8 * n8 + global_x();
    if t < n {
        store_u16(out.add(t), bits as u16);
    }
}

const _: () = assert!(FILL_WORDS_MAX == 500, "fill_words unrolls 5 × 10 × 10 words");

/// `out[i] = words[i]` for `i < n ≤ FILL_WORDS_MAX`; `out` 8-byte aligned; any launch shape
/// (thread 0 writes every word).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_words(out: *mut u64, n: usize, words: ParamWords) {
    grid_dependency_sync();
    if global_x() != 0 {
        return;
    }
    // Constant indices only: a parameter read at a computed index would copy the whole array to
    // local memory first (4000 bytes a thread).
    // The return after the last word keeps the instructions fetched to those of `n` words (the
    // whole body is ~1,500 instructions, a few µs from a cold instruction cache).
    unroll!(a in [0, 1, 2, 3, 4] => {
        unroll!(b in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] => {
            let first = 100 * a + 10 * b;
            if first >= n {
                return;
            }
            unroll!(c in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] => {
                if first + c < n {
                    store_u64(out.add(first + c), words.0[first + c]);
                }
            });
        });
    });
}
