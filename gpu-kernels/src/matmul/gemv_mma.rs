//! Few-row GEMM on tensor cores: `out = act(alpha · A · op(B) + beta · C + bias)` with A
//! `[M, K]` of at most 16 rows, B `[K, N]` (`_nn`) or `[N, K]` (`_nt`, a linear layer's weight),
//! f16 or bf16 with f32 accumulation, or f32 (`_nt` alone) as 3xTF32, batched over `gridDim.z`.
//!
//! Floor: the bytes of B, read once: (16, 8192, 8192) in bf16 is 128 MiB, ~45 µs at the copy's
//! ~3 TB/s (f32: 256 MiB, ~90 µs). Its 2·16 FLOP per element of B need ~80% of the FP32 pipes
//! with the conversions on top (the f32-pipe `gemv_*` ran it at 7% of DRAM bandwidth in 16-bit,
//! 31-59% in f32), but a few percent of the tensor cores, three TF32 products included.
//!
//! 16-bit computes the product transposed, `outᵀ = op(B)ᵀ · Aᵀ`, as `mma.m16n8k16`: B's columns
//! n are the MMA's 16 rows, A's rows its 8 (or twice 8) columns, so A's few rows waste nothing of
//! B's bytes. f32 computes `out = A · op(B)` as three `mma.m16n8k8` (b_lo·a_hi, b_hi·a_lo,
//! b_hi·a_hi; the high parts the values themselves, which the tensor cores truncate, the low parts
//! `tf32_low_by_add`): A's 16 rows (zeros past M) are the MMA's rows and 8 of B's columns its
//! columns, so B's fragment is two words of one loaded vector (no register moves); its tensor work
//! is a small share of the time either way. Since a sum over k (and the naming of the MMA's rows)
//! may be permuted freely, each lane loads whole 16-byte vectors of B and A in the order memory
//! holds them, and the permutation maps them to fragment registers. A step is 4 vectors' k (32 in
//! 16-bit, 16 in f32), two MMAs' worth (h):
//! - `_nt` (B `[N, K]`): in a pair of steps (`V` = a vector's k), lane 4g + t loads k =
//!   2Vt..2Vt+V-1 (first step) and 2Vt+V..2Vt+2V-1 (second) of B's rows `n0 + 16j + g` and `+ 8`
//!   for its warp's four row tiles j, and the same k of A's rows g and g + 8, so that a row's 128
//!   bytes are read together rather than in 64-byte halves a step apart. MMA h of a step takes
//!   words 2h and 2h + 1 of each vector (f32: B's rows `n0 + 16j + g + 8h` are column g of the
//!   8-column tile 2j + h).
//! - `_nn` (B `[K, N]`, 16-bit only): in each half h of the step, lane 4g + t loads B's rows
//!   k = 4t..4t+3 at columns `n0 + 8g..+7`; the MMA row of tile j and group g is column
//!   `n0 + 8g + 2j` (row g + 8: `+ 1`), whose four k are gathered from the four vectors' word j
//!   (`prmt`), and A comes as 4 consecutive k of rows g and g + 8.
//!
//! Each warp owns 64 columns (four 16-row tiles; f32: eight 8-column ones) over the block's
//! k-slice, two steps in flight (16 vectors of B a lane). f32 adds each step's sums to its accumulators in f32 registers: the
//! tensor cores truncate their own additions, an error that would grow with the slice. Its two
//! steps (8 KB of B a warp) take ~670 instructions (the low parts, the promotions, A's fragments)
//! at 8 warps an SM (194 registers), latency-bound at ~64% of copy where the 16-bit kernels reach
//! ~78%; the host takes it only where the f32-pipe kernels do worse (`_nt`, more than 4 rows).
//! Slices of `k_chunk` (a multiple of 32) of K, one of two ways:
//! - in clusters (sm_90, up to 16 blocks): the blocks of a cluster along x are one column
//!   group's slices (rank = slice); each puts its sums in shared memory, and after a cluster
//!   barrier each block adds a share of the tile's outputs over the cluster's blocks in rank
//!   order (deterministic) and applies the epilogue: no f32 slices through global memory, no
//!   second kernel (at (16, 8192, 8192) those were 8 MiB and a launch beside B's 128 MiB: 0.0666
//!   → 0.0562 ms on the H100);
//! - or on `gridDim.y` as in `gemv`: one slice applies the epilogue, several write raw sums for
//!   `gemm_reduce_*`.
//!
//! Requirements (the host's plan checks them): K a multiple of a vector (8 in 16-bit, 4 in f32),
//! N too for `_nn`, A and B 16-byte aligned. Launch: block of `warps` · 32 threads
//! (`GEMV_MMA_THREADS` or one warp, for products too small to fill the SMs otherwise), grid
//! `(⌈N / (64·warps)⌉ · cluster, slices, batch)` with `slices` = 1 when `cluster` > 1, no dynamic
//! shared memory.
use super::Gemv;
use super::{GemmElem, F32};
use crate::prelude::*;
use crate::shapes::{GEMV_MMA_COLS, GEMV_MMA_THREADS};

