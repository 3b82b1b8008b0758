//! `rand_f32` and `randn_f32`: one Philox group of four outputs per thread and grid-stride step.
//! Floor: 4 B written per element.
use super::philox;
use crate::prelude::*;

#[inline(always)]
unsafe fn generate(out: *mut f32, n: usize, seed: u64, f: impl Fn(u64, u64) -> [f32; 4]) {
    let n4 = n / 4;
    for g in grid_stride(n.div_ceil(4)) {
        let v = f(seed, g as u64);
        if g < n4 {
            store_f32x4(out.add(4 * g), F32x4(v));
        } else {
            for (k, &x) in v.iter().enumerate().take(n - 4 * g) {
                store_f32(out.add(4 * g + k), x);
            }
        }
    }
}

/// Uniform floats in [0, 1), 24 random bits each.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn rand_f32(out: *mut f32, n: usize, seed: u64) {
    generate(out, n, seed, philox::uniform4)
}

/// Standard normal floats (Box–Muller over pairs of uniforms).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn randn_f32(out: *mut f32, n: usize, seed: u64) {
    generate(out, n, seed, philox::normal4)
}
