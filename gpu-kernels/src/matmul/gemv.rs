//! Few-row GEMM: `out = act(alpha · A · op(B) + beta · C + bias)` with A `[M, K]` of at most
//! `ROWS` rows (4 or 16 by kernel suffix), any N and K, batched over `gridDim.z`.
//!
//! Floor: the bytes of B, read once. (1, 8192, 8192) reads 256 MiB in f32 (≥ 80 µs at the
//! H100's 3.35 TB/s, ~88 µs at the ~3.05 TB/s a copy reaches) and 128 MiB in bf16 (≥ 40 µs);
//! A, C and the output are at most 16 rows. The FMAs (M per element of B) stay below the FP32
//! pipes' rate up to M = 16 in f32; in 16-bit at M = 16 they need ~80% of it.
//!
//! A's rows of the block's k-slice go through shared memory as f32, a piece of at most
//! `GEMV_A_FLOATS` at a time (`gemv_piece`), so every use of A after the first is a shared read.
//! B `[N, K]` (`_nt`, a linear layer's weight): each warp owns `GEMV_COLS_NT` columns; its lanes
//! walk the piece in 16-byte vectors of those columns (two per column in flight), each multiplied
//! by the same k of every row of A, and one butterfly per row and column sums the lanes at the end.
//! B `[K, N]` (`_nn`): each lane owns the columns of one 16-byte vector, a warp 32 vectors; the
//! block's 8 warps take interleaved rows k of the piece (8 rows in flight per warp, 4 for 16
//! rows), A comes as shared-memory broadcasts, and the warps' sums meet in shared memory, added
//! in warp order. 16 rows of f32 run two blocks per SM (128 registers, build.rs) and each warp
//! takes 4 consecutive rows k, so that one 16-byte broadcast brings A's 4 values of a row.
//!
//! `gridDim.y` slices of `k_chunk` elements of k: with one slice the kernel applies the epilogue;
//! with several each block writes its raw f32 sums to `ws[batch][slice][M][N]` and
//! `gemm_reduce_*` adds the slices in order, then applies it (deterministic, no atomics).
//! Launch: block `GEMV_THREADS`, grid `(⌈N / (8·GEMV_COLS_NT)⌉ or ⌈N / (32·vec)⌉, slices,
//! batch)`, dynamic shared memory `4 · M · gemv_piece(M, k_chunk, vec).1` bytes; `k_chunk` a multiple of 32 vectors when `_nt`.
use super::{GemmElem, Gemv, F32};
use crate::prelude::*;
use crate::shapes::{gemv_piece, GEMV_COLS_NT as COLS, GEMV_ROWS, GEMV_ROWS_SMALL, GEMV_THREADS};

const WARPS: usize = GEMV_THREADS / 32;

shared_array!(static GEMV_PARTIAL: [f32; 8 * 32 * 8]);

#[inline(always)]
fn aligned16<T>(p: *const T) -> bool {
    p as usize % 16 == 0
}

/// The row of A that row `r` of a `ROWS`-row kernel reads in the mainloop for `m` rows, if it
/// runs. 16 rows of f32 run all 16 (rows past `m` read row `m - 1` and are never stored): a branch
/// per row kept ptxas from hoisting the next row's shared loads of A above the previous row's
/// FMAs, and the few warps of a 16-row block did not hide that latency (perf-notes). The 4-row
/// kernels keep the branch (at M = 1 it saves 3 of 4 FMAs), and 16-bit ones were not measured.
#[inline(always)]
fn a_row<E: GemmElem, const ROWS: usize>(r: usize, m: usize) -> Option<usize> {
    if r >= ROWS {
        None
    } else if ROWS > GEMV_ROWS_SMALL && E::VEC == 4 {
        Some(r.min(m.saturating_sub(1)))
    } else if r < m {
        Some(r)
    } else {
        None
    }
}

/// Stage rows `0..m` of A over k in `[lo, hi)` into `a_s` (row stride `ld`, as f32), with four
/// loads per thread in flight; the block's barriers around it are the caller's.
#[inline(always)]
unsafe fn stage_a<E: GemmElem>(
    g: &Gemv<E::Elem>,
    a: *const E::Elem,
    vector: bool,
    (lo, hi): (usize, usize),
    (a_s, ld): (*mut f32, usize),
) {
    let len = hi - lo;
    let per_row = len.div_ceil(E::VEC);
    let total = g.m * per_row;
    let mut i = thread_x();
    while i < total {
        let mut v = [[0.0f32; 8]; 4];
        unroll!(u in [0, 1, 2, 3] => {
            let j = i + u * GEMV_THREADS;
            if j < total {
                let (r, c) = (j / per_row, j % per_row * E::VEC);
                v[u] = E::load_run(a.add(r * g.k + lo + c), vector, len - c);
            }
        });
        unroll!(u in [0, 1, 2, 3] => {
            let j = i + u * GEMV_THREADS;
            if j < total {
                let (r, c) = (j / per_row, j % per_row * E::VEC);
                // Whole vectors, zeros past `hi`: the `_nt` tail multiplies them by B's zeros
                // (stale shared memory could hold NaN).
                unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    if e < E::VEC {
                        *a_s.add(r * ld + c + e) = v[u][e];
                    }
                });
            }
        });
        i += 4 * GEMV_THREADS;
    }
}

