//! 2-D convolution (NCHW, f32) as implicit GEMMs: each op gathers its GEMM operands straight from
//! the convolution's tensors inside the tile loaders (no im2col buffer), on the SIMT f32 mainloop
//! of `matmul::gemm_f32` or the TF32 `mma.sync` mainloop of `matmul::gemm_tf32`. On Hopper, TF32
//! at stride 1 runs instead on the `wgmma` GEMM's pipeline with TMA boxes read from the tensors
//! (`forward_wgmma`: x in NHWC; `backward_weight_wgmma`: x and dy in NCHW; the data gradient as
//! the forward with the flipped filters).
//!
//! | op | M | N | K (reduced) | A (gathered along M) | B (gathered along K) |
//! | --- | --- | --- | --- | --- | --- |
//! | forward | N·P·Q | K | C·R·S | x (im2col) | w `[K, C·R·S]` |
//! | backward data | N·H·W | C | K·R·S | dy (taps that land on an output) | w |
//! | backward weight | C·R·S | K | N·P·Q | x (im2col)ᵀ | dy |
//!
//! At stride 1 the backward data gradient is the forward of dy with the filter bank flipped
//! (`conv2d_flip_weights_f32`); its own kernels serve strided convolutions. When C is far below
//! the tile width or the stride skips most taps, it runs instead as a plain batched GEMM
//! `cols = Wᵀ · dy` and the gather `conv2d_col2im_f32`.
//! When the tile grid is too small to fill the GPU (always for the weight gradient), the
//! reduction is split over `gridDim.z`: split z writes its partial sums to `out[z]` and
//! `conv2d_split_sum_f32` adds the splits in order (so results do not depend on timing), with the
//! forward's bias.
//! Both mainloops fix the four A rows a thread loads for the whole reduction, so each op turns
//! them into image coordinates once; per k-step only the reduced index is decomposed.
//! Launch (every implicit-GEMM kernel): grid `(⌈M/BM⌉, ⌈N/BN⌉, splits)`; SIMT kernels
//! `gemm_threads(tile)` threads and `gemm_shared_bytes(tile)` bytes of dynamic shared memory,
//! TF32 kernels `MMA_THREADS` and `MMA_SHARED_BYTES`.
#[cfg(feature = "conv")]
pub mod backward_bias;
#[cfg(feature = "conv")]
pub mod backward_data;
#[cfg(feature = "conv")]
pub mod backward_weight;
#[cfg(feature = "matmul_sm90a")]
pub mod backward_weight_wgmma;
#[cfg(feature = "conv")]
pub mod col2im;
#[cfg(feature = "conv")]
pub mod flip_weights;
#[cfg(feature = "conv")]
pub mod forward;
#[cfg(feature = "matmul_sm90a")]
pub mod forward_wgmma;
#[cfg(feature = "conv")]
pub mod shift_rows;

use crate::matmul::gemm_f32::{simt_a_rows, simt_coords, simt_mainloop};
use crate::matmul::gemm_tf32::{mma_k_step, Operand};
use crate::matmul::{mma_epilogue, mma_mainloop};
use crate::prelude::*;
use crate::shapes::{
    FastDiv, ACTIVATION_NONE, GEMM_TILE_LARGE, GEMM_TILE_MEDIUM, GEMM_TILE_SMALL, GEMM_TM, MMA_BK,
    MMA_OPERAND_FLOATS, MMA_THREADS, MMA_TILE,
};

/// The convolution's sizes: x `[n, c, h, w]`, w `[k, c, r, s]`, y `[n, k, p, q]`; stride, padding
/// and dilation per axis. 32-bit: the host refuses tensors of 2^31 elements or more, and 32-bit
/// division is several times cheaper than 64-bit on the GPU.
#[derive(Clone, Copy)]
pub(crate) struct Geometry {
    pub n: u32,
    pub c: u32,
    pub h: u32,
    pub w: u32,
    pub k: u32,
    pub r: u32,
    pub s: u32,
    pub p: u32,
    pub q: u32,
    pub stride: (u32, u32),
    pub pad: (u32, u32),
    pub dilation: (u32, u32),
}

/// The offset of a missing operand element (outside the image, a padding tap, past the end):
/// reads as zero.
pub(crate) const ZERO: u32 = u32::MAX;

