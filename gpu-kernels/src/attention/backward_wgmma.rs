//! The attention backward on Hopper tensor cores (sm_90a module `attention_bwd_sm90a`), for
//! f16/bf16 and head dims 64 and 128: `attention_bwd_stats_<dtype>` (Δ = rowsum(dO ∘ O) and
//! lse · log2 e, padded per head to whole streamed query tiles), `attention_bwd_wgmma_dkdv_<dtype>_d<D>`
//! and `attention_bwd_wgmma_dq_<dtype>_d<D>`. The GQA head sum is `backward.rs`'s
//! `attention_bwd_heads_<dtype>`.
//!
//! Floor: 10·B·Hq·Sq·Sk·D flops for the five products of the math (half under a causal mask) at
//! the H100's ~990 TFLOP/s dense 16-bit `wgmma` rate: (8, 12, 2048, 64) 0.26 ms, (4, 16, 4096,
//! 128) 1.39 ms. These kernels run 14·B·Hq·Sq·Sk·D: S and dP are recomputed in both kernels, the
//! price of summing every gradient in one fixed order without atomics (deterministic), as the
//! `mma.sync` path does.
//!
//! Both kernels: one producer warpgroup, one of whose threads issues every TMA copy, and
//! `ATTN_WG_CONSUMERS` warpgroups of 64 rows each. Tiles are stored as D/64 panels of rows ×
//! 128 bytes, 128-byte swizzled (TMA boxes of 64 × 64), zero-filled past the sequence (so any
//! length works); each consumer holds its two own 64-row tiles, and the block streams tiles of
//! `attn_wg_streamed_rows` rows (128, but 64 queries in the dK/dV kernel at D = 128) through
//! `attn_wg_stages` stages (`full` mbarriers counted in bytes, `empty` ones by one arrival per consumer).
//!
//! Within a consumer the products of one tile overlap its exponentials: the score products go
//! in two commit groups, so P is computed while dP (or dPᵀ) runs, and dS while dV runs
//! (`wgmma.wait_group 1`); in the dQ kernel at D = 64 the next tile's score products also issue
//! behind this tile's dQ product. P and dS become register A operands by one
//! `cvt.rn.{bf16x2,f16x2}.f32` per pair; dSᵀ uses Pᵀ as rounded for dV.
//!
//! dK/dV block (grid `(⌈Sk/128⌉, Hq, B)`, keys held, queries streamed with their lse·log2 e and
//! Δ slices): Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (A and B from shared memory, both K-major), Pᵀ = 2^(Sᵀ ·
//! scale · log2 e − lse · log2 e) (lse per column), dSᵀ = Pᵀ ∘ (dPᵀ − Δ), then dV += Pᵀ dO and
//! dK += dSᵀ Q with Pᵀ and dSᵀ as register A operands (the accumulator layout of a 64×N tile is
//! `mma.m16n8k16`'s A layout after packing pairs) and dO, Q read N-major from the same tiles.
//! Output: f32 per query head `[B, Hq, Sk, D]` (summed over the GQA group by the head-sum
//! kernel), or the dtype directly when every kv head has one query head.
//!
//! dQ block (grid `(⌈Sq/128⌉, Hq, B)`, queries held, keys streamed): S = Q Kᵀ and dP = dO Vᵀ, P
//! from lse per row, dS = P ∘ (dP − Δ), dQ += dS K (K read N-major).
//!
//! Causal: tiles entirely above the diagonal are never loaded (or, for the one consumer of two
//! that a tile misses, not computed); the mask runs only on tiles that cross it. Queries past Sq
//! have lse = +∞ (P = 0) and Δ = 0; keys past Sk are masked in the dQ kernel and never stored by
//! the dK/dV kernel.
//!
//! Launch: block `ATTN_WG_THREADS` (PTX `.maxntid` set by build.rs), dynamic shared memory
//! `attn_wg_bwd_shared_bytes`; `maps` holds four tensor maps by value (q, k, v, dout; 4-D: D,
//! sequence, heads, batches, with any strides, so that they may be heads of packed projection
//! outputs, or with `flat` 3-D: D, sequence, batch · heads; boxes of 64 × 64, 128-byte swizzle;
//! see `load_head_box`), which TMA reads in the kernel's parameters. The gradients are written
//! by address with `HeadStrides`.
use super::{load_head_box, HeadStrides};
use crate::prelude::*;
use crate::shapes::{
    attn_wg_padded_rows, attn_wg_stages, attn_wg_streamed_rows, TensorMaps, ATTN_WG_CONSUMERS as CONSUMERS,
    ATTN_WG_PANEL_BYTES, ATTN_WG_ROWS as ROWS,
};
use core::ops::IndexMut;