/// The block's k-slice in pieces whose rows of A fit in shared memory: `body(lo, hi, a_s, ld)`
/// runs once per piece, after A's piece is staged at `a_s` (row stride `ld`) for every thread.
#[inline(always)]
unsafe fn for_each_piece<E: GemmElem>(
    g: &Gemv<E::Elem>,
    a: *const E::Elem,
    (k_lo, k_hi): (usize, usize),
    mut body: impl FnMut(usize, usize, *const f32, usize),
) {
    let vector = g.k % E::VEC == 0 && aligned16(a);
    let (piece, ld) = gemv_piece(g.m, g.k_chunk, E::VEC);
    let a_s = dynamic_shared::<f32>();
    let mut lo = k_lo;
    while lo < k_hi {
        let hi = (lo + piece).min(k_hi);
        // Every warp is done with the previous piece before it is overwritten.
        sync_threads();
        stage_a::<E>(g, a, vector, (lo, hi), (a_s, ld));
        sync_threads();
        body(lo, hi, a_s, ld);
        lo = hi;
    }
}

/// B `[N, K]`: see the module documentation.
#[inline(always)]
unsafe fn gemv_nt<E: GemmElem, const ROWS: usize>(g: Gemv<E::Elem>) {
    let (batch, slice, k_lo, k_hi) = g.slice();
    let (a, b) = (g.a.add(batch * g.stride_a), g.b.add(batch * g.stride_b));
    let n0 = (block_x() * WARPS + warp_in_block()) * COLS;
    let vector = g.k % E::VEC == 0 && aligned16(b);
    let mut acc = [[0.0f32; COLS]; ROWS];
    let stride = 32 * E::VEC;
    // Inlined by force: a closure left as a call would keep the accumulators in local memory.
    let piece = #[inline(always)]
    |lo: usize, hi: usize, a_s: *const f32, ld: usize| {
        let mut kk = lo + lane() * E::VEC;
        // Two vectors of each column in flight per lane: the loads of both go out before any FMA.
        while kk < hi {
            let mut bv = [[[0.0f32; 8]; COLS]; 2];
            unroll!(u in [0, 1] => {
                let k = kk + u * stride;
                unroll!(c in [0, 1, 2, 3] => {
                    if k < hi && n0 + c < g.n {
                        bv[u][c] = E::load_run(b.add((n0 + c) * g.k + k), vector, hi - k);
                    }
                });
            });
            unroll!(u in [0, 1] => {
                let k = kk + u * stride;
                if k < hi {
                    unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                        if let Some(ar) = a_row::<E, ROWS>(r, g.m) {
                            let row = a_s.add(ar * ld + k - lo);
                            let high = if E::VEC == 8 { *(row.add(4) as *const F32x4) } else { F32x4([0.0; 4]) };
                            let halves = [*(row as *const F32x4), high];
                            unroll!(c in [0, 1, 2, 3] => {
                                unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] => {
                                    if j < E::VEC {
                                        acc[r][c] = fma(halves[j / 4].0[j % 4], bv[u][c][j], acc[r][c]);
                                    }
                                });
                            });
                        }
                    });
                }
            });
            kk += 2 * stride;
        }
    };
    for_each_piece::<E>(&g, a, (k_lo, k_hi), piece);
    unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
        if r < ROWS && r < g.m {
            unroll!(c in [0, 1, 2, 3] => {
                let v = warp_reduce::<Sum>(acc[r][c]);
                if lane() == c && n0 + c < g.n {
                    g.finish::<E>((batch, slice), (r, n0 + c), v);
                }
            });
        }
    });
}