/// One implicit GEMM `out[m, n] = Σ_k A[m, k] · B[k, n]` whose operands live in the
/// convolution's tensors.
pub(crate) trait ImplicitGemm {
    /// What a thread knows about its four A rows, computed once.
    type Rows: Copy;
    /// `(M, N, K)`.
    fn dims(&self) -> (usize, usize, usize);
    /// The tensors A and B are gathered from.
    fn sources(&self) -> (*const f32, *const f32);
    /// Facts about rows `m..m + 4` of A.
    fn rows(&self, m: u32) -> Self::Rows;
    /// Offsets in A's source of `A[m + i, k]`, `i < 4` (`ZERO` where the element is 0); `k < K`.
    fn a(&self, rows: &Self::Rows, k: u32) -> [u32; 4];
    /// Offsets in B's source of `B[k + i, n]`, `i < 4` (`ZERO` where the element is 0 or past K).
    fn b(&self, k: u32, n: u32) -> [u32; 4];
    /// Where `out[m, n]` goes (`m < M`, `n < N`). Outputs `m..m + 4` of a column are contiguous
    /// when `m` and [`ImplicitGemm::run`] are multiples of 4.
    ///
    /// # Safety
    /// The output buffer holds the op's whole result.
    unsafe fn out(&self, m: u32, n: u32) -> *mut f32;
    /// Rows of one contiguous run of the output (a plane of the output tensor).
    fn run(&self) -> u32;
    /// Added to every output of column `n` (the forward's bias).
    fn bias(&self, _n: u32) -> f32 {
        0.0
    }
    /// B as a plain row-major `[N, K]` matrix, for ops that have one: unsplit launches then load
    /// its tiles as 16-byte vectors.
    fn dense_b(&self) -> Option<Operand> {
        None
    }
}

/// The reduction range of this block: `gridDim.z` splits of `k_chunk` (a multiple of the k-step).
#[inline(always)]
fn k_range(k: usize, k_chunk: usize) -> (usize, usize) {
    let begin = block_z() * k_chunk;
    (begin, k.min(begin + k_chunk))
}

/// `p` with the elements at or past `k_end` (element `i` is at `k + i`) zeroed.
#[inline(always)]
fn clip(mut p: [u32; 4], k: usize, k_end: usize) -> [u32; 4] {
    unroll!(i in [0, 1, 2, 3] => {
        if k + i >= k_end {
            p[i] = ZERO;
        }
    });
    p
}

/// The four elements at offsets `p` of `src` (zeros at `ZERO`).
#[inline(always)]
unsafe fn gather(src: *const f32, p: [u32; 4]) -> F32x4 {
    let mut v = [0.0f32; 4];
    unroll!(i in [0, 1, 2, 3] => {
        if p[i] != ZERO {
            v[i] = load_nc_f32(src.add(p[i] as usize));
        }
    });
    F32x4(v)
}

/// Write `out[m, n] = v` (plus the bias).
#[inline(always)]
unsafe fn store1<G: ImplicitGemm>(g: &G, m: u32, n: u32, v: f32) {
    store_f32(g.out(m, n), v + g.bias(n));
}

/// Write `out[m + i, n] = v[i]` for the rows `< rows`: one 16-byte store when the four are
/// contiguous and aligned.
#[inline(always)]
unsafe fn store4<G: ImplicitGemm>(g: &G, (m, n): (u32, u32), rows: u32, v: [f32; 4]) {
    let bias = g.bias(n);
    let first = g.out(m, n);
    if m % 4 == 0 && g.run() % 4 == 0 && m + 3 < rows && first as usize % 16 == 0 {
        store_f32x4(first, F32x4(v).map(|x| x + bias));
    } else {
        unroll!(i in [0, 1, 2, 3] => {
            if m + (i as u32) < rows {
                store_f32(g.out(m + i as u32, n), v[i] + bias);
            }
        });
    }
}

