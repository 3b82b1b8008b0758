//! `attention_fwd_wgmma_<dtype>_d<D>` (D = 64, 128; sm_90a module `attention_sm90a`): the
//! forward of [`super::forward`] (same outputs, same contract) on Hopper's asynchronous tensor
//! cores, in FlashAttention-3's shape.
//!
//! Floor: 4·B·Hq·Sq·Sk·D flops (half under a causal mask) at the H100's ~990 TFLOP/s dense
//! 16-bit `wgmma` rate: (4, 16, 4096, 128) is 550 GFLOP, ≥ 0.56 ms; (8, 12, 2048, 64) 206 GFLOP,
//! ≥ 0.21 ms. The exponentials bound it too: Sq·Sk `ex2` per head at 16 per clock per SM (132
//! SMs at 1.755 GHz: 3.7·10¹² a second) take 0.11 ms for (8, 12, 2048, 64), half its product
//! time at D = 64 and a quarter at D = 128, which is why the softmax must overlap the products.
//!
//! Block: three warpgroups over `ATTN_WGMMA_BLOCK_M` = 128 query rows. Warpgroup 0 gives its
//! registers away (`setmaxnreg`) and one of its threads issues the TMA copies: Q once, then K and
//! V tiles of `ATTN_WGMMA_BLOCK_N` keys into `attn_wgmma_stages(D)` shared stages, each tile as
//! D/64 panels of 64 columns (128 bytes: one 128-byte swizzle row) × its rows, zero-filled past
//! Sq or Sk. K and V have their own `full` and `empty` mbarriers, so S = Q Kᵀ starts before V
//! lands. Warpgroups 1 and 2 own 64 query rows each: S (64 × 128, f32 in registers) =
//! Q Kᵀ by `wgmma` with both operands K-major in shared memory; the online softmax in registers
//! (a row's 128 values sit in the four threads of a quad: two shuffles per reduction; the scale
//! folded into `ex2`'s argument, so the softmax scale must be positive); P rounded to 16 bits
//! in the registers that hold S, which are already the A fragments of `wgmma`'s register-A form;
//! O (64 × D, f32) += P V with V the N-major B operand. Each warpgroup issues S of tile j before
//! P V of tile j − 1 (FlashAttention-3's intra-warpgroup overlap), so the softmax of tile j runs
//! while the tensor cores multiply P V; O is rescaled once that product has landed. The two
//! warpgroups also take turns to issue their products (ping-pong on named barriers 1 and 2), so
//! that one's softmax overlaps the other's products.
//!
//! The softmax exists twice, with and without the mask tests, so that unmasked tiles (all but
//! the last and the diagonal ones) run it as one basic block: ptxas schedules basic blocks one at
//! a time, and a mask branch per column block serialised its latencies (1.2× on the whole
//! kernel). Between the softmax and the wait for P V sits the spin-wait for V of tile j: in one
//! basic block ptxas hoists that wait above the exponentials.
//!
//! Masks: keys ≥ Sk (TMA zero-filled) and, under `causal`, keys after the bottom-right aligned
//! diagonal become −∞ on the tiles that hold any (the others skip the test); tiles wholly after
//! the diagonal are never loaded, and blocks run last tile first so the longest rows start
//! first. A row that sees no key writes 0 and a log-sum-exp of +∞.
//!
//! Launch: block `ATTN_WGMMA_THREADS` (PTX `.maxntid` set by build.rs), grid `(⌈Sq/128⌉, Hq, B)`,
//! dynamic shared memory `attn_wgmma_shared_bytes(D)`; `maps` holds three tensor maps by value
//! (q, k, v; 4-D: D, rows, heads, batches, with any strides, so that q, k and v may be heads of
//! one packed projection output, or with `flat` 3-D: D, rows, batch · heads; boxes of 64 columns
//! × 128 rows; 128-byte swizzle; see `load_head_box`), which TMA reads in the kernel's
//! parameters. The output is written by address with `HeadStrides`.
use super::{block_coords, load_head_box, HeadStrides};
use crate::prelude::*;
use crate::shapes::{
    attn_wgmma_stages, TensorMaps, ATTN_WGMMA_BLOCK_M as BM, ATTN_WGMMA_BLOCK_N as BN,
    ATTN_WGMMA_PANEL as PANEL, ATTN_WGMMA_THREADS,
};

