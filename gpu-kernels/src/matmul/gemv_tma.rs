//! Few-row f32 GEMM fed by TMA: `out = act(alpha · A · op(B) + beta · C + bias)` with A `[M, K]`
//! of at most 16 rows, B `[K, N]` (`_nn`) or `[N, K]` (`_nt`), batched over `gridDim.z`, exact
//! f32 (FMAs), in the sm_90a module.
//!
//! Floor: B's bytes, read once: (16, 8192, 8192) is 256 MiB, ~90 µs at the copy's ~3 TB/s. Its
//! 16 FMAs per element of B need about a third of the FP32 pipes there. The register-fed
//! kernels stop at 58-64% of copy (`gemv_f32_nn_r16`, `gemv_mma_f32_nt`): each warp holds its
//! loads in flight in registers, so few warps fit an SM and they wait on memory. Here one
//! producer thread keeps `GEMV_TMA_PIECES` pieces of B (and of A) in flight in shared memory,
//! and eight consumer warps only read shared memory and multiply.
//!
//! A block owns `GEMV_TMA_COLS` (64) columns of the output over its k-range, in pieces of 64 k
//! (a stage, one `mbarrier` phase, is one piece, or two for `_nt`): B's piece as two
//! 128-byte-swizzled boxes of 64 rows × 32 floats (`_nt`: B's rows are the columns, its floats
//! k; `_nn`: the rows are k, the floats columns), A's as two boxes of 16 rows × 32 k (rows past
//! M and k past K arrive as zeros). Each consumer thread multiplies a 4 k × 4 column block of B
//! by A's 16 rows at those k (four 16-byte loads of B, sixteen of A, 256 FMAs a piece) into
//! 16 × 4 sums:
//! - `_nt`: warp w takes k-box w / 4 and columns 16 (w % 4) + 4 (lane / 8) + 0..3, lane % 8 the
//!   16-byte chunk (4 k) of each column's row: a quarter-warp reads one 128-byte row;
//! - `_nn`: warp w takes column box w / 4, its chunk lane % 8 (4 columns), and the k-rows
//!   16 (w % 4) + 4 (lane / 8) + 0..3: a quarter-warp reads one 128-byte row, and A's 4 k
//!   are one address for it (a broadcast).
//!
//! A column's partial sums are added first across the lanes that share it (a butterfly), then
//! across the warps (2 or 4) through shared memory in a fixed order (deterministic). With
//! several slices of K, the blocks of a cluster along x are one column group's slices (rank =
//! slice), and each adds a share of the outputs over the cluster's blocks in rank order; one
//! slice applies the epilogue directly.
//!
//! Requirements (the host's plan checks them): K a multiple of 4, N too for `_nn`, A, B and
//! their batch strides 16-byte aligned (TMA), `k_chunk` a multiple of `GEMV_TMA_STAGE_K`.
//! Launch: block `GEMV_TMA_THREADS` (eight consumer warps and the producer's), grid
//! `(⌈N / 64⌉ · cluster, 1, batch)` in clusters of `cluster` (= slices, at most
//! `GEMV_TMA_CLUSTER_MAX`) blocks, dynamic shared memory `GEMV_TMA_SHARED_BYTES`. `maps`: A's
//! (boxes of 32 × 16) and B's (32 × 64) tensor maps, 3-D with the batch outermost (one matrix
//! when its stride is 0).
use super::{Gemv, F32};
use crate::prelude::*;
use crate::shapes::{
    TensorMaps, GEMV_TMA_CLUSTER_MAX, GEMV_TMA_COLS, GEMV_TMA_PIECES as PIECES, GEMV_TMA_SHARED_BYTES,
    GEMV_TMA_STAGE_K, GEMV_TMA_THREADS,
};

const CONSUMER_WARPS: usize = 8;
const CONSUMERS: usize = 32 * CONSUMER_WARPS;
const _: () = assert!(GEMV_TMA_THREADS == CONSUMERS + 32 && GEMV_TMA_COLS == 64);
/// A's rows (the kernel multiplies all 16; rows past M are zeros and never stored).
const ROWS: usize = 16;
/// k of one piece: two boxes of 32 floats (128 bytes) of B's and A's rows.
const PIECE_K: usize = 64;
const B_BOX_BYTES: u32 = (GEMV_TMA_COLS * 128) as u32;
const A_BOX_BYTES: u32 = (ROWS * 128) as u32;
const PIECE_BYTES: u32 = 2 * (B_BOX_BYTES + A_BOX_BYTES);
/// Pieces of one stage (one `mbarrier` phase) by layout: `_nt` reads each of B's rows 512 bytes
/// at a time (256 bytes, call A: 0.1037-0.1086 ms at (16, 8192, 8192) against `_nn`'s
/// 0.0995-0.1023, whose rows are read whole by the column groups together).
const fn stage_pieces(nt: bool) -> usize {
    if nt {
        2
    } else {
        1
    }
}
// The host's slices are whole stages of either layout.
const _: () = assert!(
    PIECE_K * stage_pieces(true) == GEMV_TMA_STAGE_K
        && GEMV_TMA_STAGE_K % (PIECE_K * stage_pieces(false)) == 0
);
const OUTPUTS: usize = ROWS * GEMV_TMA_COLS;
/// The warps' sums of one column (`_nt`: two k-boxes; `_nn`: four k-ranges), after the lanes
/// that share its columns have added theirs, in a region of their own after the `mbarrier`s (the
/// threads never write shared memory that TMA writes).
const PARTIALS_MAX: usize = 4;
const PARTIALS_OFFSET: u32 = PIECES as u32 * (PIECE_BYTES + 16);
const SUMS_OFFSET: u32 = PARTIALS_OFFSET + (PARTIALS_MAX * OUTPUTS * 4) as u32;
const _: () = assert!(GEMV_TMA_SHARED_BYTES >= SUMS_OFFSET as usize + OUTPUTS * 4 + 1023);