/// The SIMT f32 implicit GEMM of one BM×BN tile.
#[inline(always)]
pub(crate) unsafe fn simt<G: ImplicitGemm, const BM: usize, const BN: usize>(g: &G, k_chunk: usize) {
    let (m, n, k) = g.dims();
    let (m0, n0) = (block_x() * BM, block_y() * BN);
    let (k_begin, k_end) = k_range(k, k_chunk);
    let (src_a, src_b) = g.sources();
    let rows = g.rows((m0 + simt_a_rows::<BM>()) as u32);
    let load_a = |kk: usize, _m: usize| {
        let kg = k_begin + kk;
        if kg < k_end {
            gather(src_a, g.a(&rows, kg as u32))
        } else {
            F32x4([0.0; 4])
        }
    };
    let dense_b = g.dense_b().filter(|b| b.vector_ok && k_chunk >= k);
    let load_b = |kk: usize, col: usize| {
        let kg = k_begin + kk;
        match dense_b {
            Some(b) if col < b.rows && kg + 3 < b.k => load_nc_f32x4(b.src.add(col * b.ld + kg)),
            _ => gather(src_b, clip(g.b(kg as u32, col as u32), kg, k_end)),
        }
    };
    let acc =
        simt_mainloop::<BM, BN, GEMM_TM, true, true>(k_end.saturating_sub(k_begin), (m0, n0), load_a, load_b);
    // Each thread holds four consecutive rows of a column per half tile: contiguous outputs.
    unroll!(h in [0, 1] => {
        unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] => {
            let (row, col) = simt_coords::<BM, BN, GEMM_TM>(h * 4, j);
            if n0 + col < n {
                let v = [acc[h * 4][j], acc[h * 4 + 1][j], acc[h * 4 + 2][j], acc[h * 4 + 3][j]];
                store4(g, ((m0 + row) as u32, (n0 + col) as u32), m as u32, v);
            }
        });
    });
}

/// Issue `cp.async` copies of the four elements at offsets `p` of `src` to consecutive shared
/// words at `dst` (zero-filled at `ZERO`).
#[inline(always)]
unsafe fn copy4(dst: u32, src: *const f32, p: [u32; 4]) {
    unroll!(i in [0, 1, 2, 3] => {
        let ok = p[i] != ZERO;
        cp_async_4(dst + 4 * i as u32, src.add(if ok { p[i] as usize } else { 0 }), if ok { 4 } else { 0 });
    });
}

/// The TF32 tensor-core implicit GEMM of one 128×128 tile: A staged `[BK][128 + 8]` (rows
/// contiguous), B `[128][BK + 4]` (k contiguous), 4-byte `cp.async` copies.
#[inline(always)]
pub(crate) unsafe fn tf32<G: ImplicitGemm>(g: &G, k_chunk: usize) {
    const BM: usize = MMA_TILE.0;
    const BN: usize = MMA_TILE.1;
    const BK: usize = MMA_BK;
    let t = thread_x();
    let (m, n, k) = g.dims();
    let (m0, n0) = (block_x() * BM, block_y() * BN);
    let (k_begin, k_end) = k_range(k, k_chunk);
    let layout = |k_contiguous| Operand {
        src: core::ptr::null(),
        ld: 0,
        rows: 0,
        k: 0,
        k_contiguous,
        vector_ok: false,
    };
    let (layout_a, layout_b) = (layout(false), layout(true));
    let smem = dynamic_shared::<f32>();
    let stage_a = |s: usize| smem.add(s * 2 * MMA_OPERAND_FLOATS);
    let stage_b = |s: usize| smem.add((s * 2 + 1) * MMA_OPERAND_FLOATS);
    // A's chunks of this thread: rows `t % (BM/4) · 4 ..+4`, k `t / (BM/4) + i·THREADS/(BM/4)`.
    let rows = g.rows((m0 + t % (BM / 4) * 4) as u32);
    let (src_a, src_b) = g.sources();
    let dense_b = g.dense_b().filter(|_| k_chunk >= k);
    let load = #[inline(always)]
    |s: usize, step: usize| {
        let k0 = k_begin + step * BK;
        let (tile_a, tile_b) = (shared_addr(stage_a(s)), shared_addr(stage_b(s)));
        unroll!(i in [0, 1, 2, 3] => {
            let chunk = t + i * MMA_THREADS;
            let (kk, row) = (chunk / (BM / 4), chunk % (BM / 4) * 4);
            let p = if k0 + kk < k_end { g.a(&rows, (k0 + kk) as u32) } else { [ZERO; 4] };
            // SAFETY: the offsets stay inside stage `s`'s A tile.
            unsafe { copy4(tile_a + 4 * layout_a.offset(row, kk) as u32, src_a, p) };
            if dense_b.is_none() {
                let (col, kk) = (chunk / (BK / 4), chunk % (BK / 4) * 4);
                let p = clip(g.b((k0 + kk) as u32, (n0 + col) as u32), k0 + kk, k_end);
                // SAFETY: as above, B tile.
                unsafe { copy4(tile_b + 4 * layout_b.offset(col, kk) as u32, src_b, p) };
            }
        });
        if let Some(b) = dense_b {
            // SAFETY: stage `s`'s B tile; `b` describes the whole of B (an unsplit op).
            unsafe { b.load(tile_b, n0, k0, t) };
        }
    };
    let (wm0, wn0) = crate::matmul::warp_origin();
    // A warp whose piece of the tile lies wholly outside the output only loads (N = 64 layers
    // leave half the warps so; `warp_origin` spreads the other half over every scheduler).
    let inside = m0 + wm0 < m && n0 + wn0 < n;
    let compute = |s: usize, acc: &mut _| {
        if inside {
            // SAFETY: stage `s` holds both operand tiles.
            unsafe { mma_k_step(&layout_a, &layout_b, stage_a(s), stage_b(s), acc) }
        }
    };
    let acc = mma_mainloop(k_end.saturating_sub(k_begin).div_ceil(BK), load, compute);
    let columns = FastDiv::new(n as u32);
    mma_epilogue(
        &acc,
        (m0 + wm0, n0 + wn0),
        (m, n),
        (1.0, ACTIVATION_NONE),
        |_| 0.0,
        |_| 0.0,
        |idx, v| {
            let (row, col) = columns.divmod(idx as u32);
            // SAFETY: `idx = row·n + col` of an element inside the output (< 2^31).
            unsafe { store1(g, row, col, v) }
        },
    );
}