/// B `[K, N]`: see the module documentation.
#[inline(always)]
unsafe fn gemv_nn<E: GemmElem, const ROWS: usize>(g: Gemv<E::Elem>) {
    // Rows of B each warp loads before it uses any (the bytes in flight that hide the latency);
    // 16 rows of 8 columns of accumulators leave registers for 4 (8 would spill), and so do 16
    // rows of f32 in the 128 registers of two blocks per SM.
    const DEPTH: usize = 8;
    let depth = if ROWS > GEMV_ROWS_SMALL { DEPTH / 2 } else { DEPTH };
    let (batch, slice, k_lo, k_hi) = g.slice();
    let (a, b) = (g.a.add(batch * g.stride_a), g.b.add(batch * g.stride_b));
    let col0 = (block_x() * 32 + lane()) * E::VEC;
    let cols = g.n.saturating_sub(col0);
    let w = warp_in_block();
    let vector = g.n % E::VEC == 0 && aligned16(b);
    let mut acc = [[0.0f32; 8]; ROWS];
    // 16 rows of f32: each warp takes 4 consecutive rows of B, so that one 16-byte shared load
    // brings a row of A's values for all 4 (a quarter of the shared loads).
    let quads = ROWS > GEMV_ROWS_SMALL && E::VEC == 4;
    let (first, apart) = if quads { (w * depth, 1) } else { (w, WARPS) };
    // Inlined by force, as in `gemv_nt`.
    let piece = #[inline(always)]
    |lo: usize, hi: usize, a_s: *const f32, ld: usize| {
        let mut kr = lo + first;
        while kr < hi {
            let mut bv = [[0.0f32; 8]; DEPTH];
            unroll!(u in [0, 1, 2, 3, 4, 5, 6, 7] => {
                let k = kr + u * apart;
                if u < depth && k < hi && cols > 0 {
                    bv[u] = E::load_run(b.add(k * g.n + col0), vector, cols);
                }
            });
            if quads {
                // Rows past `hi` add 0·0: B's are not loaded, and A's piece is zero to the end
                // of its last vector.
                unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                    if let Some(ar) = a_row::<E, ROWS>(r, g.m) {
                        let x = *(a_s.add(ar * ld + kr - lo) as *const F32x4);
                        unroll!(u in [0, 1, 2, 3] => {
                            unroll!(j in [0, 1, 2, 3] => {
                                acc[r][j] = fma(x.0[u], bv[u][j], acc[r][j]);
                            });
                        });
                    }
                });
                kr += depth * WARPS;
                continue;
            }
            unroll!(u in [0, 1, 2, 3, 4, 5, 6, 7] => {
                let k = kr + u * WARPS;
                if u < depth && k < hi {
                    unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                        if let Some(ar) = a_row::<E, ROWS>(r, g.m) {
                            let x = *a_s.add(ar * ld + k - lo);
                            unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] => {
                                if j < E::VEC {
                                    acc[r][j] = fma(x, bv[u][j], acc[r][j]);
                                }
                            });
                        }
                    });
                }
            });
            kr += depth * WARPS;
        }
    };
    for_each_piece::<E>(&g, a, (k_lo, k_hi), piece);
    let partial = shared_ptr(&raw mut GEMV_PARTIAL);
    let mine = partial.add((w * 32 + lane()) * 8);
    unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
        if r < ROWS && r < g.m {
            unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] => {
                if j < E::VEC {
                    *mine.add(j) = acc[r][j];
                }
            });
            sync_threads();
            if w == 0 {
                unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    if j < E::VEC && j < cols {
                        let mut v = 0.0f32;
                        for other in 0..WARPS {
                            v += *partial.add((other * 32 + lane()) * 8 + j);
                        }
                        g.finish::<E>((batch, slice), (r, col0 + j), v);
                    }
                });
            }
            // The next row overwrites the partials warp 0 has just read.
            sync_threads();
        }
    });
}

macro_rules! gemv_kernels {
    ($($name:ident: $e:ty, $elem:ty, $tb:literal, $rows:expr;)*) => {$(
        /// Few-row GEMM; see the module documentation. Per batch `a` is `[M, K]`, `b` is
        /// `[K, N]` (`[N, K]` when `_nt`), `c` and `out` are `[M, N]`, row-major; batch `z`
        /// starts at `z·stride_*` (0 repeats one matrix); `c`, `bias` and `ws` may be null.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            a: *const $elem, b: *const $elem, c: *const $elem, bias: *const $elem, out: *mut $elem,
            ws: *mut f32, m: usize, n: usize, k: usize, k_chunk: usize, stride_a: usize,
            stride_b: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32,
        ) {
            let g = Gemv {
                a, b, c, bias, out, ws, m, n, k, k_chunk, stride_a, stride_b, stride_c, alpha, beta, activation,
            };
            if $tb {
                gemv_nt::<$e, { $rows }>(g)
            } else {
                gemv_nn::<$e, { $rows }>(g)
            }
        }
    )*};
}

gemv_kernels! {
    gemv_f32_nn_r4: F32, f32, false, GEMV_ROWS_SMALL;
    gemv_f32_nt_r4: F32, f32, true, GEMV_ROWS_SMALL;
    gemv_f32_nn_r16: F32, f32, false, GEMV_ROWS;
    gemv_f32_nt_r16: F32, f32, true, GEMV_ROWS;
    gemv_f16_nn_r4: F16, u16, false, GEMV_ROWS_SMALL;
    gemv_f16_nt_r4: F16, u16, true, GEMV_ROWS_SMALL;
    gemv_f16_nn_r16: F16, u16, false, GEMV_ROWS;
    gemv_f16_nt_r16: F16, u16, true, GEMV_ROWS;
    gemv_bf16_nn_r4: BF16, u16, false, GEMV_ROWS_SMALL;
    gemv_bf16_nt_r4: BF16, u16, true, GEMV_ROWS_SMALL;
    gemv_bf16_nn_r16: BF16, u16, false, GEMV_ROWS;
    gemv_bf16_nt_r16: BF16, u16, true, GEMV_ROWS;
}