/// 16-row MMA tiles of columns a warp owns.
const TILES: usize = GEMV_MMA_COLS / 16;
const _: () = assert!(TILES == 4, "the kernel unrolls four tiles");
/// Steps whose loads are in flight at once.
const DEPTH: usize = 2;
/// The sums of a cluster's block: 4-value groups `w` (tile j = w / 2, A's rows q = w % 2; f32:
/// B's 8-column tile w) of each thread, `[w][thread][4]` (16-byte stores, conflict-free).
const GROUPS: usize = 2 * TILES;

shared_array!(static GEMV_MMA_SUMS: [f32; 8 * 128 * 4]);
/// The largest cluster (the H100's, non-portable past 8 blocks).
const CLUSTER_MAX: usize = 16;
const _: () = assert!(GROUPS == 8 && GEMV_MMA_THREADS == 128);

/// B's vectors and A's words of one step for one lane.
#[derive(Clone, Copy)]
struct Step {
    b: [[u32; 4]; 2 * TILES],
    a: [[u32; 4]; 2],
}

const EMPTY: Step = Step { b: [[0; 4]; 2 * TILES], a: [[0; 4]; 2] };

/// A format's MMA over half a step (16 k of 16-bit values, 8 of f32).
trait FewRowMma: GemmElem {
    /// Whether a step's sums go to the accumulators through f32 additions.
    const PROMOTE: bool;
    /// Whether the MMA computes `out = A · op(B)` itself, A's 16 rows (zeros past M) as its rows
    /// and 8 of B's columns as its columns (`_nt` f32: B's fragment is then two words of one
    /// vector, with no register moves, and no branch per tile parts the dependent products),
    /// rather than the transposed product.
    const DIRECT: bool;
    /// `d += a · b` on fragments of this format's words (`mma_16x8x16`'s layout; f32: k t and
    /// t + 4 where 16-bit holds 2t.. and 2t+8..).
    fn mma(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]);
}

macro_rules! few_row_mma_16bit {
    ($($e:ty),*) => {$(
        impl FewRowMma for $e {
            const PROMOTE: bool = false;
            const DIRECT: bool = false;
            #[inline(always)]
            fn mma(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
                <$e as MmaInput>::mma_16x8x16(d, a, b)
            }
        }
    )*};
}

few_row_mma_16bit!(F16, BF16);

impl FewRowMma for F32 {
    const PROMOTE: bool = true;
    const DIRECT: bool = true;
    /// 3xTF32: the products of the low parts with the high ones first, while `d` is small.
    #[inline(always)]
    fn mma(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
        let low = |w: u32| tf32_low_by_add(f32::from_bits(w)).to_bits();
        mma_tf32_16x8x8(d, a, b.map(low));
        mma_tf32_16x8x8(d, a.map(low), b);
        mma_tf32_16x8x8(d, a, b);
    }
}

/// Four words at `p` (16 bytes, or zeros when `!inside`), L2 fetching the 256 bytes around them
/// (the rest of the row's line pair, or the neighbouring warps' columns): 2-4% faster at
/// (1-16, 8192, 8192) than plain loads (nineteenth session, call F).
///
/// # Safety
/// When `inside`, `p` is 16-byte aligned global memory nothing writes during the kernel.
#[inline(always)]
unsafe fn words4<T>(p: *const T, inside: bool) -> [u32; 4] {
    if inside {
        load_nc_l2_256_u32x4(p as *const u32)
    } else {
        [0; 4]
    }
}

/// Two words at `p` (8 bytes, or zeros).
///
/// # Safety
/// As [`words4`], 8-byte aligned.
#[inline(always)]
unsafe fn words2<T>(p: *const T, inside: bool) -> [u32; 2] {
    if inside {
        let v = load_nc_f32x2(p as *const f32);
        [v[0].to_bits(), v[1].to_bits()]
    } else {
        [0; 2]
    }
}

/// The low halves of `x` and `y` as one pair (x's first), and their high halves.
#[inline(always)]
fn pair_halves(x: u32, y: u32) -> (u32, u32) {
    ((x & 0xffff) | (y << 16), (x >> 16) | (y & 0xffff_0000))
}

