//! Optimizers: fused multi-tensor steps, `sgd_f32` (momentum, Nesterov, weight decay) and `adam_f32`
//! (Adam, or AdamW with decoupled weight decay, bias-corrected), updating every parameter tensor
//! of a model in one launch.
//!
//! Floor: SGD with momentum reads p, g, buf and writes p, buf (20 B per parameter); Adam reads p,
//! g, m, v and writes p, m, v (28 B). 16M parameters: ~0.11 ms and ~0.15 ms at 3 TB/s.
//! The host passes a slot table (`OPTIMIZER_SLOT_WORDS` u64 per tensor: parameter, gradient,
//! state buffers, length) and a chunk list (tensor index, chunk index) of `OPTIMIZER_CHUNK`
//! elements; block b updates chunk b in place.
use crate::prelude::block_x;
use crate::shapes::{OPTIMIZER_CHUNK as CHUNK, OPTIMIZER_SLOT_WORDS as WORDS};

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
