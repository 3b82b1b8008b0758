//! Reductions: over the whole tensor (`all`) and along the last axis (`rows`).
//!
//! Deterministic: each thread folds a fixed set of elements in a fixed order, warps combine by
//! butterflies, blocks by a fixed tree, and the grid shape depends only on the size and the device,
//! so the same input gives the same bits on every run.
use crate::prelude::*;

pub mod all;
pub mod rows;

/// Fold `x[0..n]`, this thread's strided share of it (`first`, `first + step`, ... in 16-byte
/// vectors, four loads in flight at a time, then the `n % 4` tail).
///
/// # Safety
/// `x` is a 16-byte-aligned device buffer of at least `n` elements.
#[inline(always)]
pub(crate) unsafe fn fold_strided<R: ReduceOp>(x: *const f32, n: usize, first: usize, step: usize) -> f32 {
    let fold4 = |acc: f32, v: F32x4| {
        let [a, b, c, d] = v.0;
        R::combine(acc, R::combine(R::combine(a, b), R::combine(c, d)))
    };
    let mut acc = R::IDENTITY;
    let n4 = n / 4;
    let mut i = first;
    while i + 3 * step < n4 {
        let mut v = [F32x4([0.0; 4]); 4];
        unroll!(u in [0, 1, 2, 3] => { v[u] = load_nc_f32x4(x.add(4 * (i + u * step))); });
        unroll!(u in [0, 1, 2, 3] => { acc = fold4(acc, v[u]); });
        i += 4 * step;
    }
    while i < n4 {
        acc = fold4(acc, load_nc_f32x4(x.add(4 * i)));
        i += step;
    }
    let t = 4 * n4 + first;
    if t < n {
        acc = R::combine(acc, load_nc_f32(x.add(t)));
    }
    acc
}

/// Fold `x[0..n]` one element at a time (rows whose start is not 16-byte aligned).
///
/// # Safety
/// `x` is a device buffer of at least `n` elements.
#[inline(always)]
pub(crate) unsafe fn fold_strided_scalar<R: ReduceOp>(
    x: *const f32,
    n: usize,
    first: usize,
    step: usize,
) -> f32 {
    let mut acc = R::IDENTITY;
    let mut i = first;
    while i < n {
        acc = R::combine(acc, load_nc_f32(x.add(i)));
        i += step;
    }
    acc
}
