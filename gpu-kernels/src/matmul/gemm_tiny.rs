//! Tiny SIMT f32 GEMM: `out = act(alpha · op(A) · op(B) + beta · C + bias)` for products whose
//! whole output is a few thousand values and whose K is short (an MLP layer on a mini-batch:
//! 64×128 outputs over K = 64), batched over `gridDim.z`.
//!
//! Floor: latency, not flops or bytes. (64, 128, 64) is 1 MFLOP and 80 KB: a few µs is one
//! global-memory round trip per K-chunk plus the launch. The tiled SIMT kernels run such a product
//! as two 64×64 blocks walking K in steps of 16 behind a barrier each (10–15 µs measured); here
//! small tiles give many blocks, a whole chunk of 32 k loads at once, and the next chunk's loads
//! are issued before this chunk's FMAs. (Loading every chunk of K before the first FMA, eight
//! unrolled chunk bodies, measured slower: 2.9 → 4.2 µs at K = 64, the cold kernel's larger code.)
//! Tiles are 16×16 rather than 32×32: a thread's 2×2 outputs cost four shared loads a k, and the
//! eight warps of a 32×32 block on one SM queued ~1,000 cycles of shared-load issue a chunk
//! (~0.5 µs); four times the blocks of two warps each spread that over four times the SMs.
//!
//! Each of the 64 threads owns a 2×2 block of outputs (rows `2·(t / 8) + {0, 1}`, columns
//! `t % 8 + {0, 8}`). Operands are staged k-major; loads map consecutive threads to A's and B's
//! contiguous axis.
//! Launch: block `GEMM_TINY_THREADS`, grid `(⌈N/16⌉, ⌈M/16⌉, batch)`, no dynamic shared memory;
//! `k_chunk` must equal `k` (no split).
use super::epilogue;
use crate::prelude::*;
use crate::shapes::{GEMM_TILE_TINY, GEMM_TINY_KC as KC, GEMM_TINY_THREADS as THREADS};

const BM: usize = GEMM_TILE_TINY.0;
const BN: usize = GEMM_TILE_TINY.1;
/// Elements of each operand's chunk a thread loads.
const PER_THREAD: usize = BM * KC / THREADS;
const _: () = assert!(PER_THREAD == 8, "load_chunk unrolls eight values a thread");

/// A staged tile's row (one k) of `BM` values, padded by one word: a k-contiguous operand is
/// stored with consecutive lanes on consecutive k, which rows of an even length put in a few banks
/// (with 32 values, one bank: a 32-way conflict on every store, ~1 µs a chunk).
const ROW: usize = BM + 1;
const _: () = assert!(
    BM == BN && 2 * KC * ROW == 2 * 32 * 17 && THREADS == BM * BN / 4,
    "one padded row length for both tiles, as the shared array is sized"
);

shared_array!(static GEMM_TINY_TILES: [f32; 2 * 32 * 17]);

/// Columns apart of a thread's two output columns (and threads along a tile row).
const HALF: usize = BN / 2;

/// One chunk of A (`[KC][BM]`) or B (`[KC][BN]`) held in registers between load and store.
type Chunk = [f32; PER_THREAD];

/// Element `i` (of `BM·KC`) of this thread's share of a chunk: its (k, row-or-column) in the
/// tile, walking the operand's contiguous axis with consecutive threads.
#[inline(always)]
fn chunk_coords(i: usize, k_contiguous: bool) -> (usize, usize) {
    let idx = i * THREADS + thread_x();
    if k_contiguous {
        (idx % KC, idx / KC)
    } else {
        (idx / BM, idx % BM)
    }
}

/// This thread's share of the chunk at `k0` of an operand whose element (k, x) is at
/// `src[k·k_stride + x·x_stride]`, zero outside `k < k_len`, `x < x_len`.
#[inline(always)]
unsafe fn load_chunk(
    src: *const f32,
    (k_stride, x_stride): (usize, usize),
    k0: usize,
    (k_len, x_len): (usize, usize),
    x0: usize,
) -> Chunk {
    let mut v = [0.0f32; PER_THREAD];
    unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7] => {
        let (kk, xx) = chunk_coords(i, k_stride == 1);
        let (k, x) = (k0 + kk, x0 + xx);
        if k < k_len && x < x_len {
            v[i] = load_f32(src.add(k * k_stride + x * x_stride));
        }
    });
    v
}