const LOG2_E: f32 = core::f32::consts::LOG2_E;
const PANEL: u32 = ATTN_WG_PANEL_BYTES as u32;
/// A 128-byte swizzle atom: 8 rows of 128 bytes.
const ATOM: u32 = 1024;
/// Registers per thread after `setmaxnreg`: the consumers hold up to 224 f32 and packed values.
const PRODUCER_REGS: u32 = 24;
const CONSUMER_REGS: u32 = 240;

const _: () = assert!(ROWS == 64 && CONSUMERS == 2 && PANEL == 64 * 128);

/// The f32 accumulators of a 64 × N warpgroup tile: N = D (64 or 128) for the gradients, N =
/// the streamed rows (64 or 128) for the scores; `Operand` holds the tile as a register A
/// operand.
trait HeadTile: WgmmaTile + Copy + IndexMut<usize, Output = f32> {
    const ZERO: Self;
    type Operand: RegisterOperand;
}

impl HeadTile for [f32; 32] {
    const ZERO: Self = [0.0; 32];
    type Operand = [[u32; 4]; 4];
}

impl HeadTile for [f32; 64] {
    const ZERO: Self = [0.0; 64];
    type Operand = [[u32; 4]; 8];
}

/// The descriptor of k-step `kk` (columns 16kk..16kk + 16) of a tile at `tile` read K-major
/// (rows along M or N), its 64-column panels `panel` bytes apart.
#[inline(always)]
fn k_major(tile: u32, panel: u32, kk: usize) -> u64 {
    sw128_descriptor(tile + (kk / 4) as u32 * panel + (kk % 4) as u32 * 32, 16, ATOM)
}

/// The descriptor of k-step `j` (rows 16j..16j + 16) of a tile at `tile` read N-major: k along
/// its rows, N = D across its panels, `panel` bytes apart.
#[inline(always)]
fn n_major(tile: u32, panel: u32, j: usize) -> u64 {
    sw128_descriptor(tile + j as u32 * 2 * ATOM, panel, ATOM)
}

/// An accumulator tile as the k16 blocks of a register A operand.
#[inline(always)]
fn a_operand<E: WgmmaHalf, S: HeadTile>(x: &S) -> S::Operand {
    let mut a = S::Operand::ZERO;
    unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] => {
        if j < S::COLS / 16 {
            unroll!(r in [0, 1, 2, 3] => {
                a[j][r] = pack_half2::<E>(x[8 * j + 2 * r], x[8 * j + 2 * r + 1]);
            });
        }
    });
    a
}

/// The block's shared memory: per consumer a held tile of each kind (K and V, or Q and dO),
/// then per stage two streamed tiles, then per stage two statistics slices, then the
/// `mbarrier`s. `addr` is the shared address of the 1024-byte-aligned start, `ptr` the same
/// byte as a generic pointer.
struct Smem {
    addr: u32,
    ptr: *const u8,
    panels: usize,
    stages: usize,
    /// Rows of a streamed tile.
    streamed_rows: usize,
}