const LN_2: f32 = core::f32::consts::LN_2;
/// One row of a panel: the 128-byte swizzle width.
const ROW_BYTES: u32 = 128;
/// A 128-byte swizzle atom: 8 rows.
const ATOM_BYTES: u32 = 8 * ROW_BYTES;
/// Bytes of one panel of Q and of K or V.
const Q_PANEL: u32 = BM as u32 * ROW_BYTES;
const KV_PANEL: u32 = BN as u32 * ROW_BYTES;
const PRODUCER_REGS: u32 = 24;
const CONSUMER_REGS: u32 = 240;

const _: () = assert!(BM == 128 && BN == 128 && PANEL * 2 == ROW_BYTES as usize && ATTN_WGMMA_THREADS == 384);

/// The shared-memory layout of one block: Q's panels, then per stage K's and V's panels, then
/// the mbarriers (Q's full; per stage K full, K empty, V full, V empty).
#[derive(Clone, Copy)]
struct Layout {
    base: u32,
    stages: usize,
    panels: u32,
}

impl Layout {
    fn q(self) -> u32 {
        self.base
    }
    fn k(self, s: usize) -> u32 {
        self.base + self.panels * (Q_PANEL + 2 * s as u32 * KV_PANEL)
    }
    fn v(self, s: usize) -> u32 {
        self.k(s) + self.panels * KV_PANEL
    }
    fn barrier(self, i: usize) -> u32 {
        self.k(self.stages) + 8 * i as u32
    }
    fn q_full(self) -> u32 {
        self.barrier(0)
    }
    fn k_full(self, s: usize) -> u32 {
        self.barrier(1 + 4 * s)
    }
    fn k_empty(self, s: usize) -> u32 {
        self.barrier(2 + 4 * s)
    }
    fn v_full(self, s: usize) -> u32 {
        self.barrier(3 + 4 * s)
    }
    fn v_empty(self, s: usize) -> u32 {
        self.barrier(4 + 4 * s)
    }
}

