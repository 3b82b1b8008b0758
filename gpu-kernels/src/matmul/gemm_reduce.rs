//! The second kernel of a split-K GEMM: `out = act(alpha · Σ_s ws[s] + beta · C + bias)`, the
//! slices added in order (the same result on every run, no atomics).
//!
//! Floor: bytes, `4·slices·M·N` read (mostly from L2, where the GEMM has just written them) plus
//! the output and C. (128, 8192) × 4 slices: 16 MiB, ≥ 5 µs at HBM speed, beside ≥ 330 µs of f32
//! GEMM.
//!
//! Each thread adds four adjacent outputs (16-byte loads of every slice, one vector store) when
//! [`gemm_reduce_per_thread`] allows, else one; it issues four slices' loads before adding them
//! so that their latencies overlap, and adds in slice order either way. Launch: block
//! `GEMM_REDUCE_THREADS`, grid `(⌈M·N / (per_thread · GEMM_REDUCE_THREADS)⌉, 1, batch)`.
use super::{epilogue, GemmElem, F32};
use crate::prelude::*;
use crate::shapes::gemm_reduce_per_thread;

/// Σ_s `load(s)` in slice order, four slices' loads in flight at a time.
#[inline(always)]
fn sum_slices<T: Copy>(slices: usize, load: impl Fn(usize) -> T, add: impl Fn(&mut T, T), zero: T) -> T {
    let mut v = zero;
    let mut s = 0;
    while s + 4 <= slices {
        let parts = [load(s), load(s + 1), load(s + 2), load(s + 3)];
        for p in parts {
            add(&mut v, p);
        }
        s += 4;
    }
    while s < slices {
        add(&mut v, load(s));
        s += 1;
    }
    v
}

#[inline(always)]
unsafe fn reduce<E: GemmElem>(
    ws: *const f32,
    (c, bias, out): (*const E::Elem, *const E::Elem, *mut E::Elem),
    (m, n, slices, stride_c): (usize, usize, usize, usize),
    (alpha, beta, activation): (f32, f32, u32),
) {
    let batch = block_z();
    let mn = m * n;
    let per_thread = gemm_reduce_per_thread(mn, out as u64, core::mem::size_of::<E::Elem>());
    let idx = global_x() * per_thread;
    if idx >= mn {
        return;
    }
    let parts = ws.add(batch * slices * mn + idx);
    let has_c = !c.is_null() && beta != 0.0;
    let finish = |v: f32, i: usize| {
        let beta_c = if has_c { beta * E::load(c.add(batch * stride_c + i)) } else { 0.0 };
        let b = if bias.is_null() { 0.0 } else { E::load(bias.add(i % n)) };
        epilogue(v, alpha, beta_c, b, activation)
    };
    let out = out.add(batch * mn + idx);
    if per_thread == 4 {
        let sum = sum_slices(
            slices,
            |s| load_nc_f32x4(parts.add(s * mn)),
            |v, p| *v = v.zip(p, |a, b| a + b),
            F32x4([0.0; 4]),
        );
        let [a, b, c, d] = sum.0;
        E::store_quad(out, [finish(a, idx), finish(b, idx + 1), finish(c, idx + 2), finish(d, idx + 3)]);
    } else {
        let sum = sum_slices(slices, |s| load_nc_f32(parts.add(s * mn)), |v, p| *v += p, 0.0);
        E::store(out, finish(sum, idx));
    }
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