/// Store a chunk into its k-major tile `[KC][ROW]`.
#[inline(always)]
unsafe fn store_chunk(tile: *mut f32, v: &Chunk, k_contiguous: bool) {
    unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7] => {
        let (kk, xx) = chunk_coords(i, k_contiguous);
        *tile.add(kk * ROW + xx) = v[i];
    });
}

#[inline(always)]
unsafe fn gemm_tiny<const TA: bool, const TB: bool>(
    a: *const f32,
    b: *const f32,
    (c, bias, out): (*const f32, *const f32, *mut f32),
    (m, n, k): (usize, usize, usize),
    (stride_a, stride_b, stride_c): (usize, usize, usize),
    (alpha, beta, activation): (f32, f32, u32),
) {
    let (m0, n0, z) = (block_y() * BM, block_x() * BN, block_z());
    let (a, b) = (a.add(z * stride_a), b.add(z * stride_b));
    // (k stride, row/column stride) of A's element (k, m) and B's (k, n).
    let a_strides = if TA { (m, 1) } else { (1, k) };
    let b_strides = if TB { (1, k) } else { (n, 1) };
    let tiles = shared_ptr(&raw mut GEMM_TINY_TILES);
    let (tile_a, tile_b) = (tiles, tiles.add(KC * ROW));
    let (tr, tc) = (thread_x() / HALF, thread_x() % HALF);
    let mut acc = [[0.0f32; 2]; 2];
    let mut next = (load_chunk(a, a_strides, 0, (k, m), m0), load_chunk(b, b_strides, 0, (k, n), n0));
    let mut k0 = 0;
    while k0 < k {
        store_chunk(tile_a, &next.0, a_strides.0 == 1);
        store_chunk(tile_b, &next.1, b_strides.0 == 1);
        sync_threads();
        if k0 + KC < k {
            next = (
                load_chunk(a, a_strides, k0 + KC, (k, m), m0),
                load_chunk(b, b_strides, k0 + KC, (k, n), n0),
            );
        }
        for kk in 0..KC {
            let (a0, a1) = (*tile_a.add(kk * ROW + 2 * tr), *tile_a.add(kk * ROW + 2 * tr + 1));
            let (b0, b1) = (*tile_b.add(kk * ROW + tc), *tile_b.add(kk * ROW + tc + HALF));
            acc[0][0] = fma(a0, b0, acc[0][0]);
            acc[0][1] = fma(a0, b1, acc[0][1]);
            acc[1][0] = fma(a1, b0, acc[1][0]);
            acc[1][1] = fma(a1, b1, acc[1][1]);
        }
        sync_threads();
        k0 += KC;
    }
    let (c, out) = (c.add(z * stride_c), out.add(z * m * n));
    let has_c = !c.is_null() && beta != 0.0;
    unroll!(i in [0, 1] => {
        let row = m0 + 2 * tr + i;
        unroll!(j in [0, 1] => {
            let col = n0 + tc + HALF * j;
            if row < m && col < n {
                let beta_c = if has_c { beta * load_f32(c.add(row * n + col)) } else { 0.0 };
                let bias = if bias.is_null() { 0.0 } else { load_f32(bias.add(col)) };
                store_f32(out.add(row * n + col), epilogue(acc[i][j], alpha, beta_c, bias, activation));
            }
        });
    });
}

macro_rules! tiny_kernels {
    ($($name:ident: $ta:literal, $tb:literal;)*) => {$(
        /// Tiny SIMT f32 GEMM; see the module documentation. Arguments as the SIMT GEMM's
        /// (`k_chunk == k`).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            a: *const f32, b: *const f32, c: *const f32, bias: *const f32, out: *mut f32,
            m: usize, n: usize, k: usize, _k_chunk: usize, stride_a: usize, stride_b: usize,
            stride_c: usize, alpha: f32, beta: f32, activation: u32,
        ) {
            grid_dependency_sync();
            gemm_tiny::<$ta, $tb>(
                a, b, (c, bias, out), (m, n, k), (stride_a, stride_b, stride_c), (alpha, beta, activation),
            )
        }
    )*};
}

tiny_kernels! {
    gemm_f32_tiny_nn: false, false;
    gemm_f32_tiny_nt: false, true;
    gemm_f32_tiny_tn: true, false;
    gemm_f32_tiny_tt: true, true;
}
