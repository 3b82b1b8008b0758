//! `dropout_f32` (and `_f16`, `_bf16`: computed in f32, rounded once): `y = x · scale` where the element is kept, `x · 0` where dropped (NaN and ∞
//! stay NaN, as PyTorch's multiply by the mask). Element `i` is kept
//! when the 16-bit uniform `i` of Philox under `seed` (`philox::uniform8_16`: eight values a
//! Philox call, half of `rand_f32`'s rounds a value; see [`crate::random::philox`]) is ≥ `p`;
//! the backward pass is the same kernel on `dy`, so the
//! mask is regenerated, never stored, and matches the CPU backend's bit for bit. With a
//! `residual` (not null) the kernel adds it before the one rounding: `y = r + mask(x) · scale`, a
//! residual connection's dropout and add in one pass (12 B per f32 element instead of 20).
//!
//! Floor: 8 B per f32 element (read, write; 4 B for 16-bit) plus the Philox rounds (~40 integer
//! multiplies per 8 elements): memory-bound; 2^26 elements → 0.18 ms at 3.0 TB/s.
//! Launch: one thread per 8 values (one Philox call; two 16-byte vectors of f32 or one of 16-bit
//! values); the last, partial group element by element.
//!
//! `dropout_dev_*` read the seed from device memory instead (`seeds[1]`), where `dropout_advance`
//! put it: a CUDA graph replays launch arguments unchanged, so a seed that must change at every
//! replay has to live on the device and be advanced by a captured launch. Same masks as
//! `dropout_*` for the same seed.
use crate::prelude::*;
use crate::random::philox;

/// Dropout of `n` elements of format `F` with drop probability `p` and `scale = 1/(1 - p)` (from
/// the host, so both backends use the same f32), plus `residual` where it is not null. Each
/// thread takes 8 values and one Philox call: one 16-byte vector of 16-bit values, or two of f32.
#[inline(always)]
unsafe fn dropout<F: Float>(
    (x, residual, y): (*const F::Raw, *const F::Raw, *mut F::Raw),
    n: usize,
    seed: u64,
    p: f32,
    scale: f32,
) {
    let add = !residual.is_null();
    let full = n / 8;
    for g in grid_stride(n.div_ceil(8)) {
        let u = philox::uniform8_16(seed, g as u64);
        let keep = |k: usize, v: f32| v * if u[k] >= p { scale } else { 0.0 };
        let at = 8 * g;
        if g < full {
            let v = F::load8(x.add(at), 4);
            let r = if add { F::load8(residual.add(at), 4) } else { [0.0; 8] };
            let mut out = [0.0f32; 8];
            unroll!(k in [0, 1, 2, 3, 4, 5, 6, 7] => { out[k] = keep(k, v[k]) + r[k]; });
            F::store8(y.add(at), 4, out);
        } else {
            for k in 0..n - at {
                let r = if add { F::load(residual.add(at + k)) } else { 0.0 };
                F::store(y.add(at + k), keep(k, F::load(x.add(at + k))) + r);
            }
        }
    }
}

macro_rules! dropout_kernels {
    ($($name:ident, $dev:ident: $f:ty;)*) => {$(
        /// Dropout, plus `residual` unless it is null; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const <$f as Float>::Raw, residual: *const <$f as Float>::Raw, y: *mut <$f as Float>::Raw,
            n: usize, seed: u64, p: f32, scale: f32,
        ) {
            grid_dependency_sync();
            dropout::<$f>((x, residual, y), n, seed, p, scale)
        }

        /// Dropout with the seed `seeds[1]` (see `dropout_advance`).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dev(
            x: *const <$f as Float>::Raw, residual: *const <$f as Float>::Raw, y: *mut <$f as Float>::Raw,
            n: usize, seeds: *const u64, p: f32, scale: f32,
        ) {
            grid_dependency_sync();
            dropout::<$f>((x, residual, y), n, *seeds.add(1), p, scale)
        }
    )*};
}

dropout_kernels! {
    dropout_f32, dropout_dev_f32: f32;
    dropout_f16, dropout_dev_f16: F16;
    dropout_bf16, dropout_dev_bf16: BF16;
}

/// One thread: `seeds[1] ← seeds[0]` (the seed of this forward pass and of its backward), then
/// `seeds[0] ← seeds[0] + 1` (the next pass's), as the host-seeded layer counts.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn dropout_advance(seeds: *mut u64) {
    grid_dependency_sync();
    if global_x() != 0 {
        return;
    }
    let next = *seeds;
    *seeds.add(1) = next;
    *seeds = next.wrapping_add(1);
}