impl Smem {
    #[inline(always)]
    fn new(d: usize, keys: bool) -> Self {
        let raw = dynamic_shared::<u8>();
        let start = shared_addr(raw);
        let pad = (ATOM - start % ATOM) % ATOM;
        // SAFETY: the launch gives 1 KiB of slack for this alignment.
        let ptr = unsafe { raw.add(pad as usize) };
        let (stages, streamed_rows) = (attn_wg_stages(d, keys), attn_wg_streamed_rows(d, keys));
        let panels = d / 64;
        Smem { addr: start + pad, ptr, panels, stages, streamed_rows }
    }
    /// Bytes of one 64-column panel of a streamed tile.
    #[inline(always)]
    fn streamed_panel(&self) -> u32 {
        (self.streamed_rows / ROWS) as u32 * PANEL
    }
    #[inline(always)]
    fn held_bytes(&self) -> u32 {
        self.panels as u32 * PANEL
    }
    #[inline(always)]
    fn streamed_bytes(&self) -> u32 {
        self.panels as u32 * self.streamed_panel()
    }
    /// Bytes of one statistics slice.
    #[inline(always)]
    fn stats_bytes(&self) -> u32 {
        (self.streamed_rows * 4) as u32
    }
    /// Consumer `c`'s held tile of kind `which`.
    #[inline(always)]
    fn held(&self, which: usize, c: usize) -> u32 {
        self.addr + (which * CONSUMERS + c) as u32 * self.held_bytes()
    }
    /// Stage `s`'s streamed tile of kind `which`.
    #[inline(always)]
    fn streamed(&self, s: usize, which: usize) -> u32 {
        self.addr + 2 * CONSUMERS as u32 * self.held_bytes() + (2 * s + which) as u32 * self.streamed_bytes()
    }
    #[inline(always)]
    fn stats_offset(&self, s: usize, which: usize) -> u32 {
        2 * CONSUMERS as u32 * self.held_bytes()
            + 2 * self.stages as u32 * self.streamed_bytes()
            + (2 * s + which) as u32 * self.stats_bytes()
    }
    /// Stage `s`'s statistics slice `which` (0: lse · log2 e, 1: Δ), shared address.
    #[inline(always)]
    fn stats(&self, s: usize, which: usize) -> u32 {
        self.addr + self.stats_offset(s, which)
    }
    /// The same slice as a pointer.
    #[inline(always)]
    fn stats_ptr(&self, s: usize, which: usize) -> *const f32 {
        // SAFETY: inside the block's shared memory (see `attn_wg_bwd_shared_bytes`).
        unsafe { self.ptr.add(self.stats_offset(s, which) as usize) as *const f32 }
    }
    #[inline(always)]
    fn held_full(&self) -> u32 {
        self.addr + self.stats_offset(self.stages, 0)
    }
    #[inline(always)]
    fn full(&self, s: usize) -> u32 {
        self.held_full() + 8 * (1 + s) as u32
    }
    #[inline(always)]
    fn empty(&self, s: usize) -> u32 {
        self.held_full() + 8 * (1 + self.stages + s) as u32
    }
    /// Initialise the barriers (one thread), then the whole block synchronises.
    #[inline(always)]
    fn init(&self) {
        if thread_x() == 0 {
            // SAFETY: the barriers' own words, used by no thread before the block barrier below.
            unsafe {
                mbarrier_init(self.held_full(), 1);
                for s in 0..self.stages {
                    mbarrier_init(self.full(s), 1);
                    mbarrier_init(self.empty(s), CONSUMERS as u32);
                }
            }
            fence_mbarrier_init();
        }
        sync_threads();
    }
}

/// TMA: rows `row..row + rows` of head `h` of batch `b` of `heads` (all D columns: boxes of 64
/// rows × 64 columns, the panels of `rows` rows one after the other) into the tile at `dst`,
/// counted on `bar`; `flat`: see [`load_head_box`].
///
/// # Safety
/// As [`load_head_box`], `dst` a tile of `panels` panels of `rows` rows.
#[inline(always)]
unsafe fn load_tile(
    (dst, map, bar): (u32, *const u8, u32),
    (row, head): (usize, (usize, usize, usize)),
    (panels, rows): (usize, usize),
    flat: bool,
) {
    for p in 0..panels {
        for r in 0..rows / ROWS {
            let at = dst + ((p * rows / ROWS + r) as u32) * PANEL;
            load_head_box((at, map, bar), (p * 64, row + r * ROWS), head, flat);
        }
    }
}

/// The producer warpgroup: give registers away; thread 0 loads each consumer's two held tiles
/// (`held_maps`, rows `held_row + 64c` of head and batch `held_head`), then streams tiles
/// `first..last` (`streamed_maps`, rows from `i · streamed_rows` of `streamed_head`) and, when
/// `stats` is some (lse · log2 e and Δ, padded rows of `padded` per head, the streamed head's
/// at head index `b·Hq + h`), their slices.
///
/// # Safety
/// `maps` as in the module documentation; the statistics hold `padded` rows per head.
#[inline(always)]
unsafe fn produce(
    sm: &Smem,
    maps: *const u8,
    (held_maps, held_row, held_head): ([usize; 2], usize, (usize, usize, usize)),
    (streamed_maps, streamed_head): ([usize; 2], (usize, usize, usize)),
    (first, last): (usize, usize),
    stats: Option<(*const f32, *const f32, usize, usize)>,
    flat: bool,
) {
    setmaxnreg_dec::<PRODUCER_REGS>();
    if thread_x() != 0 {
        return;
    }
    let map = |i: usize| maps.add(128 * i);
    mbarrier_arrive_expect_tx(sm.held_full(), 2 * CONSUMERS as u32 * sm.held_bytes());
    for c in 0..CONSUMERS {
        for (which, &m) in held_maps.iter().enumerate() {
            let rows = (held_row + c * ROWS, held_head);
            load_tile((sm.held(which, c), map(m), sm.held_full()), rows, (sm.panels, ROWS), flat);
        }
    }
    let stats_bytes = if stats.is_some() { 2 * sm.stats_bytes() } else { 0 };
    for i in first..last {
        let (n, s) = (i - first, (i - first) % sm.stages);
        if n >= sm.stages {
            // The consumers are done with what this stage held `stages` tiles ago.
            mbarrier_wait(sm.empty(s), ((n / sm.stages - 1) & 1) as u32);
        }
        mbarrier_arrive_expect_tx(sm.full(s), 2 * sm.streamed_bytes() + stats_bytes);
        let rows = (i * sm.streamed_rows, streamed_head);
        for (which, &m) in streamed_maps.iter().enumerate() {
            let to = (sm.streamed(s, which), map(m), sm.full(s));
            load_tile(to, rows, (sm.panels, sm.streamed_rows), flat);
        }
        if let Some((lse2, delta, padded, stats_head)) = stats {
            let at = stats_head * padded + i * sm.streamed_rows;
            bulk_load(sm.stats(s, 0), lse2.add(at) as *const u8, sm.stats_bytes(), sm.full(s));
            bulk_load(sm.stats(s, 1), delta.add(at) as *const u8, sm.stats_bytes(), sm.full(s));
        }
    }
}