/// NO: O's accumulators per thread (D / 2).
#[inline(always)]
unsafe fn forward<E: WgmmaHalf, const D: usize, const NO: usize>(
    (maps, out, lse): (*const u8, *mut u16, *mut f32),
    out_at: HeadStrides,
    (sq, sk, hq, hkv): (usize, usize, usize, usize),
    scale_log2: f32,
    (causal, flat): (bool, bool),
) where
    [f32; NO]: WgmmaTile,
{
    let t = thread_x();
    let (tile, h, b, _) = block_coords(1);
    let q0 = tile * BM;
    let (q_head, kv_head) = (b * hq + h, h / (hq / hkv));
    let offset = sk as isize - sq as isize;
    let kv_end =
        if causal { (q0 as isize + BM as isize + offset).clamp(0, sk as isize) as usize } else { sk };
    let tiles = kv_end.div_ceil(BN);
    let stages = attn_wgmma_stages(D);
    let panels = (D / PANEL) as u32;
    let base = (shared_addr(dynamic_shared::<u8>()) + ATOM_BYTES - 1) & !(ATOM_BYTES - 1);
    let at = Layout { base, stages, panels };
    if t == 0 {
        mbarrier_init(at.q_full(), 1);
        for s in 0..stages {
            mbarrier_init(at.k_full(s), 1);
            mbarrier_init(at.k_empty(s), 2);
            mbarrier_init(at.v_full(s), 1);
            mbarrier_init(at.v_empty(s), 2);
        }
        fence_mbarrier_init();
    }
    sync_threads();

    if t < 128 {
        setmaxnreg_dec::<PRODUCER_REGS>();
        if t == 0 && tiles > 0 {
            let (map_q, map_k, map_v) = (maps, maps.add(128), maps.add(256));
            let kv_bytes = panels * KV_PANEL;
            mbarrier_arrive_expect_tx(at.q_full(), panels * Q_PANEL);
            for p in 0..panels {
                let to = (at.q() + p * Q_PANEL, map_q, at.q_full());
                load_head_box(to, (p as usize * PANEL, q0), (h, b, hq), flat);
            }
            for j in 0..tiles {
                let s = j % stages;
                // The phase of the stage's empty barrier that frees what it held `stages` tiles ago.
                let freed = ((j / stages + 1) & 1) as u32;
                for (map, dst, full, empty) in [
                    (map_k, at.k(s), at.k_full(s), at.k_empty(s)),
                    (map_v, at.v(s), at.v_full(s), at.v_empty(s)),
                ] {
                    if j >= stages {
                        mbarrier_wait(empty, freed);
                    }
                    mbarrier_arrive_expect_tx(full, kv_bytes);
                    for p in 0..panels {
                        let to = (dst + p * KV_PANEL, map, full);
                        load_head_box(to, (p as usize * PANEL, j * BN), (kv_head, b, hkv), flat);
                    }
                }
            }
        }
        return;
    }

    setmaxnreg_inc::<CONSUMER_REGS>();
    let w = t / 128 - 1;
    let tw = t % 128;
    let (g, tq) = (tw % 32 / 4, tw % 4);
    // The warpgroup's first row, and this thread's two rows (accumulator halves 0 and 1).
    let wg_row = q0 + 64 * w;
    let row = |i: usize| wg_row + tw / 32 * 16 + g + 8 * i;
    let rows = Rows {
        first: wg_row as i32,
        mine: [row(0) as i32, row(1) as i32],
        key_lane: 2 * tq as i32,
        sk: sk as i32,
        causal,
        offset: offset as i32,
    };
    let mut o = [0.0f32; NO];
    // Running max (raw scores) and this thread's part of the row sums.
    let mut state = Softmax { m: [f32::NEG_INFINITY; 2], l: [0.0f32; 2], scale_log2 };
    let mut sc = [0.0f32; 64];
    let stage = |j: usize| (j % stages, ((j / stages) & 1) as u32);
    let release = |bar: u32| {
        if tw == 0 {
            // SAFETY: an initialised barrier of this block; one arrival per consumer warpgroup.
            unsafe { mbarrier_arrive(bar) };
        }
    };
    // Ping-pong (FlashAttention-3): the two warpgroups take turns to issue their products, so
    // that one's softmax runs while the other's products occupy the tensor cores. Warpgroup w
    // waits for its turn on named barrier 1 + w and hands the turn over on the other's; the
    // second warpgroup opens the first one's turn and skips the final hand-over, so every
    // barrier phase gets its 256 threads.
    let my_turn = || {
        // SAFETY: barriers 1 and 2 count the 128 threads of each consumer warpgroup: one syncs,
        // the other arrives, once per product phase (balanced as described above).
        unsafe {
            if w == 0 {
                named_barrier_sync::<1, 256>()
            } else {
                named_barrier_sync::<2, 256>()
            }
        }
    };
    let hand_over = || {
        // SAFETY: as in `my_turn`.
        unsafe {
            if w == 0 {
                named_barrier_arrive::<2, 256>()
            } else {
                named_barrier_arrive::<1, 256>()
            }
        }
    };
    if tiles > 0 {
        if w == 1 {
            hand_over();
        }
        mbarrier_wait(at.q_full(), 0);
        mbarrier_wait(at.k_full(0), 0);
        my_turn();
        scores::<E, D>(&mut sc, at, 0, w);
        hand_over();
        sc.wait::<0>();
        release(at.k_empty(0));
        state.update(&mut sc, 0, rows);
        mbarrier_wait(at.v_full(0), 0);
        let mut pa = probabilities::<E>(&sc);
        // FlashAttention-3's intra-warpgroup overlap: S of tile j is issued before P V of tile
        // j − 1, and the softmax of S runs while the tensor cores work on P V. The wait for V
        // of tile j (a spin loop) sits between the softmax and the wait for P V: in one basic
        // block, ptxas hoists that wait above the exponentials. The probabilities are pinned
        // above the spin loop, or LLVM sinks their exponentials to their use below it.
        for j in 1..tiles {
            let ((s, phase), sp) = (stage(j), stage(j - 1).0);
            mbarrier_wait(at.k_full(s), phase);
            my_turn();
            scores::<E, D>(&mut sc, at, s, w);
            values::<E, NO>(&mut o, &pa, at.v(sp));
            hand_over();
            sc.wait::<1>();
            release(at.k_empty(s));
            let alpha = state.update(&mut sc, (j * BN) as i32, rows);
            pin_values(&mut sc);
            mbarrier_wait(at.v_full(s), phase);
            o.wait::<0>();
            release(at.v_empty(sp));
            rescale(&mut o, alpha);
            pa = probabilities::<E>(&sc);
        }
        let sp = stage(tiles - 1).0;
        my_turn();
        values::<E, NO>(&mut o, &pa, at.v(sp));
        if w == 0 {
            hand_over();
        }
        o.wait::<0>();
        release(at.v_empty(sp));
    }
    let (m, l) = (state.m, state.l);

    let mut inv = [0.0f32; 2];
    unroll!(i in [0, 1] => {
        let sum = l[i] + shfl_xor(l[i], 1);
        let sum = sum + shfl_xor(sum, 2);
        inv[i] = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        if tq == 0 && row(i) < sq {
            let v = if sum > 0.0 { (m[i] * scale_log2 + log2_approx(sum)) * LN_2 } else { f32::INFINITY };
            store_f32(lse.add(q_head * sq + row(i)), v);
        }
    });
    unroll!(i in [0, 1] => {
        if row(i) < sq {
            let at_row = out.add(out_at.at(b, h, row(i)) + 2 * tq);
            unroll!(n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                if n < NO / 4 {
                    let (v0, v1) = (o[4 * n + 2 * i] * inv[i], o[4 * n + 2 * i + 1] * inv[i]);
                    store_u16x2(at_row.add(8 * n), E::from_f32(v0), E::from_f32(v1));
                }
            });
        }
    });
}