/// Byte offset of 16-byte chunk `chunk` of row `row` in a 128-byte-swizzled box.
#[inline(always)]
fn swizzled(row: usize, chunk: usize) -> u32 {
    (row * 128 + ((chunk ^ (row % 8)) * 16)) as u32
}

#[inline(always)]
unsafe fn gemv_tma<const NT: bool>(maps: *const u8, g: Gemv<f32>) {
    let cluster = cluster_blocks() as usize;
    let slice = cluster_rank() as usize;
    let batch = block_z();
    let n0 = block_x() / cluster * GEMV_TMA_COLS;
    let k_lo = slice * g.k_chunk;
    let k_hi = (k_lo + g.k_chunk).min(g.k);
    let pieces = const { stage_pieces(NT) };
    let (stage_k, ring) = (PIECE_K * pieces, PIECES / pieces);
    let stages = k_hi.saturating_sub(k_lo).div_ceil(stage_k);
    // 1024-byte alignment for the swizzle atoms.
    let base = (shared_addr(dynamic_shared::<u8>()) + 1023) & !1023;
    let piece = |s: usize, p: usize| base + (s * pieces + p) as u32 * PIECE_BYTES;
    let barriers = base + PIECES as u32 * PIECE_BYTES;
    let full = |s: usize| barriers + 8 * s as u32;
    let empty = |s: usize| barriers + 8 * (PIECES + s) as u32;
    let t = thread_x();
    if t == 0 {
        for s in 0..ring {
            mbarrier_init(full(s), 1);
            mbarrier_init(empty(s), CONSUMER_WARPS as u32);
        }
        fence_mbarrier_init();
    }
    sync_threads();

    let warp = warp_in_block();
    if warp == CONSUMER_WARPS {
        if lane() == 0 {
            let (map_a, map_b) = (maps, maps.add(128));
            let za = if g.stride_a != 0 { batch as i32 } else { 0 };
            let zb = if g.stride_b != 0 { batch as i32 } else { 0 };
            for it in 0..stages {
                let s = it % ring;
                if it >= ring {
                    // The consumers are done with what this stage held `ring` stages ago.
                    mbarrier_wait(empty(s), ((it / ring - 1) & 1) as u32);
                }
                mbarrier_arrive_expect_tx(full(s), pieces as u32 * PIECE_BYTES);
                for p in 0..pieces {
                    let k0 = k_lo + it * stage_k + p * PIECE_K;
                    unroll!(h in [0, 1] => {
                        let dst_b = piece(s, p) + h as u32 * B_BOX_BYTES;
                        let dst_a = piece(s, p) + 2 * B_BOX_BYTES + h as u32 * A_BOX_BYTES;
                        let (kk, nn) = ((k0 + 32 * h) as i32, (n0 + 32 * h) as i32);
                        if NT {
                            tma_load_3d(dst_b, map_b, full(s), (kk, n0 as i32, zb));
                        } else {
                            tma_load_3d(dst_b, map_b, full(s), (nn, k0 as i32, zb));
                        }
                        tma_load_3d(dst_a, map_a, full(s), (kk, 0, za));
                    });
                }
            }
        }
    } else {
        let (ln, wq, half) = (lane(), warp % 4, warp / 4);
        let (chunk, quarter) = (ln % 8, ln / 8);
        let mut acc = [[0.0f32; 4]; ROWS];
        for it in 0..stages {
            let s = it % ring;
            mbarrier_wait(full(s), ((it / ring) & 1) as u32);
            for p in 0..pieces {
                let (box_b, a_base) =
                    (piece(s, p) + half as u32 * B_BOX_BYTES, piece(s, p) + 2 * B_BOX_BYTES);
                // b[i][j]: k i, column j of this thread's block; A's box and chunk at those k.
                let mut b = [[0.0f32; 4]; 4];
                let (box_a, a_chunk) = if NT {
                    let row = 16 * wq + 4 * quarter;
                    unroll!(j in [0, 1, 2, 3] => {
                        let v = load_shared_f32x4(box_b + swizzled(row + j, chunk));
                        unroll!(i in [0, 1, 2, 3] => {
                            b[i][j] = v[i];
                        });
                    });
                    (a_base + half as u32 * A_BOX_BYTES, chunk)
                } else {
                    let row = 16 * wq + 4 * quarter;
                    unroll!(i in [0, 1, 2, 3] => {
                        b[i] = load_shared_f32x4(box_b + swizzled(row + i, chunk));
                    });
                    (a_base + (row / 32) as u32 * A_BOX_BYTES, row % 32 / 4)
                };
                unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                    let a = load_shared_f32x4(box_a + swizzled(r, a_chunk));
                    unroll!(i in [0, 1, 2, 3] => {
                        unroll!(j in [0, 1, 2, 3] => {
                            acc[r][j] = fma(a[i], b[i][j], acc[r][j]);
                        });
                    });
                });
            }
            sync_warp();
            if ln == 0 {
                mbarrier_arrive(empty(s));
            }
        }
        // The lanes that share this thread's columns hold the same k-range's other chunks
        // (`_nt`: lanes ±1, 2, 4; `_nn`: ±8, 16): a butterfly gives each the same bits of their
        // sum, and each stores a share of the rows.
        let (masks, partial, col) = if NT {
            ([1, 2, 4], half, 16 * wq + 4 * quarter)
        } else {
            ([8, 16, 0], wq, 32 * half + 4 * chunk)
        };
        unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
            unroll!(j in [0, 1, 2, 3] => {
                unroll!(x in [0, 1, 2] => {
                    if masks[x] != 0 {
                        acc[r][j] += shfl_xor(acc[r][j], masks[x]);
                    }
                });
            });
        });
        let (sharers, me) = if NT { (8, chunk) } else { (4, quarter) };
        unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
            if r % sharers == me {
                let at = ((partial * ROWS + r) * GEMV_TMA_COLS + col) * 4;
                store_shared_f32x4(base + PARTIALS_OFFSET + at as u32, acc[r]);
            }
        });
    }
    sync_threads();
    let partials = if NT { 2 } else { PARTIALS_MAX };
    let sums = base + SUMS_OFFSET;
    let mut o = t;
    while o < OUTPUTS {
        let mut v = 0.0f32;
        for p in 0..partials {
            v += f32::from_bits(load_shared_u32(base + PARTIALS_OFFSET + ((p * OUTPUTS + o) * 4) as u32));
        }
        let (row, col) = (o / GEMV_TMA_COLS, n0 + o % GEMV_TMA_COLS);
        if cluster > 1 {
            store_shared_u32(sums + (o * 4) as u32, v.to_bits());
        } else if row < g.m && col < g.n {
            g.finish::<F32>((batch, 0), (row, col), v);
        }
        o += GEMV_TMA_THREADS;
    }
    if cluster > 1 {
        cluster_sync();
        // This block's share of the outputs, over the cluster's slices in rank order.
        let share = OUTPUTS.div_ceil(cluster);
        let mut o = slice * share + t;
        while o < ((slice + 1) * share).min(OUTPUTS) {
            let (row, col) = (o / GEMV_TMA_COLS, n0 + o % GEMV_TMA_COLS);
            if row < g.m && col < g.n {
                let mut v = 0.0f32;
                const { assert!(GEMV_TMA_CLUSTER_MAX == 8, "the sum unrolls 8 ranks") };
                unroll!(r in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    if r < cluster {
                        // SAFETY: block `r` of the cluster stored its sums before the barrier
                        // above and waits at the one below before it can exit.
                        v += load_cluster_shared_f32(sums + (o * 4) as u32, r as u32);
                    }
                });
                g.finish::<F32>((batch, 0), (row, col), v);
            }
            o += GEMV_TMA_THREADS;
        }
        cluster_sync();
    }
}

macro_rules! gemv_tma_kernels {
    ($($name:ident: $nt:literal;)*) => {$(
        /// Few-row f32 GEMM fed by TMA; see the module documentation. Arguments as `gemv_*`'s,
        /// with A's and B's tensor maps in place of their pointers and no workspace (slices
        /// meet in their cluster).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            _maps: TensorMaps, c: *const f32, bias: *const f32, out: *mut f32, m: usize, n: usize,
            k: usize, k_chunk: usize, stride_a: usize, stride_b: usize, stride_c: usize, alpha: f32,
            beta: f32, activation: u32,
        ) {
            let maps = kernel_param_address!($name, 0);
            let (a, b, ws) = (core::ptr::null(), core::ptr::null(), core::ptr::null_mut());
            let g = Gemv {
                a, b, c, bias, out, ws, m, n, k, k_chunk, stride_a, stride_b, stride_c, alpha, beta,
                activation,
            };
            gemv_tma::<$nt>(maps, g)
        }
    )*};
}

gemv_tma_kernels! {
    gemv_tma_f32_nn: false;
    gemv_tma_f32_nt: true;
}
