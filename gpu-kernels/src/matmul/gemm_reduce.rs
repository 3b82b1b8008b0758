//! The second kernel of a split-K GEMM: `out = act(alpha · Σ_s ws[s] + beta · C + bias)`, the
//! slices added in order (the same result on every run, no atomics).
//!
//! Floor: bytes, `4·slices·M·N` read (mostly from L2, where the GEMM has just written them) plus
//! the output and C. (128, 8192) × 4 slices: 16 MiB, ≥ 5 µs at HBM speed, beside ≥ 330 µs of f32
//! GEMM.
//!
//! One thread per output element. Launch: block `GEMM_REDUCE_THREADS`, grid
//! `(⌈M·N / GEMM_REDUCE_THREADS⌉, 1, batch)`.
use super::{epilogue, GemmElem, F32};
use crate::prelude::*;

#[inline(always)]
unsafe fn reduce<E: GemmElem>(
    ws: *const f32,
    (c, bias, out): (*const E::Elem, *const E::Elem, *mut E::Elem),
    (m, n, slices, stride_c): (usize, usize, usize, usize),
    (alpha, beta, activation): (f32, f32, u32),
) {
    let (idx, batch) = (global_x(), block_z());
    let mn = m * n;
    if idx >= mn {
        return;
    }
    let parts = ws.add(batch * slices * mn + idx);
    let mut v = 0.0f32;
    for s in 0..slices {
        v += load_nc_f32(parts.add(s * mn));
    }
    let has_c = !c.is_null() && beta != 0.0;
    let beta_c = if has_c { beta * E::load(c.add(batch * stride_c + idx)) } else { 0.0 };
    let b = if bias.is_null() { 0.0 } else { E::load(bias.add(idx % n)) };
    E::store(out.add(batch * mn + idx), epilogue(v, alpha, beta_c, b, activation));
}

macro_rules! reduce_kernels {
    ($($name:ident: $e:ty, $elem:ty;)*) => {$(
        /// Split-K reduction; see the module documentation. `ws` is `[batch][slices][M][N]` f32,
        /// `c` (batch `z` at `z·stride_c`) and `out` `[M, N]` per batch; `c` and `bias` may be null.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            ws: *const f32, c: *const $elem, bias: *const $elem, out: *mut $elem, m: usize, n: usize,
            slices: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32,
        ) {
            reduce::<$e>(ws, (c, bias, out), (m, n, slices, stride_c), (alpha, beta, activation))
        }
    )*};
}

reduce_kernels! {
    gemm_reduce_f32: F32, f32;
    gemm_reduce_f16: F16, u16;
    gemm_reduce_bf16: BF16, u16;
}
