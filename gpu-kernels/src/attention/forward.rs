//! `attention_fwd_<dtype>_d<D>`: out = softmax(Q Kᵀ · scale) V and the per-row log-sum-exp,
//! never materialising the Sq × Sk scores (FlashAttention-2 order: one block per 64 or 128
//! query rows, K/V tiles streamed, online softmax in registers).
//!
//! Floor: 4·B·Hq·Sq·Sk·D flops (half of it under a causal mask); `mma.sync` peaks near half of
//! the H100's ~990 TFLOP/s dense 16-bit rate, so (4, 16, 4096, 128) (550 GFLOP) needs ≥ 0.56 ms
//! at the full rate and ≥ ~1.1 ms at `mma.sync`'s. Its bytes (q, k, v, out once: 268 MB,
//! 0.09 ms) are well below that.
//!
//! Block: 4 warps, 16·MT query rows each; K and V tiles of 64 keys double-buffered through
//! `cp.async`. The scores are scaled by `scale·log2 e` so that the softmax is `ex2`; the running
//! max of a row that has seen only masked keys is −∞, and its exponent base is taken as 0 so no
//! `−∞ − −∞` appears. Rows that see no key at all write 0 and a log-sum-exp of +∞ (the backward
//! then recomputes P = 0 for them). Head dims above `ATTN_MAX_OUT_COLS` run in passes over the
//! output columns (grid z = batch · passes), each recomputing the scores.
//!
//! Each warp takes `attn_fwd_m_tiles(D)` m-tiles of 16 rows (two up to D = 64: every K/V fragment
//! read from shared memory feeds two MMAs).
//!
//! Launch: block `ATTN_THREADS`, grid `(⌈Sq/(64·MT)⌉, Hq, B · D/DO)`, MT = `attn_fwd_m_tiles(D)`,
//! dynamic shared memory `attn_fwd_shared_bytes(D)`.
use super::{block_coords, load_tile, masked, rows_by_rows, store_strip, strip_by_tile};
use crate::prelude::*;
use crate::shapes::{attn_fwd_m_tiles, attn_row, ATTN_BLOCK_M as BM, ATTN_BLOCK_N as BN};

const LN_2: f32 = core::f32::consts::LN_2;

#[inline(always)]
fn max(a: f32, b: f32) -> f32 {
    if b > a {
        b
    } else {
        a
    }
}

