//! Reductions: over the whole tensor (`all`), along the last axis (`rows`), and over every axis
//! but the last (`leading`), for f32, f16 and bf16 (accumulated in f32, the result rounded once
//! to the input's format). `rows` is built into the `rows` module of `kernels.rs` (with softmax
//! and layer norm), the rest into `reduce`.
//!
//! Deterministic: each thread folds a fixed set of elements in a fixed order, warps combine by
//! butterflies, blocks by a fixed tree, and the grid shape depends only on the size and the device,
//! so the same input gives the same bits on every run.
use crate::prelude::*;

#[cfg(feature = "reduce")]
pub mod all;
#[cfg(feature = "reduce")]
pub mod leading;
#[cfg(feature = "rows")]
pub mod rows;

/// Fold `x[0..n]`, this thread's strided share of it (`first`, `first + step`, ... in chunks of 8
/// values loaded as 16-byte vectors, four chunks in flight at a time, then the `n % 8` tail).
///
/// # Safety
/// `x` is a 16-byte-aligned device buffer of at least `n` values.
#[inline(always)]
pub(crate) unsafe fn fold_strided<F: Float, R: ReduceOp>(
    x: *const F::Raw,
    n: usize,
    first: usize,
    step: usize,
) -> f32 {
    let fold8 = |acc: f32, v: [f32; 8]| {
        let pair = |i: usize| R::combine(v[i], v[i + 1]);
        let quad = |i: usize| R::combine(pair(i), pair(i + 2));
        R::combine(acc, R::combine(quad(0), quad(4)))
    };
    let mut acc = R::IDENTITY;
    let n8 = n / 8;
    let mut i = first;
    while i + 3 * step < n8 {
        let mut v = [[0.0f32; 8]; 4];
        unroll!(u in [0, 1, 2, 3] => { v[u] = F::load8(x.add(8 * (i + u * step)), 4); });
        unroll!(u in [0, 1, 2, 3] => { acc = fold8(acc, v[u]); });
        i += 4 * step;
    }
    while i < n8 {
        acc = fold8(acc, F::load8(x.add(8 * i), 4));
        i += step;
    }
    let t = 8 * n8 + first;
    if t < n {
        acc = R::combine(acc, F::load(x.add(t)));
    }
    acc
}
