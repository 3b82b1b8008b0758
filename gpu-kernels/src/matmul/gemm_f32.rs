//! SIMT f32 GEMM: `out = act(alpha · op(A) · op(B) + beta · C + bias)`, batched over `gridDim.z`.
//!
//! Floor: 2·M·N·K flops on the FP32 pipes: 132 SMs × 128 FMA/clk × 2 × ~1.98 GHz ≈ 67 TFLOP/s,
//! so 4096³ (137 GFLOP) needs ≥ 2.05 ms; the bytes (3 × 64 MiB) are noise beside that.
//!
//! A block computes a BM×BN tile of C in k-steps of BK: A's BM×BK and B's BK×BN tiles go through
//! shared memory (two stages, k-major so that each thread reads its 8 rows and 8 columns as
//! 16-byte vectors), while the next step's tiles are already loading into registers. Each thread
//! owns an 8×8 register tile (8×16 in the 128×256 "wide" tile) made of 4×4 quadrants spread so
//! that a warp's shared-memory reads stay conflict-free (`simt_layout`). `op(X)` is X or Xᵀ by
//! the kernel's suffix (`_nn`, `_nt`, `_tn`, `_tt`); any M, N, K: partial tiles load zeros and
//! store nothing outside.
//! Launch: `blockDim = gemm_threads(tile)`, `gridDim = (⌈N/BN⌉, ⌈M/BM⌉, batch)`, dynamic shared
//! memory `gemm_shared_bytes(tile)`.
use super::epilogue;
use crate::prelude::*;
use crate::shapes::{
    gemm_threads, gemm_tn, GEMM_BK as BK, GEMM_TILE_LARGE, GEMM_TILE_MEDIUM, GEMM_TILE_SMALL, GEMM_TILE_WIDE,
    GEMM_TM as TM,
};

/// Most 16-byte vectors one thread moves per operand per k-step (the small tile's count).
const MAX_LOADS: usize = 4;

/// The kernel arguments, gathered so the generic body takes one value.
#[derive(Clone, Copy)]
struct Gemm {
    a: *const f32,
    b: *const f32,
    c: *const f32,
    bias: *const f32,
    out: *mut f32,
    m: usize,
    n: usize,
    k: usize,
    /// Elements of k per block z-slice (`k` without split-K).
    k_chunk: usize,
    lda: usize,
    ldb: usize,
    ldc: usize,
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
    alpha: f32,
    beta: f32,
    activation: u32,
}

/// Four consecutive floats from `p` where `valid(j)` says element `j` exists: one 16-byte load when
/// all four do and `vector_ok`, else element loads with zeros for the missing ones.
#[inline(always)]
unsafe fn load4(p: *const f32, vector_ok: bool, valid: impl Fn(usize) -> bool) -> F32x4 {
    if vector_ok && valid(3) {
        load_nc_f32x4(p)
    } else {
        let mut v = [0.0f32; 4];
        unroll!(j in [0, 1, 2, 3] => {
            if valid(j) {
                v[j] = load_nc_f32(p.add(j));
            }
        });
        F32x4(v)
    }
}

/// A thread's TM×TN accumulators; element `[i][j]` is the tile's `simt_coords::<BM, BN, TN>(i, j)`.
pub(crate) type SimtAcc<const TN: usize> = [[f32; TN]; TM];

/// Where a thread's register tile sits: `((row, column) of its first accumulator, (row step,
/// column step) between its 4×4 quadrants)`. 8×8 tiles: the threads form a (BM/8)×(BN/8) grid,
/// quadrants half a block tile apart (32×64 warp tiles measured no faster: 37.5 against 38.2
/// TFLOP/s at 4096). 8×16 tiles: each warp owns a 64×64 tile, its lanes an 8×4 grid, quadrants
/// 32 rows and 16 columns apart, so that a warp's fragment reads per k touch 128 contiguous bytes
/// of A and 64 of B (one shared-memory wavefront each).
#[inline(always)]
fn simt_layout<const BM: usize, const BN: usize, const TN: usize>() -> ((usize, usize), (usize, usize)) {
    const { assert!(TN == gemm_tn(BN) && (TN == TM || (BM % 64 == 0 && BN % 64 == 0))) };
    let t = thread_x();
    if TN == TM {
        let (tr, tc) = (t / (BN / TN), t % (BN / TN));
        ((tr * 4, tc * 4), (BM / 2, BN / 2))
    } else {
        let (warp, lane) = (t / 32, t % 32);
        let (wm, wn) = (warp / (BN / 64), warp % (BN / 64));
        ((wm * 64 + lane / 4 * 4, wn * 64 + lane % 4 * 4), (32, 16))
    }
}

