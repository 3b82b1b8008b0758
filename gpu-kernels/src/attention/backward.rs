//! The attention backward: `attention_bwd_dot_<dtype>` (Δ_i = rowsum(dO ∘ O)),
//! `attention_bwd_dq_<dtype>_d<D>` (dQ), `attention_bwd_dkdv_<dtype>_d<D>` (dK and dV per query
//! head, f32) and `attention_bwd_heads_<dtype>` (the sum over a GQA group, to the dtype).
//!
//! Floor: 10·B·Hq·Sq·Sk·D flops for the five products (dV = Pᵀ dO, dP = dO Vᵀ, dQ = dS K,
//! dK = dSᵀ Q, and the recomputed S = Q Kᵀ), half under a causal mask. These kernels spend 14
//! (S and dP are recomputed in both the dQ and the dK/dV kernel): the price of having no atomics,
//! so every gradient is summed in one fixed order (deterministic) without an Sk/64-fold dQ
//! scratch.
//!
//! P = exp(S·scale − lse) is recomputed from the forward's log-sum-exp (+∞ for rows that saw no
//! key: P = 0), dS = P ∘ (dP − Δ), dQ = scale · dS K, dK = scale · dSᵀ Q, dV = Pᵀ dO.
//!
//! dQ block (grid `(⌈Sq/64⌉, Hq, B · passes)`, shared `attn_dq_shared_bytes(D)`): the forward's
//! structure, 16 query rows per warp, K/V tiles double-buffered. dK/dV block (grid
//! `(⌈Sk/64⌉, Hq, B · passes)`, shared `attn_dkdv_shared_bytes(D)`): 16 keys per warp, K and V
//! tiles held, query tiles of 32 double-buffered; the warp computes Sᵀ = K Qᵀ and dPᵀ = V dOᵀ
//! so that Pᵀ and dSᵀ are already in the A-operand layout of dV += Pᵀ dO and dK += dSᵀ Q. Block
//! `ATTN_THREADS` for both.
use super::{block_coords, load_tile, masked, rows_by_rows, store_strip, strip_by_tile};
use crate::prelude::*;
use crate::shapes::{attn_row, ATTN_BLOCK_M as BM, ATTN_BLOCK_N as BN, ATTN_BWD_BLOCK_Q as BQ};

const LOG2_E: f32 = core::f32::consts::LOG2_E;

/// Δ for each of `rows` rows of `d` elements: one warp per row.
#[inline(always)]
unsafe fn row_dot<H: HalfFloat>(dout: *const u16, out: *const u16, delta: *mut f32, rows: usize, d: usize) {
    let warps = grid_dim_x() * block_dim_x() / 32;
    let mut row = global_x() / 32;
    while row < rows {
        let mut s = 0.0f32;
        let mut c = lane();
        while c < d {
            s += H::to_f32(load_nc_u16(dout.add(row * d + c))) * H::to_f32(load_nc_u16(out.add(row * d + c)));
            c += 32;
        }
        let s = warp_reduce::<Sum>(s);
        if lane() == 0 {
            store_f32(delta.add(row), s);
        }
        row += warps;
    }
}