/// `acc = A · Bᵀ` over all D columns: A a held 64-row tile at `a`, B a streamed tile of
/// `S::COLS` rows at `b` whose panels are `b_panel` bytes apart, both K-major (S = Q Kᵀ,
/// dP = dO Vᵀ, Sᵀ = K Qᵀ, dPᵀ = V dOᵀ); issued, not waited for.
///
/// # Safety
/// Both tiles are complete in shared memory; every thread of the warpgroup calls it.
#[inline(always)]
unsafe fn rows_by_rows<E: WgmmaHalf, const D: usize, S: HeadTile>(
    acc: &mut S,
    a: u32,
    (b, b_panel): (u32, u32),
) {
    acc.fence();
    unroll!(kk in [0, 1, 2, 3, 4, 5, 6, 7] => {
        if kk < D / 16 {
            acc.mma_ss::<E, 0, 0>(k_major(a, PANEL, kk), k_major(b, b_panel, kk), kk > 0);
        }
    });
}

/// `s = A₀ · B₀ᵀ` and `dp = A₁ · B₁ᵀ` ([`rows_by_rows`]) in two commit groups, then wait until
/// only `dp` may be in flight (so are the products issued before, the previous tile's, whose
/// stage `running` then releases): `s` is ready, `dp` needs a `wait::<0>` or `wait::<1>` (if one
/// more group follows) before it is read.
///
/// # Safety
/// As [`rows_by_rows`].
#[inline(always)]
unsafe fn score_pair<E: WgmmaHalf, const D: usize, S: HeadTile>(
    (s, dp): (&mut S, &mut S),
    a: [u32; 2],
    (b, b_panel): ([u32; 2], u32),
    (running, tw): (&mut Option<u32>, usize),
) {
    rows_by_rows::<E, D, S>(s, a[0], (b[0], b_panel));
    wgmma_commit();
    rows_by_rows::<E, D, S>(dp, a[1], (b[1], b_panel));
    wgmma_commit();
    s.wait::<1>();
    release(running, tw);
}

/// `acc += X · B`: X a register A operand of `blocks` k16 blocks, B the streamed tile at `b`
/// (panels `b_panel` bytes apart) read N-major; issued, not waited for.
///
/// # Safety
/// `b` is complete in shared memory; every thread of the warpgroup calls it; `x` is not
/// written until the product completes.
#[inline(always)]
unsafe fn strip_by_tile<E: WgmmaHalf, T: HeadTile, X: RegisterOperand>(
    acc: &mut T,
    x: &mut X,
    (b, b_panel): (u32, u32),
    blocks: usize,
) {
    x.fence();
    acc.fence();
    unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] => {
        if j < blocks {
            acc.mma_rs::<E, 1>(x[j], n_major(b, b_panel, j), true);
        }
    });
}

/// Arrive on the `empty` barrier in `running` (one thread of the warpgroup, `tw` = 0), whose
/// stage's products have completed, and clear it.
#[inline(always)]
fn release(running: &mut Option<u32>, tw: usize) {
    if let Some(bar) = running.take() {
        if tw == 0 {
            // SAFETY: an initialised `empty` barrier of this block.
            unsafe { mbarrier_arrive(bar) };
        }
    }
}

/// `s[x] ← 2^(s[x] · scale_log2 − lse2(x))` over this thread's elements of a 64×N tile, 0 where
/// `MASK && hidden(x)`; element x sits in column 8·(x / 4) + 2t + x % 2 of row g + 8·(x % 4 / 2)
/// of its warp's 16 (see [`WgmmaTile`]).
#[inline(always)]
fn exponentiate<const MASK: bool, S: HeadTile>(
    s: &mut S,
    scale_log2: f32,
    lse2: impl Fn(usize) -> f32,
    hidden: impl Fn(usize) -> bool,
) {
    unroll!(x in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                  16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                  32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
                  48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63] => {
        if x < S::COLS / 2 {
            s[x] = if MASK && hidden(x) { 0.0 } else { exp2_approx(fma(s[x], scale_log2, -lse2(x))) };
        }
    });
}