/// The tile's `(row, column)` that a thread's accumulator `[i][j]` holds.
#[inline(always)]
pub(crate) fn simt_coords<const BM: usize, const BN: usize, const TN: usize>(
    i: usize,
    j: usize,
) -> (usize, usize) {
    let ((r0, c0), (row_step, col_step)) = simt_layout::<BM, BN, TN>();
    (r0 + i / 4 * row_step + i % 4, c0 + j / 4 * col_step + j % 4)
}

/// With a transposed A (`TA`), every `load_a` call of a thread asks for the same four rows: this
/// first one, relative to the tile (the block's thread count is a multiple of `BM / 4`).
#[inline(always)]
pub(crate) fn simt_a_rows<const BM: usize>() -> usize {
    thread_x() % (BM / 4) * 4
}

/// The SIMT mainloop of a BM×BN tile at `(m0, n0)` over `k` in k-steps of BK. Operands come from
/// `load_a(k, m)`: the four elements of A at `(m, k..k+4)`, or at `(m..m+4, k)` when `TA`; and
/// `load_b(k, n)`: B at `(k, n..n+4)`, or at `(k..k+4, n)` when `TB` (absolute coordinates, zeros
/// where an element does not exist).
#[inline(always)]
pub(crate) unsafe fn simt_mainloop<
    const BM: usize,
    const BN: usize,
    const TN: usize,
    const TA: bool,
    const TB: bool,
>(
    k: usize,
    (m0, n0): (usize, usize),
    load_a: impl Fn(usize, usize) -> F32x4,
    load_b: impl Fn(usize, usize) -> F32x4,
) -> SimtAcc<TN> {
    let threads = gemm_threads((BM, BN));
    let (a_loads, b_loads) = (BM * BK / 4 / threads, BN * BK / 4 / threads);
    let t = thread_x();
    let smem = dynamic_shared::<f32>();
    let (a_s, b_s) = (smem, smem.add(2 * BK * BM));

    // One k-step's A and B tiles, global memory -> registers. Inlined by force: called twice, a
    // heavy loader would otherwise become a call that passes the register arrays through memory.
    let load_tiles = #[inline(always)]
    |k0: usize, ra: &mut [F32x4; MAX_LOADS], rb: &mut [F32x4; MAX_LOADS]| {
        unroll!(l in [0, 1, 2, 3] => {
            let v = t + l * threads;
            if l < a_loads {
                ra[l] = if TA {
                    load_a(k0 + v / (BM / 4), m0 + v % (BM / 4) * 4)
                } else {
                    load_a(k0 + v % (BK / 4) * 4, m0 + v / (BK / 4))
                };
            }
        });
        unroll!(l in [0, 1, 2, 3] => {
            let v = t + l * threads;
            if l < b_loads {
                rb[l] = if TB {
                    load_b(k0 + v % (BK / 4) * 4, n0 + v / (BK / 4))
                } else {
                    load_b(k0 + v / (BN / 4), n0 + v % (BN / 4) * 4)
                };
            }
        });
    };
    // Registers -> shared stage `s`, k-major (`[BK][BM]` and `[BK][BN]`).
    let store_tiles = #[inline(always)]
    |s: usize, ra: &[F32x4; MAX_LOADS], rb: &[F32x4; MAX_LOADS]| {
        let (sa, sb) = (a_s.add(s * BK * BM), b_s.add(s * BK * BN));
        unroll!(l in [0, 1, 2, 3] => {
            let v = t + l * threads;
            unroll!(j in [0, 1, 2, 3] => {
                if l < a_loads {
                    let x = ra[l].0[j];
                    if TA {
                        *sa.add(v / (BM / 4) * BM + v % (BM / 4) * 4 + j) = x;
                    } else {
                        *sa.add((v % (BK / 4) * 4 + j) * BM + v / (BK / 4)) = x;
                    }
                }
            });
        });
        unroll!(l in [0, 1, 2, 3] => {
            let v = t + l * threads;
            unroll!(j in [0, 1, 2, 3] => {
                if l < b_loads {
                    let x = rb[l].0[j];
                    if TB {
                        *sb.add((v % (BK / 4) * 4 + j) * BN + v / (BK / 4)) = x;
                    } else {
                        *sb.add(v / (BN / 4) * BN + v % (BN / 4) * 4 + j) = x;
                    }
                }
            });
        });
    };

    let ((r0, c0), (row_step, col_step)) = simt_layout::<BM, BN, TN>();
    let mut acc = [[0.0f32; TN]; TM];
    let mut ra = [F32x4([0.0; 4]); MAX_LOADS];
    let mut rb = [F32x4([0.0; 4]); MAX_LOADS];
    let steps = k.div_ceil(BK);
    if steps > 0 {
        load_tiles(0, &mut ra, &mut rb);
        store_tiles(0, &ra, &rb);
        sync_threads();
    }
    for step in 0..steps {
        let next = step + 1 < steps;
        if next {
            load_tiles((step + 1) * BK, &mut ra, &mut rb);
        }
        let (sa, sb) = (a_s.add(step % 2 * BK * BM), b_s.add(step % 2 * BK * BN));
        // Unrolled so the compiler loads the next k's fragments while this k's FMAs run.
        const _: () = assert!(BK == 16, "the k loop below unrolls sixteen steps");
        unroll!(kk in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
            let row = sa.add(kk * BM + r0);
            let col = sb.add(kk * BN + c0);
            let fa = [*(row as *const F32x4), *(row.add(row_step) as *const F32x4)];
            let mut fb = [F32x4([0.0; 4]); 4];
            unroll!(q in [0, 1, 2, 3] => {
                if q < TN / 4 {
                    fb[q] = *(col.add(q * col_step) as *const F32x4);
                }
            });
            unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7] => {
                let x = fa[i / 4].0[i % 4];
                unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                    if j < TN {
                        acc[i][j] = fma(x, fb[j / 4].0[j % 4], acc[i][j]);
                    }
                });
            });
        });
        if next {
            store_tiles((step + 1) % 2, &ra, &rb);
        }
        sync_threads();
    }

    acc
}

