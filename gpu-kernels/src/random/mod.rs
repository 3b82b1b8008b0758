//! Counter-based random numbers: `rand_f32` (uniform in [0, 1)) and `randn_f32` (standard normal).
//!
//! Element `i` depends only on `(seed, i)`: Philox4x32-10 of counter `i / 4` under key `seed`
//! gives the four numbers of group `i / 4`. The arithmetic is in [`philox`], which the host's CPU
//! backend compiles too, so both backends produce the same bits.
//! Floor: 4 B written per element; the 10 Philox rounds are ~40 integer multiplies per 4 outputs.
use crate::prelude::*;

pub mod philox;

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