/// The column of element x of a 64×N tile relative to this thread's first (2t).
#[inline(always)]
fn column(x: usize) -> i32 {
    (8 * (x / 4) + x % 2) as i32
}

/// Whether the (key, query) pair is hidden by the causal mask (`offset` = Sk − Sq).
#[inline(always)]
fn above_diagonal(key: usize, query: usize, offset: isize) -> bool {
    key as isize > query as isize + offset
}

#[inline(always)]
unsafe fn dkdv<E: WgmmaHalf, T: HeadTile, S: HeadTile, const D: usize>(
    maps: *const u8,
    (lse2, delta): (*const f32, *const f32),
    (dk, dv, dk16, dv16): (*mut f32, *mut f32, *mut u16, *mut u16),
    kv_at: HeadStrides,
    (sq, sk, hq, hkv): (usize, usize, usize, usize),
    (scale, scale_log2): (f32, f32),
    (causal, flat): (bool, bool),
) {
    let k0 = block_x() * ROWS * CONSUMERS;
    let (b, h) = (block_z(), block_y());
    let (qh, kvh) = (b * hq + h, h / (hq / hkv));
    let offset = sk as isize - sq as isize;
    // The first query that sees key k0 under the mask.
    let q_lo = if causal { (k0 as isize - offset).max(0) as usize } else { 0 };
    let first = q_lo / S::COLS;
    let last = if q_lo < sq { sq.div_ceil(S::COLS) } else { first };
    let sm = Smem::new(D, false);
    sm.init();
    let t = thread_x();
    if t < 128 {
        let stats = Some((lse2, delta, attn_wg_padded_rows(sq), qh));
        produce(&sm, maps, ([1, 2], k0, (kvh, b, hkv)), ([0, 3], (h, b, hq)), (first, last), stats, flat);
        return;
    }
    setmaxnreg_inc::<CONSUMER_REGS>();
    let (c, tw) = (t / 128 - 1, t % 128);
    let (w, g, q4) = (tw / 32, tw % 32 / 4, tw % 4);
    let kc0 = k0 + c * ROWS;
    let keys = [kc0 + 16 * w + g, kc0 + 16 * w + g + 8];
    let (ktile, vtile) = (sm.held(0, c), sm.held(1, c));
    let (mut acc_dk, mut acc_dv) = (T::ZERO, T::ZERO);
    mbarrier_wait(sm.held_full(), 0);
    for i in first..last {
        let (n, s) = (i - first, (i - first) % sm.stages);
        let r0 = i * S::COLS;
        mbarrier_wait(sm.full(s), ((n / sm.stages) & 1) as u32);
        if causal && above_diagonal(kc0, r0 + S::COLS - 1, offset) {
            // No key of this consumer is seen by the tile's queries.
            release(&mut Some(sm.empty(s)), tw);
            continue;
        }
        let (qt, dot) = (sm.streamed(s, 0), sm.streamed(s, 1));
        // Fresh each tile: a tile carried around the loop costs register copies that read
        // in-flight `wgmma` results (and so a compiler-inserted wait).
        let (mut st, mut dpt) = (S::ZERO, S::ZERO);
        let panel = sm.streamed_panel();
        score_pair::<E, D, S>((&mut st, &mut dpt), [ktile, vtile], ([qt, dot], panel), (&mut None, tw));
        let (lse_s, dl_s) = (sm.stats_ptr(s, 0), sm.stats_ptr(s, 1));
        let edge = causal && above_diagonal(kc0 + ROWS - 1, r0, offset);
        // SAFETY: columns below 64 of the stage's lse slice.
        let lse2 = |x: usize| unsafe { *lse_s.add(2 * q4 + column(x) as usize) };
        // Key k of row half h is hidden from column c iff c < k − r0 − offset − 2t.
        let gap = keys.map(|k| (k as isize - r0 as isize - offset) as i32 - 2 * q4 as i32);
        if edge {
            exponentiate::<true, S>(&mut st, scale_log2, lse2, |x| column(x) < gap[x % 4 / 2]);
        } else {
            exponentiate::<false, S>(&mut st, scale_log2, lse2, |_| false);
        }
        let mut pf = a_operand::<E, S>(&st);
        strip_by_tile::<E, T, S::Operand>(&mut acc_dv, &mut pf, (dot, panel), S::COLS / 16);
        wgmma_commit();
        // dPᵀ done; dV runs on. dSᵀ takes Pᵀ as rounded for dV (the f32 Pᵀ dies at the
        // packing: 32 or 64 registers that would otherwise spill beside dPᵀ).
        dpt.wait::<1>();
        unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] => {
            if j < S::COLS / 16 {
                unroll!(r in [0, 1, 2, 3] => {
                    let x = 8 * j + 2 * r;
                    let col = 2 * q4 + column(x) as usize;
                    let p = [E::to_f32(pf[j][r] as u16), E::to_f32((pf[j][r] >> 16) as u16)];
                    dpt[x] = p[0] * (dpt[x] - *dl_s.add(col));
                    dpt[x + 1] = p[1] * (dpt[x + 1] - *dl_s.add(col + 1));
                });
            }
        });
        let mut dsf = a_operand::<E, S>(&dpt);
        strip_by_tile::<E, T, S::Operand>(&mut acc_dk, &mut dsf, (qt, panel), S::COLS / 16);
        wgmma_commit();
        // Beside 64×128 accumulators (dK and dV at D = 128, or Sᵀ and dPᵀ of 128 queries) no
        // registers are left for this tile's A operands to stay in flight while the next tile's
        // Sᵀ and dPᵀ run (ptxas would serialise every wgmma): the tile ends here.
        acc_dv.wait::<0>();
        acc_dk.wait::<0>();
        release(&mut Some(sm.empty(s)), tw);
    }
    let direct = !dk16.is_null();
    unroll!(half in [0, 1] => {
        if keys[half] < sk {
            unroll!(blk in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                if blk < D / 8 {
                    let (x, at) = (4 * blk + 2 * half, 8 * blk + 2 * q4);
                    let gk = [acc_dk[x] * scale, acc_dk[x + 1] * scale];
                    let gv = [acc_dv[x], acc_dv[x + 1]];
                    if direct {
                        let at = kv_at.at(b, kvh, keys[half]) + at;
                        store_u16x2(dk16.add(at), E::from_f32(gk[0]), E::from_f32(gk[1]));
                        store_u16x2(dv16.add(at), E::from_f32(gv[0]), E::from_f32(gv[1]));
                    } else {
                        let at = (qh * sk + keys[half]) * D + at;
                        store_f32x2(dk.add(at), gk);
                        store_f32x2(dv.add(at), gv);
                    }
                }
            });
        }
    });
}