#[inline(always)]
unsafe fn gemm<const BM: usize, const BN: usize, const TN: usize, const TA: bool, const TB: bool>(g: Gemm) {
    // Split-K: block z is (batch, slice); a slice's product goes raw to its own `[M, N]` of `out`
    // (the host passes an f32 workspace and an identity epilogue, and reduces the slices after).
    let slices = g.k.div_ceil(g.k_chunk.max(1)).max(1);
    let (m0, n0, z) = (block_y() * BM, block_x() * BN, block_z());
    let (batch, k0) = (z / slices, z % slices * g.k_chunk);
    let a = g.a.add(batch * g.stride_a + if TA { k0 * g.lda } else { k0 });
    let b = g.b.add(batch * g.stride_b + if TB { k0 } else { k0 * g.ldb });
    let g = Gemm { k: g.k_chunk.min(g.k - k0), ..g };
    let a_vec_ok = g.lda % 4 == 0 && g.stride_a % 4 == 0;
    let b_vec_ok = g.ldb % 4 == 0 && g.stride_b % 4 == 0;
    let load_a = |k: usize, m: usize| {
        if TA {
            load4(a.add(k * g.lda + m), a_vec_ok, |j| k < g.k && m + j < g.m)
        } else {
            load4(a.add(m * g.lda + k), a_vec_ok, |j| m < g.m && k + j < g.k)
        }
    };
    let load_b = |k: usize, n: usize| {
        if TB {
            load4(b.add(n * g.ldb + k), b_vec_ok, |j| n < g.n && k + j < g.k)
        } else {
            load4(b.add(k * g.ldb + n), b_vec_ok, |j| k < g.k && n + j < g.n)
        }
    };
    let acc = simt_mainloop::<BM, BN, TN, TA, TB>(g.k, (m0, n0), load_a, load_b);

    // Epilogue: each thread's rows, four contiguous columns per quadrant.
    let out = g.out.add(z * g.m * g.n);
    let c = g.c.add(batch * g.stride_c);
    let has_c = !g.c.is_null() && g.beta != 0.0;
    let out_vec_ok = g.ldc % 4 == 0 && (g.m * g.n) % 4 == 0;
    unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7] => {
        let row = m0 + simt_coords::<BM, BN, TN>(i, 0).0;
        if row < g.m {
            unroll!(h in [0, 1, 2, 3] => {
                if h < TN / 4 {
                let col = n0 + simt_coords::<BM, BN, TN>(i, h * 4).1;
                let mut v = [0.0f32; 4];
                unroll!(j in [0, 1, 2, 3] => {
                    if col + j < g.n {
                        let beta_c = if has_c { g.beta * load_nc_f32(c.add(row * g.ldc + col + j)) } else { 0.0 };
                        let bias = if g.bias.is_null() { 0.0 } else { load_nc_f32(g.bias.add(col + j)) };
                        v[j] = epilogue(acc[i][h * 4 + j], g.alpha, beta_c, bias, g.activation);
                    }
                });
                let dst = out.add(row * g.ldc + col);
                if out_vec_ok && col + 3 < g.n {
                    store_f32x4(dst, F32x4(v));
                } else {
                    unroll!(j in [0, 1, 2, 3] => {
                        if col + j < g.n {
                            store_f32(dst.add(j), v[j]);
                        }
                    });
                }
                }
            });
        }
    });
}