/// The kernels of one implicit-GEMM op: SIMT at three tile sizes, and TF32. Arguments: `a` and
/// `b` the op's two inputs, `bias` (may be null), `out`, the geometry, and `k_chunk` (the
/// reduction length per `gridDim.z` split).
macro_rules! implicit_gemm_kernels {
    ($op:ident: $large:ident, $medium:ident, $small:ident, $tf32:ident) => {
        implicit_gemm_kernels!(@one $op, $large, simt_large);
        implicit_gemm_kernels!(@one $op, $medium, simt_medium);
        implicit_gemm_kernels!(@one $op, $small, simt_small);
        implicit_gemm_kernels!(@one $op, $tf32, tf32);
    };
    (@one $op:ident, $name:ident, $body:ident) => {
        /// Implicit-GEMM convolution kernel; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            a: *const f32, b: *const f32, bias: *const f32, out: *mut f32,
            n: usize, c: usize, h: usize, w: usize, k: usize, r: usize, s: usize, p: usize, q: usize,
            stride_h: usize, stride_w: usize, pad_h: usize, pad_w: usize, dil_h: usize, dil_w: usize,
            k_chunk: usize,
        ) {
            let geometry = $crate::conv::Geometry {
                n: n as u32, c: c as u32, h: h as u32, w: w as u32, k: k as u32, r: r as u32,
                s: s as u32, p: p as u32, q: q as u32,
                stride: (stride_h as u32, stride_w as u32), pad: (pad_h as u32, pad_w as u32),
                dilation: (dil_h as u32, dil_w as u32),
            };
            let op = $op::new(a, b, bias, out, geometry);
            $crate::conv::$body(&op, k_chunk)
        }
    };
}
pub(crate) use implicit_gemm_kernels;

#[inline(always)]
pub(crate) unsafe fn simt_large<G: ImplicitGemm>(g: &G, k_chunk: usize) {
    simt::<G, { GEMM_TILE_LARGE.0 }, { GEMM_TILE_LARGE.1 }>(g, k_chunk)
}
#[inline(always)]
pub(crate) unsafe fn simt_medium<G: ImplicitGemm>(g: &G, k_chunk: usize) {
    simt::<G, { GEMM_TILE_MEDIUM.0 }, { GEMM_TILE_MEDIUM.1 }>(g, k_chunk)
}
#[inline(always)]
pub(crate) unsafe fn simt_small<G: ImplicitGemm>(g: &G, k_chunk: usize) {
    simt::<G, { GEMM_TILE_SMALL.0 }, { GEMM_TILE_SMALL.1 }>(g, k_chunk)
}