#[inline(always)]
unsafe fn dq<E: WgmmaHalf, T: HeadTile, S: HeadTile, const D: usize>(
    maps: *const u8,
    (lse2, delta): (*const f32, *const f32),
    (dq, dq_at): (*mut u16, HeadStrides),
    (sq, sk, hq, hkv): (usize, usize, usize, usize),
    (scale, scale_log2): (f32, f32),
    (causal, flat): (bool, bool),
) {
    // Last tiles first: under the mask they see the most keys.
    let q0 = (grid_dim_x() - 1 - block_x()) * ROWS * CONSUMERS;
    let (b, h) = (block_z(), block_y());
    let (qh, kvh) = (b * hq + h, h / (hq / hkv));
    let offset = sk as isize - sq as isize;
    // Keys below this one are seen by some query of rows `from..from + 64·consumers`.
    let kv_end = |from: usize, consumers: usize| {
        if causal {
            ((from + ROWS * consumers) as isize + offset).clamp(0, sk as isize) as usize
        } else {
            sk
        }
    };
    let tiles = kv_end(q0, CONSUMERS).div_ceil(S::COLS);
    let sm = Smem::new(D, true);
    sm.init();
    let t = thread_x();
    if t < 128 {
        produce(&sm, maps, ([0, 3], q0, (h, b, hq)), ([1, 2], (kvh, b, hkv)), (0, tiles), None, flat);
        return;
    }
    setmaxnreg_inc::<CONSUMER_REGS>();
    let (c, tw) = (t / 128 - 1, t % 128);
    let (w, g, q4) = (tw / 32, tw % 32 / 4, tw % 4);
    let qc0 = q0 + c * ROWS;
    let rows = [qc0 + 16 * w + g, qc0 + 16 * w + g + 8];
    let padded = attn_wg_padded_rows(sq);
    let (mut lse_r, mut dl_r) = ([f32::INFINITY; 2], [0.0f32; 2]);
    unroll!(half in [0, 1] => {
        if rows[half] < sq {
            lse_r[half] = load_nc_f32(lse2.add(qh * padded + rows[half]));
            dl_r[half] = load_nc_f32(delta.add(qh * padded + rows[half]));
        }
    });
    let mine = kv_end(qc0, 1).div_ceil(S::COLS);
    let (qt, dot) = (sm.held(0, c), sm.held(1, c));
    let mut acc = T::ZERO;
    // The `empty` barrier of the stage whose dQ product may still be running.
    let mut running = None;
    mbarrier_wait(sm.held_full(), 0);
    for j in 0..tiles {
        let s = j % sm.stages;
        mbarrier_wait(sm.full(s), ((j / sm.stages) & 1) as u32);
        if j >= mine {
            // Past the keys this consumer's queries see.
            release(&mut Some(sm.empty(s)), tw);
            continue;
        }
        let k0 = j * S::COLS;
        let (kt, vt) = (sm.streamed(s, 0), sm.streamed(s, 1));
        let (mut st, mut dp) = (S::ZERO, S::ZERO);
        let panel = sm.streamed_panel();
        score_pair::<E, D, S>((&mut st, &mut dp), [qt, dot], ([kt, vt], panel), (&mut running, tw));
        let edge = k0 + S::COLS > sk || (causal && above_diagonal(k0 + S::COLS - 1, qc0, offset));
        let lse2 = |x: usize| lse_r[x % 4 / 2];
        // Column c (key k0 + 2t + c) is past the keys iff c ≥ sk − k0 − 2t, hidden from row r
        // iff c > r + offset − k0 − 2t.
        let first_key = (k0 + 2 * q4) as isize;
        let room = (sk as isize - first_key) as i32;
        let diagonal = rows.map(|r| (r as isize + offset - first_key) as i32);
        let hidden = |x: usize| column(x) >= room || (causal && column(x) > diagonal[x % 4 / 2]);
        if edge {
            exponentiate::<true, S>(&mut st, scale_log2, lse2, hidden);
        } else {
            exponentiate::<false, S>(&mut st, scale_log2, lse2, hidden);
        }
        dp.wait::<0>();
        unroll!(x in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                      16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                      32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
                      48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63] => {
            if x < S::COLS / 2 {
                dp[x] = st[x] * (dp[x] - dl_r[x % 4 / 2]);
            }
        });
        let mut dsf = a_operand::<E, S>(&dp);
        strip_by_tile::<E, T, S::Operand>(&mut acc, &mut dsf, (kt, panel), S::COLS / 16);
        wgmma_commit();
        running = Some(sm.empty(s));
        if T::COLS + S::COLS > 192 {
            // At D = 128 the 64×128 dQ, S and dP tiles leave no registers for dS to stay in
            // flight while the next tile's S and dP run (ptxas would serialise every wgmma).
            acc.wait::<0>();
            release(&mut running, tw);
        }
    }
    acc.wait::<0>();
    release(&mut running, tw);
    unroll!(half in [0, 1] => {
        if rows[half] < sq {
            let row = dq.add(dq_at.at(b, h, rows[half]) + 2 * q4);
            unroll!(blk in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                if blk < D / 8 {
                    let x = 4 * blk + 2 * half;
                    store_u16x2(row.add(8 * blk), E::from_f32(acc[x] * scale), E::from_f32(acc[x + 1] * scale));
                }
            });
        }
    });
}