#[inline(always)]
unsafe fn gemv_mma<E: FewRowMma, const NT: bool>(g: Gemv<E::Elem>) {
    // k of one vector, and of one step (four vectors a lane in each of its row tiles).
    let (vk, step) = (E::VEC, 4 * E::VEC);
    const { assert!(NT || E::VEC == 8, "f32 runs `_nt` alone") };
    let cluster = cluster_blocks() as usize;
    let (batch, slice, k_lo, k_hi, column_group) = if cluster > 1 {
        let slice = cluster_rank() as usize;
        let lo = slice * g.k_chunk;
        (block_z(), slice, lo, (lo + g.k_chunk).min(g.k), block_x() / cluster)
    } else {
        let (batch, slice, lo, hi) = g.slice();
        (batch, slice, lo, hi, block_x())
    };
    let (a, b) = (g.a.add(batch * g.stride_a), g.b.add(batch * g.stride_b));
    let (grp, t) = (lane() / 4, lane() % 4);
    let n0 = (column_group * (block_dim_x() / 32) + warp_in_block()) * GEMV_MMA_COLS;
    let (m, n, k) = (g.m, g.n, g.k);
    let two = m > 8;
    let mut acc = [[[0.0f32; 4]; 2]; TILES];
    // Inlined by force, as in `gemv`: a call would keep the fragments in local memory.
    let load = #[inline(always)]
    |k0: usize, d: usize| -> Step {
        let mut s = EMPTY;
        let a_row = |q: usize, kk: usize| {
            let row = 8 * q + grp;
            (a.add(row * k + kk), kk < k_hi && row < m && (q == 0 || two))
        };
        if NT {
            let kk = k0 + 2 * vk * t + vk * d;
            let inside = kk < k_hi;
            unroll!(j in [0, 1, 2, 3] => {
                unroll!(h in [0, 1] => {
                    let row = n0 + 16 * j + grp + 8 * h;
                    s.b[2 * j + h] = words4(b.add(row * k + kk), inside && row < n);
                });
            });
            unroll!(q in [0, 1] => {
                let (p, inside) = a_row(q, kk);
                s.a[q] = words4(p, inside);
            });
        } else {
            let (col, k0) = (n0 + 8 * grp, k0 + step * d);
            unroll!(h in [0, 1] => {
                unroll!(e in [0, 1, 2, 3] => {
                    let kk = k0 + 16 * h + 4 * t + e;
                    s.b[4 * h + e] = words4(b.add(kk * n + col), kk < k_hi && col < n);
                });
                unroll!(q in [0, 1] => {
                    let (p, inside) = a_row(q, k0 + 16 * h + 4 * t);
                    let w = words2(p, inside);
                    s.a[q][2 * h] = w[0];
                    s.a[q][2 * h + 1] = w[1];
                });
            });
        }
        s
    };
    let mut multiply = #[inline(always)]
    |s: &Step| {
        let mut sums = if E::PROMOTE { [[[0.0f32; 4]; 2]; TILES] } else { acc };
        unroll!(h in [0, 1] => {
            if E::DIRECT {
                // A's rows g and g + 8 at k t and t + 4 (words 2h and 2h + 1); B's 8-column tile
                // v (its vector v) at the same k, summed in `sums[v / 2][v % 2]`.
                let frag = [s.a[0][2 * h], s.a[1][2 * h], s.a[0][2 * h + 1], s.a[1][2 * h + 1]];
                unroll!(v in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    E::mma(&mut sums[v / 2][v % 2], frag, [s.b[v][2 * h], s.b[v][2 * h + 1]]);
                });
            } else {
                unroll!(j in [0, 1, 2, 3] => {
                    let frag = if NT {
                        let (lo, hi) = (s.b[2 * j], s.b[2 * j + 1]);
                        [lo[2 * h], hi[2 * h], lo[2 * h + 1], hi[2 * h + 1]]
                    } else {
                        let v = |e: usize| s.b[4 * h + e][j];
                        let (r0, r1) = pair_halves(v(0), v(1));
                        let (r2, r3) = pair_halves(v(2), v(3));
                        [r0, r1, r2, r3]
                    };
                    unroll!(q in [0, 1] => {
                        if q == 0 || two {
                            E::mma(&mut sums[j][q], frag, [s.a[q][2 * h], s.a[q][2 * h + 1]]);
                        }
                    });
                });
            }
        });
        if E::PROMOTE {
            unroll!(j in [0, 1, 2, 3] => {
                unroll!(q in [0, 1] => {
                    unroll!(e in [0, 1, 2, 3] => {
                        acc[j][q][e] += sums[j][q][e];
                    });
                });
            });
        } else {
            acc = sums;
        }
    };
    let mut k0 = k_lo;
    while k0 < k_hi {
        let mut steps = [EMPTY; DEPTH];
        // `_nt`'s second step holds k in the first step's range too.
        unroll!(d in [0, 1] => {
            if NT || k0 + step * d < k_hi {
                steps[d] = load(k0, d);
            }
        });
        unroll!(d in [0, 1] => {
            if NT || k0 + step * d < k_hi {
                multiply(&steps[d]);
            }
        });
        k0 += step * DEPTH;
    }
    // d0, d1: MMA row g, columns (A's rows) 2t, 2t + 1; d2, d3: row g + 8.
    let position = |j: usize, q: usize, e: usize| {
        let upper = e / 2;
        if E::DIRECT {
            // d0, d1: row g, columns 2t, 2t + 1 of tile 2j + q; d2, d3: row g + 8.
            return (grp + 8 * upper, n0 + 8 * (2 * j + q) + 2 * t + e % 2);
        }
        let col = if NT { n0 + 16 * j + grp + 8 * upper } else { n0 + 8 * grp + 2 * j + upper };
        (8 * q + 2 * t + e % 2, col)
    };
    if cluster > 1 {
        reduce_cluster::<E>(&g, &acc, batch, cluster, position);
        return;
    }
    unroll!(j in [0, 1, 2, 3] => {
        unroll!(q in [0, 1] => {
            unroll!(e in [0, 1, 2, 3] => {
                let (row, col) = position(j, q, e);
                if row < m && col < n {
                    g.finish::<E>((batch, slice), (row, col), acc[j][q][e]);
                }
            });
        });
    });
}

