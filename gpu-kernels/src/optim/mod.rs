//! Optimizers: fused multi-tensor steps, `sgd_step` (momentum, Nesterov, weight decay) and
//! `adam_step` (Adam, or AdamW with decoupled weight decay, bias-corrected, f32 or mixed precision),
//! updating every parameter tensor of a model in one launch; `grad_norm` (global gradient norm and
//! clip factor, one launch) and `grad_scale`.
//!
//! Floor: SGD with momentum reads p, g, buf and writes p, buf (20 B per parameter); Adam reads p,
//! g, m, v and writes p, m, v (28 B for f32; for a 16-bit parameter it reads g, m, v and the f32
//! master and writes m, v, master and the 16-bit parameter: 28 B too). 16M parameters: ~0.11 ms
//! and ~0.15 ms at 3 TB/s.
//! The host passes a slot table (`OPTIMIZER_SLOT_WORDS` u64 per tensor: parameter, gradient,
//! state buffers, master, meta word) and a chunk list (tensor index, unit): block b updates the
//! elements `optimizer_chunk_range(unit, len)` of its tensor in place (a chunk of
//! `OPTIMIZER_CHUNK`, or for a small model a piece of `OPTIMIZER_BLOCK`).
use crate::prelude::*;
use crate::shapes::{
    optimizer_chunk_range, optimizer_slot_parts, OPTIMIZER_BLOCK as BLOCK, OPTIMIZER_CHUNK as CHUNK,
    OPTIMIZER_SLOT_WORDS as WORDS,
};

pub mod adam;
pub mod clip;
pub mod sgd;

/// One block's work: its tensor's slot words, element range, weight-decay flag and element type.
pub(crate) struct Chunk {
    pub words: [u64; WORDS],
    pub start: usize,
    pub end: usize,
    pub decay: bool,
    pub dtype: u64,
}

/// This block's chunk.
#[inline(always)]
pub(crate) unsafe fn my_chunk(slots: *const u64, chunks: *const u32) -> Chunk {
    let (slot, unit) = (*chunks.add(2 * block_x()) as usize, *chunks.add(2 * block_x() + 1) as usize);
    let mut words = [0u64; WORDS];
    for (w, word) in words.iter_mut().enumerate() {
        *word = *slots.add(slot * WORDS + w);
    }
    let (len, decay, dtype) = optimizer_slot_parts(words[WORDS - 1]);
    let (start, end) = optimizer_chunk_range(unit, len);
    Chunk { words, start, end, decay, dtype }
}

/// `1` when `clip` is null, else the clip factor `clip[1]` written by `grad_norm`.
#[inline(always)]
pub(crate) unsafe fn clip_factor(clip: *const f32) -> f32 {
    if clip.is_null() {
        1.0
    } else {
        *clip.add(1)
    }
}

/// A gradient's element type: f32, or a 16-bit float's bits read as f32 and rounded back (to
/// nearest even) on store.
pub(crate) trait Element {
    /// Alignment (bytes) of the four elements one vector access moves.
    const VECTOR_BYTES: usize;
    unsafe fn load4(p: u64, i: usize) -> [f32; 4];
    unsafe fn store4(p: u64, i: usize, v: [f32; 4]);
    unsafe fn load(p: u64, i: usize) -> f32;
    unsafe fn store(p: u64, i: usize, v: f32);
}

impl Element for f32 {
    const VECTOR_BYTES: usize = 16;
    #[inline(always)]
    unsafe fn load4(p: u64, i: usize) -> [f32; 4] {
        load_f32x4((p as *const f32).add(i)).0
    }
    #[inline(always)]
    unsafe fn store4(p: u64, i: usize, v: [f32; 4]) {
        store_f32x4((p as *mut f32).add(i), F32x4(v));
    }
    #[inline(always)]
    unsafe fn load(p: u64, i: usize) -> f32 {
        *(p as *const f32).add(i)
    }
    #[inline(always)]
    unsafe fn store(p: u64, i: usize, v: f32) {
        *(p as *mut f32).add(i) = v;
    }
}