#[inline(always)]
unsafe fn dq<H: MmaInput, const D: usize, const NO: usize>(
    (q, k, v, dout, lse, delta, dq): (
        *const u16,
        *const u16,
        *const u16,
        *const u16,
        *const f32,
        *const f32,
        *mut u16,
    ),
    (sq, sk, hq, hkv): (usize, usize, usize, usize),
    (scale, scale_log2): (f32, f32),
    causal: bool,
) {
    let passes = D / (NO * 8);
    let (tile, h, b, pass) = block_coords(passes);
    let q0 = tile * BM;
    let head = (b * hq + h) * sq;
    let kv = (b * hkv + h / (hq / hkv)) * sk * D;
    let (k, v) = (k.add(kv), v.add(kv));
    let offset = sk as isize - sq as isize;
    let kv_end =
        if causal { (q0 as isize + BM as isize + offset).clamp(0, sk as isize) as usize } else { sk };
    let tiles = kv_end.div_ceil(BN);

    let smem = dynamic_shared::<u16>();
    let (tq, tdo) = (smem, smem.add(BM * attn_row(D)));
    let tk = |s: usize| smem.add((2 * BM + 2 * s * BN) * attn_row(D));
    let tv = |s: usize| smem.add((2 * BM + (2 * s + 1) * BN) * attn_row(D));
    let load_kv = |j: usize| {
        let (s, k0) = (j % 2, j * BN);
        // SAFETY: stage `s` holds a K and a V tile; rows ≥ Sk are zero-filled.
        unsafe {
            load_tile::<D>(tk(s), k.add(k0 * D), BN, sk - k0);
            load_tile::<D>(tv(s), v.add(k0 * D), BN, sk - k0);
        }
    };
    load_tile::<D>(tq, q.add((head + q0) * D), BM, sq - q0);
    load_tile::<D>(tdo, dout.add((head + q0) * D), BM, sq - q0);
    if tiles > 0 {
        load_kv(0);
    }
    cp_async_commit();

    let (w, g, t) = (warp_in_block(), lane() / 4, lane() % 4);
    let rows = [q0 + w * 16 + g, q0 + w * 16 + g + 8];
    let mut lse2 = [f32::INFINITY; 2];
    let mut dl = [0.0f32; 2];
    unroll!(i in [0, 1] => {
        if rows[i] < sq {
            lse2[i] = *lse.add(head + rows[i]) * LOG2_E;
            dl[i] = *delta.add(head + rows[i]);
        }
    });
    let mut acc = [[[0.0f32; 4]; NO]];
    for j in 0..tiles {
        cp_async_wait::<0>();
        sync_threads();
        if j + 1 < tiles {
            load_kv(j + 1);
        }
        cp_async_commit();
        let k0 = j * BN;
        let (mut s, mut dp) = ([[[0.0f32; 4]; 8]], [[[0.0f32; 4]; 8]]);
        rows_by_rows::<H, D, 1, 8>(tq, w * 16, tk(j % 2), &mut s);
        rows_by_rows::<H, D, 1, 8>(tdo, w * 16, tv(j % 2), &mut dp);
        let (s, dp) = (&mut s[0], &dp[0]);
        let edge = k0 + BN > sk || (causal && (k0 + BN - 1) as isize > (q0 + w * 16) as isize + offset);
        unroll!(nt in [0, 1, 2, 3, 4, 5, 6, 7] => {
            unroll!(e in [0, 1, 2, 3] => {
                let key = k0 + nt * 8 + 2 * t + e % 2;
                let p = if edge && masked(key, rows[e / 2], sk, causal, offset) {
                    0.0
                } else {
                    exp2_approx(s[nt][e] * scale_log2 - lse2[e / 2])
                };
                s[nt][e] = p * (dp[nt][e] - dl[e / 2]);
            });
        });
        strip_by_tile::<H, D, 1, 8, NO>(&[*s], tk(j % 2), pass * NO * 8, &mut acc);
    }
    cp_async_wait::<0>();
    store_strip::<H, NO>(&acc[0], [scale; 2], dq.add(head * D), (rows, sq, D, pass * NO * 8));
}