/// The cluster's slices added and finished: this thread's sums into shared memory, a cluster
/// barrier, then the thread's groups `w ≡ rank (mod cluster)` read from every block of the
/// cluster (16 bytes each) and added in rank order; a second barrier keeps each block's shared
/// memory alive until the others have read it.
#[inline(always)]
unsafe fn reduce_cluster<E: FewRowMma>(
    g: &Gemv<E::Elem>,
    acc: &[[[f32; 4]; 2]; TILES],
    batch: usize,
    cluster: usize,
    position: impl Fn(usize, usize, usize) -> (usize, usize),
) {
    #[cfg(not(any(feature = "sm90a", target_feature = "sm_90")))]
    {
        // Targets without clusters: the host never launches clusters there.
        let _ = (g, acc, batch, cluster, position);
        trap();
    }
    #[cfg(any(feature = "sm90a", target_feature = "sm_90"))]
    {
        let sums = shared_ptr(&raw mut GEMV_MMA_SUMS);
        let slot = |w: usize| sums.add((w * GEMV_MMA_THREADS + thread_x()) * 4) as *mut [f32; 4];
        unroll!(j in [0, 1, 2, 3] => {
            unroll!(q in [0, 1] => {
                *slot(2 * j + q) = acc[j][q];
            });
        });
        cluster_sync();
        let mut w = cluster_rank() as usize;
        while w < GROUPS {
            let (j, q) = (w / 2, w % 2);
            if E::DIRECT || 8 * q < g.m {
                let addr = shared_addr(slot(w));
                let mut parts = [[0.0f32; 4]; CLUSTER_MAX];
                unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                    if r < cluster {
                        // SAFETY: block `r` of the cluster stored its group `w` before the barrier
                        // above and waits at the one below before it can exit.
                        parts[r] = load_cluster_shared_f32x4(addr, r as u32);
                    }
                });
                unroll!(e in [0, 1, 2, 3] => {
                    let mut v = parts[0][e];
                    unroll!(r in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                        if r < cluster {
                            v += parts[r][e];
                        }
                    });
                    let (row, col) = position(j, q, e);
                    if row < g.m && col < g.n {
                        g.finish::<E>((batch, 0), (row, col), v);
                    }
                });
            }
            w += cluster;
        }
        cluster_sync();
    }
}

macro_rules! gemv_mma_kernels {
    ($($name:ident: $e:ty, $elem:ty, $nt:literal;)*) => {$(
        /// Few-row GEMM on tensor cores; see the module documentation. Arguments as `gemv_*`'s.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            a: *const $elem, b: *const $elem, c: *const $elem, bias: *const $elem, out: *mut $elem,
            ws: *mut f32, m: usize, n: usize, k: usize, k_chunk: usize, stride_a: usize,
            stride_b: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32,
        ) {
            let g = Gemv {
                a, b, c, bias, out, ws, m, n, k, k_chunk, stride_a, stride_b, stride_c, alpha, beta, activation,
            };
            gemv_mma::<$e, $nt>(g)
        }
    )*};
}

gemv_mma_kernels! {
    gemv_mma_f32_nt: F32, f32, true;
    gemv_mma_f16_nn: F16, u16, false;
    gemv_mma_f16_nt: F16, u16, true;
    gemv_mma_bf16_nn: BF16, u16, false;
    gemv_mma_bf16_nt: BF16, u16, true;
}