/// Issue (and commit) S = Q Kᵀ for warpgroup `w`'s 64 rows and the K tile of stage `s`.
///
/// # Safety
/// Q and stage `s`'s K tile have landed; every thread of the warpgroup calls it.
#[inline(always)]
unsafe fn scores<E: WgmmaHalf, const D: usize>(sc: &mut [f32; 64], at: Layout, s: usize, w: usize) {
    sc.fence();
    unroll!(kk in [0, 1, 2, 3, 4, 5, 6, 7] => {
        if kk < D / 16 {
            // k-steps of 32 bytes along a K-major panel row (the swizzle follows the address).
            let (p, col) = ((kk / 4) as u32, (kk % 4) as u32 * 32);
            let a = sw128_descriptor(at.q() + p * Q_PANEL + w as u32 * 64 * ROW_BYTES + col, 16, ATOM_BYTES);
            let b = sw128_descriptor(at.k(s) + p * KV_PANEL + col, 16, ATOM_BYTES);
            sc.mma_ss::<E, 0, 0>(a, b, kk > 0);
        }
    });
    wgmma_commit();
}

/// Issue (and commit) O += P V for the V tile at shared address `v`.
///
/// # Safety
/// The V tile has landed; `pa` stays unchanged until the group completes; every thread of the
/// warpgroup calls it.
#[inline(always)]
unsafe fn values<E: WgmmaHalf, const NO: usize>(o: &mut [f32; NO], pa: &[[u32; 4]; 8], v: u32)
where
    [f32; NO]: WgmmaTile,
{
    o.fence();
    unroll!(jj in [0, 1, 2, 3, 4, 5, 6, 7] => {
        // 16 keys = two atoms down the N-major V panels, which lie KV_PANEL apart along D.
        let b = sw128_descriptor(v + jj as u32 * 2 * ATOM_BYTES, KV_PANEL, ATOM_BYTES);
        o.mma_rs::<E, 1>(pa[jj], b, true);
    });
    wgmma_commit();
}

/// P rounded to 16 bits as `wgmma`'s register A operand: the accumulators of 8-column blocks
/// 2jj and 2jj + 1 are the A fragment of k16 block jj.
#[inline(always)]
fn probabilities<E: WgmmaHalf>(sc: &[f32; 64]) -> [[u32; 4]; 8] {
    let mut pa = [[0u32; 4]; 8];
    unroll!(jj in [0, 1, 2, 3, 4, 5, 6, 7] => {
        let x = |i: usize| pack_half2::<E>(sc[8 * jj + 2 * i], sc[8 * jj + 2 * i + 1]);
        pa[jj] = [x(0), x(1), x(2), x(3)];
    });
    pa
}

/// O *= alpha, row half by row half.
#[inline(always)]
fn rescale<const NO: usize>(o: &mut [f32; NO], alpha: [f32; 2]) {
    unroll!(n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
        if n < NO / 4 {
            unroll!(e in [0, 1, 2, 3] => { o[4 * n + e] *= alpha[e / 2]; });
        }
    });
}

/// Where a warpgroup's rows sit, for the masks; 32-bit (lengths below 2^31, checked by the
/// host), which halves the compares and the registers of 64-bit indices.
#[derive(Clone, Copy)]
struct Rows {
    /// The warpgroup's first query row.
    first: i32,
    /// This thread's two rows.
    mine: [i32; 2],
    /// This thread's first key column in each 8-column block.
    key_lane: i32,
    sk: i32,
    causal: bool,
    /// Sk − Sq.
    offset: i32,
}

/// A thread's online-softmax state for its two rows.
struct Softmax {
    m: [f32; 2],
    l: [f32; 2],
    scale_log2: f32,
}