/// MT: 16-row m-tiles per warp (the block covers 64·MT query rows); NO: 8-column accumulator
/// tiles of the output columns this block writes (DO = 8·NO).
#[inline(always)]
unsafe fn forward<H: MmaInput, const D: usize, const MT: usize, const NO: usize>(
    (q, k, v, out, lse): (*const u16, *const u16, *const u16, *mut u16, *mut f32),
    (sq, sk, hq, hkv): (usize, usize, usize, usize),
    scale_log2: f32,
    causal: bool,
) {
    let bm = BM * MT;
    let passes = D / (NO * 8);
    let (tile, h, b, pass) = block_coords(passes);
    let q0 = tile * bm;
    let head = (b * hq + h) * sq;
    let kv = (b * hkv + h / (hq / hkv)) * sk * D;
    let (k, v) = (k.add(kv), v.add(kv));
    let offset = sk as isize - sq as isize;
    let kv_end =
        if causal { (q0 as isize + bm as isize + offset).clamp(0, sk as isize) as usize } else { sk };
    let tiles = kv_end.div_ceil(BN);

    let smem = dynamic_shared::<u16>();
    let tq = smem;
    let tk = |s: usize| smem.add((bm + 2 * s * BN) * attn_row(D));
    let tv = |s: usize| smem.add((bm + (2 * s + 1) * BN) * attn_row(D));
    let load_kv = |j: usize| {
        let (s, k0) = (j % 2, j * BN);
        // SAFETY: stage `s` of the shared memory holds a K and a V tile; rows ≥ Sk are zero-filled.
        unsafe {
            load_tile::<D>(tk(s), k.add(k0 * D), BN, sk - k0);
            load_tile::<D>(tv(s), v.add(k0 * D), BN, sk - k0);
        }
    };
    load_tile::<D>(tq, q.add((head + q0) * D), bm, sq - q0);
    if tiles > 0 {
        load_kv(0);
    }
    cp_async_commit();

    let (w, g, t) = (warp_in_block(), lane() / 4, lane() % 4);
    let r0 = w * 16 * MT;
    // This lane's rows: m-tile mt, half i (g or g + 8).
    let row = |mt: usize, i: usize| q0 + r0 + mt * 16 + g + 8 * i;
    let mut acc = [[[0.0f32; 4]; NO]; MT];
    let (mut m, mut l) = ([[f32::NEG_INFINITY; 2]; MT], [[0.0f32; 2]; MT]);
    for j in 0..tiles {
        cp_async_wait::<0>();
        // Tile j has landed for every thread, and every warp is done with tile j − 1's stage.
        sync_threads();
        if j + 1 < tiles {
            load_kv(j + 1);
        }
        cp_async_commit();
        let k0 = j * BN;
        let mut s = [[[0.0f32; 4]; 8]; MT];
        rows_by_rows::<H, D, MT, 8>(tq, r0, tk(j % 2), &mut s);
        // Whether any (row, key) pair of this warp's strips is hidden.
        let edge = k0 + BN > sk || (causal && (k0 + BN - 1) as isize > (q0 + r0) as isize + offset);
        unroll!(mt in [0, 1] => {
            if mt < MT {
                let mut row_max = [f32::NEG_INFINITY; 2];
                unroll!(nt in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    unroll!(e in [0, 1, 2, 3] => {
                        let key = k0 + nt * 8 + 2 * t + e % 2;
                        let x = if edge && masked(key, row(mt, e / 2), sk, causal, offset) {
                            f32::NEG_INFINITY
                        } else {
                            s[mt][nt][e] * scale_log2
                        };
                        s[mt][nt][e] = x;
                        row_max[e / 2] = max(row_max[e / 2], x);
                    });
                });
                let mut base = [0.0f32; 2];
                let mut alpha = [0.0f32; 2];
                unroll!(i in [0, 1] => {
                    let mx = max(row_max[i], shfl_xor(row_max[i], 1));
                    let mx = max(mx, shfl_xor(mx, 2));
                    let m_new = max(m[mt][i], mx);
                    base[i] = if m_new == f32::NEG_INFINITY { 0.0 } else { m_new };
                    alpha[i] = exp2_approx(m[mt][i] - base[i]);
                    m[mt][i] = m_new;
                    l[mt][i] *= alpha[i];
                });
                unroll!(nt in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    unroll!(e in [0, 1, 2, 3] => {
                        let p = exp2_approx(s[mt][nt][e] - base[e / 2]);
                        s[mt][nt][e] = p;
                        l[mt][e / 2] += p;
                    });
                });
                unroll!(n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                    if n < NO {
                        unroll!(e in [0, 1, 2, 3] => { acc[mt][n][e] *= alpha[e / 2]; });
                    }
                });
            }
        });
        strip_by_tile::<H, D, MT, 8, NO>(&s, tv(j % 2), pass * NO * 8, &mut acc);
    }
    cp_async_wait::<0>();

    unroll!(mt in [0, 1] => {
        if mt < MT {
            let mut inv = [0.0f32; 2];
            unroll!(i in [0, 1] => {
                let sum = l[mt][i] + shfl_xor(l[mt][i], 1);
                let sum = sum + shfl_xor(sum, 2);
                inv[i] = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                if pass == 0 && t == 0 && row(mt, i) < sq {
                    let v = if sum > 0.0 { (m[mt][i] + log2_approx(sum)) * LN_2 } else { f32::INFINITY };
                    store_f32(lse.add(head + row(mt, i)), v);
                }
            });
            store_strip::<H, NO>(&acc[mt], inv, out.add(head * D), ([row(mt, 0), row(mt, 1)], sq, D, pass * NO * 8));
        }
    });
}

macro_rules! forward_kernels {
    ($($name:ident: $h:ty, $d:literal, $mt:literal, $no:literal;)*) => {$(
        const _: () = assert!(attn_fwd_m_tiles($d) == $mt);
        /// Attention forward; see the module documentation. `lse` is f32 `[B, Hq, Sq]`;
        /// `scale_log2` = softmax scale · log2 e; `causal` 0 or 1.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            q: *const u16, k: *const u16, v: *const u16, out: *mut u16, lse: *mut f32,
            sq: usize, sk: usize, hq: usize, hkv: usize, scale_log2: f32, causal: u32,
        ) {
            forward::<$h, $d, $mt, $no>((q, k, v, out, lse), (sq, sk, hq, hkv), scale_log2, causal != 0)
        }
    )*};
}

forward_kernels! {
    attention_fwd_f16_d32: F16, 32, 2, 4;
    attention_fwd_f16_d64: F16, 64, 2, 8;
    attention_fwd_f16_d96: F16, 96, 1, 12;
    attention_fwd_f16_d128: F16, 128, 1, 16;
    attention_fwd_f16_d256: F16, 256, 1, 16;
    attention_fwd_bf16_d32: BF16, 32, 2, 4;
    attention_fwd_bf16_d64: BF16, 64, 2, 8;
    attention_fwd_bf16_d96: BF16, 96, 1, 12;
    attention_fwd_bf16_d128: BF16, 128, 1, 16;
    attention_fwd_bf16_d256: BF16, 256, 1, 16;
}