/// Per padded row `i` of head `h` (grid y) of batch `b` (grid z), `padded` rows a head: Δ =
/// rowsum(dO ∘ O) and lse · log2 e for the `sq` real rows of `d` elements (64 or 128; dO's and
/// O's rows placed by `at`), 0 and +∞ past them, at row `(b·Hq + h)·padded + i` of `delta` and
/// `lse2`. Each lane reads 16-byte vectors, d/8 lanes a row, 256/d rows a warp (a lane per
/// 2-byte element read the rows at a fifth of the bandwidth).
#[inline(always)]
unsafe fn stats<H: HalfFloat>(
    (dout, out, lse): (*const u16, *const u16, *const f32),
    at: HeadStrides,
    (delta, lse2): (*mut f32, *mut f32),
    (sq, padded, hq, d): (usize, usize, usize, usize),
) {
    let (h, b) = (block_y(), block_z());
    let head = b * hq + h;
    let lanes = d / 8;
    let rows_per_warp = 32 / lanes;
    let step = grid_dim_x() * block_dim_x() / 32 * rows_per_warp;
    let mut first = global_x() / 32 * rows_per_warp;
    while first < padded {
        let i = first + lane() / lanes;
        let r = head * padded + i;
        let real = i < sq;
        let mut dot = 0.0f32;
        if real {
            let at = at.at(b, h, i) + lane() % lanes * 8;
            let (o, g) = (load_nc_u16x8(out.add(at)).0, load_nc_u16x8(dout.add(at)).0);
            for k in 0..8 {
                dot += H::to_f32(o[k]) * H::to_f32(g[k]);
            }
        }
        let mut m = lanes / 2;
        while m > 0 {
            dot += shfl_xor(dot, m as u32);
            m /= 2;
        }
        if i < padded && lane() % lanes == 0 {
            store_f32(delta.add(r), dot);
            store_f32(
                lse2.add(r),
                if real { load_nc_f32(lse.add(head * sq + i)) * LOG2_E } else { f32::INFINITY },
            );
        }
        first += step;
    }
}