impl Softmax {
    /// Turn the scores of keys `k0..k0 + 128` into probabilities relative to the new running
    /// max (masked keys: 0), fold them into the row sums, and return the factor that rescales
    /// what was accumulated before.
    #[inline(always)]
    fn update(&mut self, sc: &mut [f32; 64], k0: i32, r: Rows) -> [f32; 2] {
        // Whether any (row, key) pair of the warpgroup's rows is hidden. Two copies of the
        // softmax, so that the common one has no branch: a branch per column block splits it
        // into basic blocks that ptxas schedules one at a time.
        let bn = BN as i32;
        if k0 + bn > r.sk || (r.causal && k0 + bn - 1 > r.first + r.offset) {
            self.update_masked::<true>(sc, k0, r)
        } else {
            self.update_masked::<false>(sc, k0, r)
        }
    }

    /// [`Softmax::update`], hiding masked keys when `EDGE`.
    #[inline(always)]
    fn update_masked<const EDGE: bool>(&mut self, sc: &mut [f32; 64], k0: i32, r: Rows) -> [f32; 2] {
        // Four partial maxima (and sums) per row: independent chains, not one of 32 steps.
        let mut part = [[f32::NEG_INFINITY; 4]; 2];
        unroll!(n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
            unroll!(e in [0, 1, 2, 3] => {
                let key = k0 + (8 * n + e % 2) as i32 + r.key_lane;
                if EDGE && (key >= r.sk || (r.causal && key > r.mine[e / 2] + r.offset)) {
                    sc[4 * n + e] = f32::NEG_INFINITY;
                }
                part[e / 2][n % 4] = part[e / 2][n % 4].max(sc[4 * n + e]);
            });
        });
        let row_max = [0, 1].map(|i| part[i][0].max(part[i][1]).max(part[i][2].max(part[i][3])));
        let (mut base, mut alpha) = ([0.0f32; 2], [0.0f32; 2]);
        unroll!(i in [0, 1] => {
            let mx = row_max[i].max(shfl_xor(row_max[i], 1));
            let m_new = self.m[i].max(mx.max(shfl_xor(mx, 2)));
            // A row that has seen only masked keys keeps the max −∞; 0 avoids −∞ − −∞.
            base[i] = if m_new == f32::NEG_INFINITY { 0.0 } else { m_new * self.scale_log2 };
            alpha[i] = exp2_approx(self.m[i] * self.scale_log2 - base[i]);
            self.m[i] = m_new;
        });
        let mut sum = [[0.0f32; 4]; 2];
        unroll!(n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
            unroll!(e in [0, 1, 2, 3] => {
                let p = exp2_approx(fma(sc[4 * n + e], self.scale_log2, -base[e / 2]));
                sc[4 * n + e] = p;
                sum[e / 2][n % 4] += p;
            });
        });
        unroll!(i in [0, 1] => {
            self.l[i] = fma(self.l[i], alpha[i], (sum[i][0] + sum[i][1]) + (sum[i][2] + sum[i][3]));
        });
        alpha
    }
}

macro_rules! forward_wgmma_kernels {
    ($($name:ident: $e:ty, $d:literal;)*) => {$(
        /// Attention forward on `wgmma`; see the module documentation. `maps` holds q's, k's and
        /// v's tensor maps; row `r` of head `h` of batch `b` of the output starts at `out +
        /// b·out_batch + h·out_head + r·out_row` (`HeadStrides`); `lse` is f32 `[B, Hq, Sq]`;
        /// `scale_log2` = softmax scale · log2 e > 0; `causal` 0 or 1.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            _maps: TensorMaps, out: *mut u16, out_row: usize, out_head: usize, out_batch: usize,
            lse: *mut f32, sq: usize, sk: usize, hq: usize, hkv: usize, scale_log2: f32, causal: u32,
            flat: u32,
        ) {
            let maps = kernel_param_address!($name, 0);
            let out_at = HeadStrides { row: out_row, head: out_head, batch: out_batch };
            let modes = (causal != 0, flat != 0);
            forward::<$e, $d, { $d / 2 }>((maps, out, lse), out_at, (sq, sk, hq, hkv), scale_log2, modes)
        }
    )*};
}

forward_wgmma_kernels! {
    attention_fwd_wgmma_f16_d64: F16, 64;
    attention_fwd_wgmma_f16_d128: F16, 128;
    attention_fwd_wgmma_bf16_d64: BF16, 64;
    attention_fwd_wgmma_bf16_d128: BF16, 128;
}