#[inline(always)]
unsafe fn dkdv<H: MmaInput, const D: usize, const NO: usize>(
    (q, k, v, dout, lse, delta, dk, dv): (
        *const u16,
        *const u16,
        *const u16,
        *const u16,
        *const f32,
        *const f32,
        *mut f32,
        *mut f32,
    ),
    (sq, sk, hq, hkv): (usize, usize, usize, usize),
    (scale, scale_log2): (f32, f32),
    causal: bool,
) {
    let passes = D / (NO * 8);
    let (tile, h, b, pass) = block_coords(passes);
    let k0 = tile * BN;
    let head = (b * hq + h) * sq;
    let kv = (b * hkv + h / (hq / hkv)) * sk * D;
    let offset = sk as isize - sq as isize;
    // The first query that sees key k0 under the mask.
    let q_lo = if causal { (k0 as isize - offset).max(0) as usize } else { 0 };
    let first = q_lo / BQ;
    let last = if q_lo < sq { sq.div_ceil(BQ) } else { first };

    let smem = dynamic_shared::<u16>();
    let (tk, tv) = (smem, smem.add(BN * attn_row(D)));
    let tq = |s: usize| smem.add((2 * BN + 2 * s * BQ) * attn_row(D));
    let tdo = |s: usize| smem.add((2 * BN + (2 * s + 1) * BQ) * attn_row(D));
    let stats = smem.add((2 * BN + 4 * BQ) * attn_row(D)) as *mut f32;
    // Per stage: BQ log-sum-exps (·log2 e), then BQ Δs.
    let lse_s = |s: usize| stats.add(2 * s * BQ);
    let dl_s = |s: usize| stats.add((2 * s + 1) * BQ);
    let load_q = |i: usize| {
        let (s, r0) = ((i - first) % 2, i * BQ);
        // SAFETY: stage `s` holds a Q and a dO tile and BQ statistics of each kind; rows ≥ Sq are
        // zero-filled (their P is 0 through lse = +∞). The statistics are plain stores, ordered
        // before their use by the barrier that also orders the copies.
        unsafe {
            load_tile::<D>(tq(s), q.add((head + r0) * D), BQ, sq - r0);
            load_tile::<D>(tdo(s), dout.add((head + r0) * D), BQ, sq - r0);
            let t = thread_x();
            if t < BQ {
                let ok = r0 + t < sq;
                *lse_s(s).add(t) = if ok { *lse.add(head + r0 + t) * LOG2_E } else { f32::INFINITY };
                *dl_s(s).add(t) = if ok { *delta.add(head + r0 + t) } else { 0.0 };
            }
        }
    };
    load_tile::<D>(tk, k.add(kv + k0 * D), BN, sk - k0);
    load_tile::<D>(tv, v.add(kv + k0 * D), BN, sk - k0);
    if first < last {
        load_q(first);
    }
    cp_async_commit();

    let (w, g, t) = (warp_in_block(), lane() / 4, lane() % 4);
    let keys = [k0 + w * 16 + g, k0 + w * 16 + g + 8];
    let (mut acc_dk, mut acc_dv) = ([[[0.0f32; 4]; NO]], [[[0.0f32; 4]; NO]]);
    for i in first..last {
        cp_async_wait::<0>();
        // Query tile i and its statistics are in place, and every warp is done with i − 1's
        // stage.
        sync_threads();
        if i + 1 < last {
            load_q(i + 1);
        }
        cp_async_commit();
        let stage = (i - first) % 2;
        let r0 = i * BQ;
        let (mut st, mut dpt) = ([[[0.0f32; 4]; 4]], [[[0.0f32; 4]; 4]]);
        rows_by_rows::<H, D, 1, 4>(tk, w * 16, tq(stage), &mut st);
        rows_by_rows::<H, D, 1, 4>(tv, w * 16, tdo(stage), &mut dpt);
        let (st, dpt) = (&mut st[0], &mut dpt[0]);
        let edge = causal && (k0 + w * 16 + 15) as isize > r0 as isize + offset;
        unroll!(nt in [0, 1, 2, 3] => {
            unroll!(e in [0, 1, 2, 3] => {
                let col = nt * 8 + 2 * t + e % 2;
                let p = if edge && masked(keys[e / 2], r0 + col, sk, causal, offset) {
                    0.0
                } else {
                    exp2_approx(st[nt][e] * scale_log2 - *lse_s(stage).add(col))
                };
                st[nt][e] = p;
                dpt[nt][e] = p * (dpt[nt][e] - *dl_s(stage).add(col));
            });
        });
        strip_by_tile::<H, D, 1, 4, NO>(&[*st], tdo(stage), pass * NO * 8, &mut acc_dv);
        strip_by_tile::<H, D, 1, 4, NO>(&[*dpt], tq(stage), pass * NO * 8, &mut acc_dk);
    }
    cp_async_wait::<0>();
    let part = (b * hq + h) * sk * D;
    let (dk, dv) = (dk.add(part), dv.add(part));
    let (acc_dk, acc_dv) = (&acc_dk[0], &acc_dv[0]);
    unroll!(half in [0, 1] => {
        if keys[half] < sk {
            let at = keys[half] * D + pass * NO * 8 + 2 * t;
            unroll!(n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                if n < NO {
                    let e = 2 * half;
                    store_f32x2(dk.add(at + n * 8), [acc_dk[n][e] * scale, acc_dk[n][e + 1] * scale]);
                    store_f32x2(dv.add(at + n * 8), [acc_dv[n][e], acc_dv[n][e + 1]]);
                }
            });
        }
    });
}