impl<H: HalfFloat> Element for H {
    const VECTOR_BYTES: usize = 8;
    #[inline(always)]
    unsafe fn load4(p: u64, i: usize) -> [f32; 4] {
        load_u16x4((p as *const u16).add(i)).map(H::to_f32)
    }
    #[inline(always)]
    unsafe fn store4(p: u64, i: usize, v: [f32; 4]) {
        store_u16x4((p as *mut u16).add(i), v.map(H::from_f32));
    }
    #[inline(always)]
    unsafe fn load(p: u64, i: usize) -> f32 {
        H::to_f32(*(p as *const u16).add(i))
    }
    #[inline(always)]
    unsafe fn store(p: u64, i: usize, v: f32) {
        *(p as *mut u16).add(i) = H::from_f32(v);
    }
}

/// Run `$body` with `$E` the [`Element`] type of the slot element type `$dtype`.
macro_rules! with_element {
    ($dtype:expr, $E:ident => $body:expr) => {
        match $dtype {
            $crate::shapes::OPTIMIZER_F16 => {
                type $E = $crate::prelude::F16;
                $body
            }
            $crate::shapes::OPTIMIZER_BF16 => {
                type $E = $crate::prelude::BF16;
                $body
            }
            _ => {
                type $E = f32;
                $body
            }
        }
    };
}
pub(crate) use with_element;

/// 16-byte (f32) vectors of each stream one thread holds in flight over a whole chunk.
const VECTORS: usize = CHUNK / BLOCK / 4;
const _: () = assert!(VECTORS == 4, "update_chunk unrolls four vectors per thread");

/// Apply `update` to every element `i` of this block's chunk `start..end`: it gets the gradient
/// `grad[i]` (of type `G`) and `[streams[0][i], ..]` (f32) and changes them in place. Every f32
/// stream is stored back; the gradient when `grad_written`; and, when `mirror` is not 0,
/// `streams[0][i]` rounded to `G` into `mirror[i]` (a 16-bit parameter beside its f32 master).
/// A full, aligned chunk moves as four 4-element vectors per stream per thread, every load issued
/// before any store (the streams may alias as far as the compiler knows, so without that it would
/// serialise each load behind the previous store); a partial or unaligned one goes element by
/// element.
#[inline(always)]
pub(crate) unsafe fn update_chunk<G: Element, const N: usize>(
    grad: u64,
    grad_written: bool,
    streams: [*mut f32; N],
    mirror: u64,
    (start, end): (usize, usize),
    mut update: impl FnMut(&mut f32, &mut [f32; N]),
) {
    let t = thread_x();
    let aligned = grad as usize % G::VECTOR_BYTES == 0
        && mirror as usize % G::VECTOR_BYTES == 0
        && streams.iter().all(|&p| p as usize % 16 == 0);
    if aligned && end - start == CHUNK {
        let mut g = [[0.0f32; 4]; VECTORS];
        let mut v = [[F32x4([0.0; 4]); VECTORS]; N];
        let at = |u: usize| start + (u * BLOCK + t) * 4;
        unroll!(u in [0, 1, 2, 3] => {
            g[u] = G::load4(grad, at(u));
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
                update(&mut g[u][e], &mut x);
                for s in 0..N {
                    v[s][u].0[e] = x[s];
                }
            });
            for s in 0..N {
                store_f32x4(streams[s].add(at(u)), v[s][u]);
            }
            if grad_written {
                G::store4(grad, at(u), g[u]);
            }
            if N > 0 && mirror != 0 {
                G::store4(mirror, at(u), v[0][u].0);
            }
        });
    } else {
        let mut i = start + t;
        while i < end {
            let mut g = G::load(grad, i);
            let mut x = [0.0f32; N];
            for s in 0..N {
                x[s] = *streams[s].add(i);
            }
            update(&mut g, &mut x);
            for s in 0..N {
                *streams[s].add(i) = x[s];
            }
            if grad_written {
                G::store(grad, i, g);
            }
            if N > 0 && mirror != 0 {
                G::store(mirror, i, x[0]);
            }
            i += BLOCK;
        }
    }
}
