//! Optimizers: fused multi-tensor steps, `sgd_f32` (momentum, Nesterov, weight decay) and `adam_f32`
//! (Adam, or AdamW with decoupled weight decay, bias-corrected), updating every parameter tensor
//! of a model in one launch.
//!
//! Floor: SGD with momentum reads p, g, buf and writes p, buf (20 B per parameter); Adam reads p,
//! g, m, v and writes p, m, v (28 B). 16M parameters: ~0.11 ms and ~0.15 ms at 3 TB/s.
//! The host passes a slot table (`OPTIMIZER_SLOT_WORDS` u64 per tensor: parameter, gradient,
//! state buffers, length) and a chunk list (tensor index, chunk index) of `OPTIMIZER_CHUNK`
//! elements; block b updates chunk b in place.
use crate::prelude::*;
use crate::shapes::{OPTIMIZER_BLOCK as BLOCK, OPTIMIZER_CHUNK as CHUNK, OPTIMIZER_SLOT_WORDS as WORDS};

pub mod adam;
pub mod sgd;

/// This block's tensor (its slot's words) and element range.
#[inline(always)]
pub(crate) unsafe fn my_chunk(slots: *const u64, chunks: *const u32) -> ([u64; WORDS], usize, usize) {
    let (slot, index) = (*chunks.add(2 * block_x()) as usize, *chunks.add(2 * block_x() + 1) as usize);
    let mut words = [0u64; WORDS];
    for (w, word) in words.iter_mut().enumerate() {
        *word = *slots.add(slot * WORDS + w);
    }
    let start = index * CHUNK;
    (words, start, (start + CHUNK).min(words[WORDS - 1] as usize))
}

/// 16-byte vectors of each stream one thread holds in flight over a whole chunk.
const VECTORS: usize = CHUNK / BLOCK / 4;
const _: () = assert!(VECTORS == 4, "update_chunk unrolls four vectors per thread");

/// Apply `update` to every element `i` of this block's chunk `start..end`: it gets
/// `[stream[0][i], stream[1][i], ..]` and changes them in place; the streams marked in `written`
/// are stored back. A full, 16-byte-aligned chunk moves as four 16-byte vectors per stream per
/// thread, every load issued before any store (the streams may alias as far as the compiler
/// knows, so without that it would serialise each load behind the previous store); a partial or
/// unaligned one goes element by element.
#[inline(always)]
pub(crate) unsafe fn update_chunk<const N: usize>(
    streams: [*mut f32; N],
    written: [bool; N],
    (start, end): (usize, usize),
    update: impl Fn(&mut [f32; N]),
) {
    let t = thread_x();
    let aligned = streams.iter().all(|&p| p as usize % 16 == 0);
    if aligned && end - start == CHUNK {
        let mut v = [[F32x4([0.0; 4]); VECTORS]; N];
        let at = |u: usize| start + (u * BLOCK + t) * 4;
        unroll!(u in [0, 1, 2, 3] => {
            for s in 0..N {
                v[s][u] = load_f32x4(streams[s].add(at(u)));
            }
        });
        unroll!(u in [0, 1, 2, 3] => {
            unroll!(e in [0, 1, 2, 3] => {
                let mut x = [0.0f32; N];
                for s in 0..N {
                    x[s] = v[s][u].0[e];
                }
                update(&mut x);
                for s in 0..N {
                    v[s][u].0[e] = x[s];
                }
            });
            for s in 0..N {
                if written[s] {
                    store_f32x4(streams[s].add(at(u)), v[s][u]);
                }
            }
        });
    } else {
        let mut i = start + t;
        while i < end {
            let mut x = [0.0f32; N];
            for s in 0..N {
                x[s] = *streams[s].add(i);
            }
            update(&mut x);
            for s in 0..N {
                if written[s] {
                    *streams[s].add(i) = x[s];
                }
            }
            i += BLOCK;
        }
    }
}