macro_rules! stats_kernels {
    ($($name:ident: $h:ty;)*) => {$(
        /// Δ and lse · log2 e padded to whole query tiles: `delta` and `lse2` hold
        /// `B·Hq·padded` rows; dO's and O's rows are placed alike, by `HeadStrides` (`row`,
        /// `head`, `batch`); grid `(any, Hq, B)` of whole warps.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            dout: *const u16, out: *const u16, row: usize, head: usize, batch: usize, lse: *const f32,
            delta: *mut f32, lse2: *mut f32, sq: usize, padded: usize, hq: usize, d: usize,
        ) {
            let at = HeadStrides { row, head, batch };
            stats::<$h>((dout, out, lse), at, (delta, lse2), (sq, padded, hq, d))
        }
    )*};
}

stats_kernels! {
    attention_bwd_stats_f16: F16;
    attention_bwd_stats_bf16: BF16;
}

macro_rules! wgmma_backward_kernels {
    ($($dq:ident, $dkdv:ident: $e:ty, $d:literal, $tile:ty, $dq_scores:ty, $dkdv_scores:ty;)*) => {$(
        /// dQ in the dtype, row `r` of head `h` of batch `b` at `dq_out + b·dq_batch +
        /// h·dq_head + r·dq_row` (`HeadStrides`); see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dq(
            _maps: TensorMaps, lse2: *const f32, delta: *const f32, dq_out: *mut u16, dq_row: usize,
            dq_head: usize, dq_batch: usize, sq: usize, sk: usize, hq: usize, hkv: usize, scale: f32,
            scale_log2: f32, causal: u32, flat: u32,
        ) {
            let maps = kernel_param_address!($dq, 0);
            let dq_at = HeadStrides { row: dq_row, head: dq_head, batch: dq_batch };
            let (sizes, modes) = ((sq, sk, hq, hkv), (causal != 0, flat != 0));
            dq::<$e, $tile, $dq_scores, $d>(maps, (lse2, delta), (dq_out, dq_at), sizes, (scale, scale_log2), modes)
        }
        /// dK and dV: f32 per query head `[B, Hq, Sk, D]` into `dk`, `dv`, or (when `dk16` is
        /// not null, for Hq = Hkv) the dtype into `dk16`, `dv16`, placed alike by `HeadStrides`
        /// (`kv_row`, `kv_head`, `kv_batch`); see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dkdv(
            _maps: TensorMaps, lse2: *const f32, delta: *const f32, dk: *mut f32, dv: *mut f32,
            dk16: *mut u16, dv16: *mut u16, kv_row: usize, kv_head: usize, kv_batch: usize, sq: usize,
            sk: usize, hq: usize, hkv: usize, scale: f32, scale_log2: f32, causal: u32, flat: u32,
        ) {
            let maps = kernel_param_address!($dkdv, 0);
            let kv_at = HeadStrides { row: kv_row, head: kv_head, batch: kv_batch };
            let modes = (causal != 0, flat != 0);
            dkdv::<$e, $tile, $dkdv_scores, $d>(
                maps, (lse2, delta), (dk, dv, dk16, dv16), kv_at, (sq, sk, hq, hkv), (scale, scale_log2), modes,
            )
        }
    )*};
}

// Gradient tile (64 × D), score tiles (64 × `attn_wg_streamed_rows`) of the dQ and dK/dV kernels.
const _: () = assert!(
    attn_wg_streamed_rows(64, true) == 128
        && attn_wg_streamed_rows(64, false) == 128
        && attn_wg_streamed_rows(128, true) == 128
        && attn_wg_streamed_rows(128, false) == 64
);

wgmma_backward_kernels! {
    attention_bwd_wgmma_dq_f16_d64, attention_bwd_wgmma_dkdv_f16_d64: F16, 64, [f32; 32], [f32; 64], [f32; 64];
    attention_bwd_wgmma_dq_f16_d128, attention_bwd_wgmma_dkdv_f16_d128: F16, 128, [f32; 64], [f32; 64], [f32; 32];
    attention_bwd_wgmma_dq_bf16_d64, attention_bwd_wgmma_dkdv_bf16_d64: BF16, 64, [f32; 32], [f32; 64], [f32; 64];
    attention_bwd_wgmma_dq_bf16_d128, attention_bwd_wgmma_dkdv_bf16_d128: BF16, 128, [f32; 64], [f32; 64], [f32; 32];
}
