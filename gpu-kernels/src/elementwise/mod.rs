//! Elementwise kernels: one pass, 16-byte loads and stores, a scalar tail for `n % 4`.
//!
//! Floor (per element, f32): a unary op reads 4 B and writes 4 B; a tensor-tensor binary op reads
//! 8 B and writes 4 B. At the H100's measured ~3.0 TB/s copy rate, 2^26 elements of `gelu` move
//! 512 MiB: about 0.18 ms; `add` at 2^28 moves 3 GiB: about 1.07 ms.
use crate::prelude::*;

pub mod binary;
pub mod fill;
pub mod unary;

/// `out[i] = f(x[i])` for `i < n`.
///
/// # Safety
/// `x` and `out` are 16-byte-aligned device buffers of at least `n` elements; `out` does not
/// overlap `x`.
#[inline(always)]
pub(crate) unsafe fn map1(x: *const f32, out: *mut f32, n: usize, f: impl Fn(f32) -> f32) {
    let n4 = n / 4;
    for i in grid_stride(n4) {
        store_f32x4(out.add(4 * i), load_nc_f32x4(x.add(4 * i)).map(&f));
    }
    let t = 4 * n4 + global_x();
    if t < n {
        store_f32(out.add(t), f(load_nc_f32(x.add(t))));
    }
}

/// `out[i] = f(a[i], b[i])` for `i < n`.
///
/// # Safety
/// As [`map1`], for `a`, `b` and `out`.
#[inline(always)]
pub(crate) unsafe fn map2(
    a: *const f32,
    b: *const f32,
    out: *mut f32,
    n: usize,
    f: impl Fn(f32, f32) -> f32,
) {
    let n4 = n / 4;
    for i in grid_stride(n4) {
        let (va, vb) = (load_nc_f32x4(a.add(4 * i)), load_nc_f32x4(b.add(4 * i)));
        store_f32x4(out.add(4 * i), va.zip(vb, &f));
    }
    let t = 4 * n4 + global_x();
    if t < n {
        store_f32(out.add(t), f(load_nc_f32(a.add(t)), load_nc_f32(b.add(t))));
    }
}
