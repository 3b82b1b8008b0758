//! `dropout_f32`: `y = x · scale` where the element is kept, `x · 0` where dropped (NaN and ∞
//! stay NaN, as PyTorch's multiply by the mask). Element `i` is kept
//! when the uniform float `i` of Philox under `seed` (the same numbers as `rand_f32`, see
//! [`crate::random::philox`]) is ≥ `p`; the backward pass is the same kernel on `dy`, so the
//! mask is regenerated, never stored, and matches the CPU backend's bit for bit.
//!
//! Floor: 8 B per element (read, write) plus the Philox rounds (~40 integer multiplies per 4
//! elements): memory-bound; 2^26 elements → 0.18 ms at 3.0 TB/s.
//! Launch: one thread per group of 4 elements (one Philox call), 16-byte accesses; the last,
//! partial group element by element.
use crate::prelude::*;
use crate::random::philox;

/// Dropout of `n` elements with drop probability `p` and `scale = 1/(1 - p)` (from the host, so
/// both backends use the same f32).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn dropout_f32(
    x: *const f32,
    y: *mut f32,
    n: usize,
    seed: u64,
    p: f32,
    scale: f32,
) {
    let full = n / 4;
    for g in grid_stride(n.div_ceil(4)) {
        let u = philox::uniform4(seed, g as u64);
        let keep = |k: usize, v: f32| v * if u[k] >= p { scale } else { 0.0 };
        if g < full {
            let v = load_nc_f32x4(x.add(4 * g));
            store_f32x4(
                y.add(4 * g),
                F32x4([keep(0, v.0[0]), keep(1, v.0[1]), keep(2, v.0[2]), keep(3, v.0[3])]),
            );
        } else {
            for k in 0..n - 4 * g {
                store_f32(y.add(4 * g + k), keep(k, load_nc_f32(x.add(4 * g + k))));
            }
        }
    }
}