/// `out[b, hk, ..] = Σ_{g < group} part[b, hk·group + g, ..]` in the dtype; `per_head` elements
/// per head, `hkv` kv heads.
#[inline(always)]
unsafe fn sum_heads<H: HalfFloat>(
    part: *const f32,
    out: *mut u16,
    n: usize,
    per_head: usize,
    hkv: usize,
    group: usize,
) {
    for i in grid_stride(n) {
        let (bh, r) = (i / per_head, i % per_head);
        let (b, hk) = (bh / hkv, bh % hkv);
        let base = ((b * hkv + hk) * group) * per_head + r;
        let mut s = 0.0f32;
        for gi in 0..group {
            s += load_nc_f32(part.add(base + gi * per_head));
        }
        store_u16(out.add(i), H::from_f32(s));
    }
}

macro_rules! aux_kernels {
    ($($dot:ident, $heads:ident: $h:ty;)*) => {$(
        /// Δ = rowsum(dO ∘ O) over `rows` rows of `d`; any 1-D grid of whole warps.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dot(dout: *const u16, out: *const u16, delta: *mut f32, rows: usize, d: usize) {
            row_dot::<$h>(dout, out, delta, rows, d)
        }
        /// The dK or dV of each kv head from the f32 per-query-head parts `[B, Hq, Sk, D]`
        /// (`n` = B·Hkv·Sk·D outputs, `per_head` = Sk·D); any 1-D grid.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $heads(part: *const f32, out: *mut u16, n: usize, per_head: usize, hkv: usize, group: usize) {
            sum_heads::<$h>(part, out, n, per_head, hkv, group)
        }
    )*};
}

aux_kernels! {
    attention_bwd_dot_f16, attention_bwd_heads_f16: F16;
    attention_bwd_dot_bf16, attention_bwd_heads_bf16: BF16;
}

macro_rules! backward_kernels {
    ($($dq:ident, $dkdv:ident: $h:ty, $d:literal, $no:literal;)*) => {$(
        /// dQ `[B, Hq, Sq, D]` in the dtype; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dq(
            q: *const u16, k: *const u16, v: *const u16, dout: *const u16, lse: *const f32, delta: *const f32,
            dq_out: *mut u16, sq: usize, sk: usize, hq: usize, hkv: usize, scale: f32, scale_log2: f32, causal: u32,
        ) {
            dq::<$h, $d, $no>((q, k, v, dout, lse, delta, dq_out), (sq, sk, hq, hkv), (scale, scale_log2), causal != 0)
        }
        /// dK and dV per query head, f32 `[B, Hq, Sk, D]`; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dkdv(
            q: *const u16, k: *const u16, v: *const u16, dout: *const u16, lse: *const f32, delta: *const f32,
            dk: *mut f32, dv: *mut f32, sq: usize, sk: usize, hq: usize, hkv: usize, scale: f32, scale_log2: f32,
            causal: u32,
        ) {
            dkdv::<$h, $d, $no>((q, k, v, dout, lse, delta, dk, dv), (sq, sk, hq, hkv), (scale, scale_log2), causal != 0)
        }
    )*};
}

backward_kernels! {
    attention_bwd_dq_f16_d32, attention_bwd_dkdv_f16_d32: F16, 32, 4;
    attention_bwd_dq_f16_d64, attention_bwd_dkdv_f16_d64: F16, 64, 8;
    attention_bwd_dq_f16_d96, attention_bwd_dkdv_f16_d96: F16, 96, 12;
    attention_bwd_dq_f16_d128, attention_bwd_dkdv_f16_d128: F16, 128, 16;
    attention_bwd_dq_f16_d256, attention_bwd_dkdv_f16_d256: F16, 256, 16;
    attention_bwd_dq_bf16_d32, attention_bwd_dkdv_bf16_d32: BF16, 32, 4;
    attention_bwd_dq_bf16_d64, attention_bwd_dkdv_bf16_d64: BF16, 64, 8;
    attention_bwd_dq_bf16_d96, attention_bwd_dkdv_bf16_d96: BF16, 96, 12;
    attention_bwd_dq_bf16_d128, attention_bwd_dkdv_bf16_d128: BF16, 128, 16;
    attention_bwd_dq_bf16_d256, attention_bwd_dkdv_bf16_d256: BF16, 256, 16;
}