macro_rules! gemm_kernels {
    ($($name:ident: $tile:ident, $ta:literal, $tb:literal;)*) => {$(
        /// SIMT f32 GEMM; see the module documentation. Per batch `a` is `[M, K]` (`[K, M]`
        /// when transposed), `b` is `[K, N]` (`[N, K]`), `c` and `out` are `[M, N]`, all
        /// row-major; batch `z` starts at `z·stride_*` (0 repeats one matrix), `out`'s batches
        /// are contiguous; `c` and `bias` may be null. With `k_chunk < k` (a multiple of
        /// `GEMM_BK`), `gridDim.z` = batch × ⌈k / k_chunk⌉ and slice `s` of batch `z` writes its
        /// raw sum over k in `[s·k_chunk, (s+1)·k_chunk)` to `out[z·slices + s]`.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            a: *const f32, b: *const f32, c: *const f32, bias: *const f32, out: *mut f32,
            m: usize, n: usize, k: usize, k_chunk: usize, stride_a: usize, stride_b: usize,
            stride_c: usize, alpha: f32, beta: f32, activation: u32,
        ) {
            let lda = if $ta { m } else { k };
            let ldb = if $tb { k } else { n };
            let g = Gemm {
                a, b, c, bias, out, m, n, k, k_chunk, lda, ldb, ldc: n, stride_a, stride_b, stride_c, alpha,
                beta, activation,
            };
            gemm::<{ $tile.0 }, { $tile.1 }, { gemm_tn($tile.1) }, $ta, $tb>(g)
        }
    )*};
}

#[cfg(feature = "matmul")]
gemm_kernels! {
    gemm_f32_wide_nn: GEMM_TILE_WIDE, false, false;
    gemm_f32_wide_nt: GEMM_TILE_WIDE, false, true;
    gemm_f32_wide_tn: GEMM_TILE_WIDE, true, false;
    gemm_f32_wide_tt: GEMM_TILE_WIDE, true, true;
    gemm_f32_large_nn: GEMM_TILE_LARGE, false, false;
    gemm_f32_large_nt: GEMM_TILE_LARGE, false, true;
    gemm_f32_large_tn: GEMM_TILE_LARGE, true, false;
    gemm_f32_large_tt: GEMM_TILE_LARGE, true, true;
    gemm_f32_medium_nn: GEMM_TILE_MEDIUM, false, false;
    gemm_f32_medium_nt: GEMM_TILE_MEDIUM, false, true;
    gemm_f32_medium_tn: GEMM_TILE_MEDIUM, true, false;
    gemm_f32_medium_tt: GEMM_TILE_MEDIUM, true, true;
    gemm_f32_small_nn: GEMM_TILE_SMALL, false, false;
    gemm_f32_small_nt: GEMM_TILE_SMALL, false, true;
    gemm_f32_small_tn: GEMM_TILE_SMALL, true, false;
    gemm_f32_small_tt: GEMM_TILE_SMALL, true, true;
}
