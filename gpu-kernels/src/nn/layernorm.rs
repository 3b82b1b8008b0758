//! Layer norm and its backward pass, for f32, f16 and bf16 (x, y, γ, β, dy, dx, dγ, dβ in the
//! input's dtype, computed in f32; the saved mean and rstd in f32).
//!
//! Floor: forward reads x and writes y (8 B per f32 element, 4 B per 16-bit one; mean, rstd, γ, β
//! are noise); backward reads x and dy and writes dx (12 B / 6 B), and the parameter gradients
//! read x and dy once more.
//! Forward: a row team (see `prelude::rows`) holds its row in registers: each thread's
//! two-pass (count, mean, M2) over its values, merged over the team by Chan's formula (one team
//! reduction), then `y = (x - mean) · rstd · γ + β` from the registers; one read, one write. Rows
//! split across blocks (two launches over all rows) merge the chunks' (count, mean, M2) the same
//! way in the `ROW_APPLY` launch, which re-reads its chunk; its grid runs the chunk's blocks of
//! every row one after another, so γ and β come from DRAM once. Rows a cluster holds (at most
//! `ROW_CLUSTER_MAX` chunks) merge them within the cluster instead, in one launch and one read.
//! Backward, per row with x̂ = (x - mean)·rstd and g = dy·γ:
//! `dx = rstd (g - mean(g) - x̂ mean(g x̂))`, the two sums merged the same way; per column
//! `dγ = Σ_rows dy x̂`, `dβ = Σ_rows dy` by column teams over row groups, then a pass that adds
//! the groups' partial sums in order (deterministic, no atomics). Rows a warp holds (the
//! transformer widths) take one fused launch instead (`layernorm_bwd_<dtype>`): dx and the
//! parameter sums from one read of x and dy; `layernorm_bwd_add_<16-bit dtype>` also reads a
//! residual connection's gradient and adds it to dx (a pre-norm block's input gradient).
//! 16-byte aligned rows of 129 to 1024 16-bit (512 f32) values, the transformer widths, take the
//! warp-row forms (`prelude::rows::WarpRow`: no scalar or partial-chunk paths, plain float
//! butterflies): `layernorm_warp_fwd_*`, a row a warp, and for 16-bit rows the one-launch
//! backward `layernorm_warp_bwd[_add]_*`.
use crate::prelude::*;
use crate::shapes::{LAYERNORM_FUSED_BLOCK, LAYERNORM_FUSED_COLS, LAYERNORM_WARP_VECTORS, ROW_CLUSTER};

/// Forward; `gamma`/`beta` may be null (no affine part). Each thread holds its first `K` chunks.
/// `CLUSTER`: a build launched only for rows split over a cluster (`ROW_CLUSTER`), so that the
/// other modes' code drops out.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn layernorm_rows<F: Float, const K: usize, const CLUSTER: bool>(
    x: *const F::Raw,
    gamma: *const F::Raw,
    beta: *const F::Raw,
    y: *mut F::Raw,
    mean_out: *mut f32,
    rstd_out: *mut f32,
    partials: *mut f32,
    (rows, cols, team, chunk, mode): (usize, usize, usize, usize, u32),
    eps: f32,
) {
    row_items::<F, K>(
        (rows, cols, team, chunk),
        if CLUSTER { ROW_CLUSTER } else { mode },
        #[inline(always)]
        |t, mode| {
            let offset = t.row * cols;
            let v = t.load_first::<F, K>(x.wrapping_add(offset), 0.0);
            // Each thread's two-pass (count, mean, M2) over its registers, merged over the team
            // (and, for a split row, over its chunks) by Chan's formula: one team reduction.
            let Some(Welford(n, mean, m2)) =
                t.row_stat(mode, partials, || t.combine(welford_slots::<K>(&t, &v)))
            else {
                return;
            };
            let rstd = 1.0 / sqrt_rn(m2 / n + eps);
            if t.lane == 0 && t.chunk == 0 && t.begin < t.end {
                store_f32(mean_out.add(t.row), mean);
                store_f32(rstd_out.add(t.row), rstd);
            }
            t.store_first::<F, K>(
            y.wrapping_add(offset),
            #[inline(always)]
            |k| {
                let g = if gamma.is_null() { [1.0; 8] } else { t.load_chunk::<F>(gamma, k, 1.0) };
                let b = if beta.is_null() { [0.0; 8] } else { t.load_chunk::<F>(beta, k, 0.0) };
                let mut out = [0.0f32; 8];
                unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { out[e] = (v[k][e] - mean) * rstd * g[e] + b[e]; });
                out
            },
        );
        },
    );
}

/// Chunk `k` of g = dy·γ, with `w` this thread's γ (ones without an affine part).
#[inline(always)]
fn dy_gamma(d: &Slots, w: &Slots, k: usize) -> [f32; 8] {
    let mut g = d[k];
    unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { g[e] *= w[k][e]; });
    g
}

/// This thread's γ (its first `K` chunks), ones where `gamma` is null: read once per kernel and
/// held, as every row of a team uses the same columns.
///
/// # Safety
/// `gamma` holds `cols` values or is null.
#[inline(always)]
unsafe fn gamma_slots<F: Float, const K: usize>(t: &RowTeam, gamma: *const F::Raw) -> Slots {
    if gamma.is_null() {
        [[1.0; 8]; SLOTS]
    } else {
        t.load_first::<F, K>(gamma, 1.0)
    }
}

/// x̂ = (x - mean)·rstd in place over this thread's first `K` chunks (values past the row's end
/// included: the sums below skip them): computed once, for the row sums, dx and dγ alike.
#[inline(always)]
fn normalize<const K: usize>(v: &mut Slots, (mu, r): (f32, f32)) {
    unroll!(k in [0, 1, 2, 3] => {
        if k < K {
            unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { v[k][e] = (v[k][e] - mu) * r; });
        }
    });
}

/// This thread's share of (Σ g, Σ g·x̂) over its row, from x̂ (`normalize`; its first `K` chunks:
/// see `RowTeam::each_first`).
#[inline(always)]
fn dx_row_sums<const K: usize>(t: &RowTeam, (xh, d): (&Slots, &Slots), w: &Slots) -> Sum2 {
    let (mut a, mut b) = (0.0f32, 0.0f32);
    unroll!(k in [0, 1, 2, 3] => {
        if k < K && t.holds(k, 0) {
            let gk = dy_gamma(d, w, k);
            unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                if t.holds(k, e) {
                    a += gk[e];
                    b = fma(gk[e], xh[k][e], b);
                }
            });
        }
    });
    Sum2(a, b)
}

/// Store `dx = rstd (g - mean(g) - x̂ mean(g x̂))` (plus `residual`'s values where given) of the
/// team's row (the first `K` chunks of each thread), from x̂ and the row's sums.
///
/// # Safety
/// `dx_row` is the row's start in the output.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn store_dx<F: Float, const K: usize>(
    t: &RowTeam,
    dx_row: *mut F::Raw,
    (xh, d): (&Slots, &Slots),
    w: &Slots,
    r: f32,
    Sum2(sum_g, sum_gx): Sum2,
    cols: usize,
    residual: Option<&Slots>,
) {
    let inv_n = 1.0 / cols as f32;
    let (mean_g, mean_gx) = (sum_g * inv_n, sum_gx * inv_n);
    t.store_first::<F, K>(
        dx_row,
        #[inline(always)]
        |k| {
            let gk = dy_gamma(d, w, k);
            let mut out = [0.0f32; 8];
            unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                let centred = gk[e] - fma(xh[k][e], mean_gx, mean_g);
                out[e] = match residual {
                    Some(res) => fma(r, centred, res[k][e]),
                    None => r * centred,
                };
            });
            out
        },
    );
}

/// `dx`; `gamma` may be null. Each thread holds its first `K` chunks.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn layernorm_bwd_dx_rows<F: Float, const K: usize>(
    x: *const F::Raw,
    gamma: *const F::Raw,
    dy: *const F::Raw,
    mean: *const f32,
    rstd: *const f32,
    dx: *mut F::Raw,
    partials: *mut f32,
    (rows, cols, team, chunk, mode): (usize, usize, usize, usize, u32),
) {
    row_items::<F, K>(
        (rows, cols, team, chunk),
        mode,
        #[inline(always)]
        |t, mode| {
            let offset = t.row * cols;
            let active = t.begin < t.end;
            let stat =
                if active { (load_f32(mean.add(t.row)), load_f32(rstd.add(t.row))) } else { (0.0, 0.0) };
            let mut v = t.load_first::<F, K>(x.wrapping_add(offset), 0.0);
            let d = t.load_first::<F, K>(dy.wrapping_add(offset), 0.0);
            let w = gamma_slots::<F, K>(&t, gamma);
            normalize::<K>(&mut v, stat);
            let Some(sums) = t.row_stat(mode, partials, || t.combine(dx_row_sums::<K>(&t, (&v, &d), &w)))
            else {
                return;
            };
            store_dx::<F, K>(&t, dx.wrapping_add(offset), (&v, &d), &w, stat.1, sums, cols, None);
        },
    );
}

// build.rs reads shared sizes as literals: 2 · LAYERNORM_FUSED_COLS.
shared_array!(static FUSED_PARAMS_SCRATCH: [f32; 2 * 512]);
const _: () = assert!(LAYERNORM_FUSED_COLS == 512);
/// Columns of dγ and dβ each thread of the last block adds up.
const FUSED_COLUMNS_PER_THREAD: usize = 3;
const _: () = assert!(2 * LAYERNORM_FUSED_COLS <= FUSED_COLUMNS_PER_THREAD * LAYERNORM_FUSED_BLOCK);

/// The whole backward in one launch, for rows that one warp holds in its first `K` chunks a
/// thread (`cols` ≤ 256·K = `LAYERNORM_FUSED_COLS`; blocks of warps, a warp a row): each warp walks rows `w, w + W, …`
/// (W warps in the grid) writing dx and summing dγ and dβ of its columns in registers; the
/// block's warps add theirs in warp order in shared memory; each block stores its sums in
/// `partials[block · 2·cols ..]` (dγ, then dβ), and the last block to finish adds the blocks'
/// in block order into `dgamma`/`dbeta`. One read of x and dy, no second pass, deterministic.
///
/// # Safety
/// x, dy, dx hold rows·cols values, mean/rstd rows floats, gamma cols values or null,
/// dgamma/dbeta cols values, partials 2·cols floats per block, counter a zeroed u32 of this
/// stream; 1-D grid of blocks of whole warps.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn layernorm_bwd_fused_rows<F: Float, const K: usize, const N: usize>(
    (x, gamma, dy, residual): (*const F::Raw, *const F::Raw, *const F::Raw, *const F::Raw),
    (mean, rstd): (*const f32, *const f32),
    dx: *mut F::Raw,
    (partials, counter): (*mut f32, *mut u32),
    (dgamma, dbeta): (*mut F::Raw, *mut F::Raw),
    (rows, cols): (usize, usize),
) {
    let team = RowTeam::new::<F>(rows, cols, 32, cols.next_multiple_of(8)).at_row(0, cols);
    let warps = grid_dim_x() * block_dim_x() / 32;
    let (mut sum_dg, mut sum_db) = ([[0.0f32; 8]; SLOTS], [[0.0f32; 8]; SLOTS]);
    let w = gamma_slots::<F, K>(&team, gamma);
    let mut row = (block_x() * block_dim_x() + thread_x()) / 32;
    // A row's loads (its statistics, x, dy and with N = 3 the residual gradient added to dx)
    // are issued while the warp works on the row before: a warp a row at ~12 warps an SM waits
    // on memory otherwise.
    let inputs = |offset: usize| -> [*const F::Raw; N] {
        core::array::from_fn(|i| [x, dy, residual][i].wrapping_add(offset))
    };
    let issue = |row: usize| {
        let offset = row * cols;
        let stat = (load_f32(mean.add(row)), load_f32(rstd.add(row)));
        (stat, team.load_rows_raw::<F, K, N>(inputs(offset)))
    };
    let mut pending = if row < rows { issue(row) } else { ((0.0, 0.0), [[[0; 8]; SLOTS]; N]) };
    while row < rows {
        let t = team.at_row(row, cols);
        let offset = row * cols;
        let (stat, raw) = pending;
        let next = row + warps;
        if next < rows {
            pending = issue(next);
        }
        let values = t.widen_rows::<F, K, N>(raw, inputs(offset), 0.0);
        let (mut v, d) = (values[0], values[1]);
        normalize::<K>(&mut v, stat);
        let sums = t.combine(dx_row_sums::<K>(&t, (&v, &d), &w));
        let res = if N == 3 { Some(&values[N - 1]) } else { None };
        store_dx::<F, K>(&t, dx.add(offset), (&v, &d), &w, stat.1, sums, cols, res);
        t.each_first::<K>(|k, e| {
            sum_dg[k][e] = fma(d[k][e], v[k][e], sum_dg[k][e]);
            sum_db[k][e] += d[k][e];
        });
        row = next;
    }
    let add_warp_sums = |scratch: *mut f32, first: bool| {
        team.each_first::<K>(|k, e| {
            let (g, b) =
                (scratch.add(team.index(k, e)), scratch.add(LAYERNORM_FUSED_COLS + team.index(k, e)));
            *g = if first { sum_dg[k][e] } else { *g + sum_dg[k][e] };
            *b = if first { sum_db[k][e] } else { *b + sum_db[k][e] };
        });
    };
    fused_params_tail::<F>(add_warp_sums, (partials, counter), (dgamma, dbeta), cols);
}

/// The one-launch backward for 16-byte aligned rows a warp holds ([`WarpRow`], at most `32 · V`
/// vectors): as `layernorm_bwd_fused_rows` (warps walking rows, the next row's loads issued
/// before the current row's work, dγ and dβ summed in registers), in the lean row form. Values
/// past the row's end load as zeros, so their dy = 0 adds nothing to the row's or the columns'
/// sums.
///
/// # Safety
/// As `layernorm_bwd_fused_rows`, with rows of at most `32 · V` 16-byte vectors.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn layernorm_bwd_warp_rows<F: Float, const V: usize, const N: usize>(
    (x, gamma, dy, residual): (*const F::Raw, *const F::Raw, *const F::Raw, *const F::Raw),
    (mean, rstd): (*const f32, *const f32),
    dx: *mut F::Raw,
    (partials, counter): (*mut f32, *mut u32),
    (dgamma, dbeta): (*mut F::Raw, *mut F::Raw),
    (rows, cols): (usize, usize),
) {
    let w = WarpRow::<V>::new::<F>(cols);
    let warps = grid_dim_x() * block_dim_x() / 32;
    // γ held as its bits and widened each row: its values would take 8 more registers, and the
    // add form uses 164 of the 170 that twelve warps an SM allow.
    let gamma_raw = if gamma.is_null() { [[0u32; 4]; V] } else { w.load_raw::<F>(gamma) };
    let (mut sum_dg, mut sum_db) = ([[0.0f32; 8]; V], [[0.0f32; 8]; V]);
    let inv = rcp_approx(cols as f32);
    let issue = |row: usize| {
        let offset = row * cols;
        let stat = (load_f32(mean.add(row)), load_f32(rstd.add(row)));
        let raw: [[[u32; 4]; V]; N] =
            core::array::from_fn(|i| w.load_raw::<F>([x, dy, residual][i].wrapping_add(offset)));
        (stat, raw)
    };
    let mut row = (block_x() * block_dim_x() + thread_x()) / 32;
    let mut pending = if row < rows { issue(row) } else { ((0.0, 0.0), [[[0; 4]; V]; N]) };
    while row < rows {
        let ((mu, r), raw) = pending;
        let next = row + warps;
        if next < rows {
            pending = issue(next);
        }
        let shift = -mu * r;
        let xh = WarpRow::<V>::widen::<F>(raw[0]).map(|v| v.map(|e| fma(e, r, shift)));
        let d = WarpRow::<V>::widen::<F>(raw[1]);
        let gam = if gamma.is_null() { [[1.0f32; 8]; V] } else { WarpRow::<V>::widen::<F>(gamma_raw) };
        let mean_g = w.sum::<F>(|i, e| d[i][e] * gam[i][e]) * inv;
        let mean_gx = w.sum::<F>(|i, e| d[i][e] * gam[i][e] * xh[i][e]) * inv;
        let res = if N == 3 { WarpRow::<V>::widen::<F>(raw[N - 1]) } else { [[0.0; 8]; V] };
        let mut out = [[0.0f32; 8]; V];
        unroll!(i in [0, 1, 2, 3] => {
            if i < V {
                unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    if e < F::PER_16B {
                        let centred = d[i][e] * gam[i][e] - fma(xh[i][e], mean_gx, mean_g);
                        out[i][e] = if N == 3 { fma(r, centred, res[i][e]) } else { r * centred };
                        sum_dg[i][e] = fma(d[i][e], xh[i][e], sum_dg[i][e]);
                        sum_db[i][e] += d[i][e];
                    }
                });
            }
        });
        w.store::<F>(dx.add(row * cols), &out);
        row = next;
    }
    let add_warp_sums = |scratch: *mut f32, first: bool| {
        unroll!(i in [0, 1, 2, 3] => {
            if i < V && w.holds(i) {
                unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    if e < F::PER_16B {
                        let col = w.at(i) + e;
                        let (g, b) = (scratch.add(col), scratch.add(LAYERNORM_FUSED_COLS + col));
                        *g = if first { sum_dg[i][e] } else { *g + sum_dg[i][e] };
                        *b = if first { sum_db[i][e] } else { *b + sum_db[i][e] };
                    }
                });
            }
        });
    };
    fused_params_tail::<F>(add_warp_sums, (partials, counter), (dgamma, dbeta), cols);
}

/// Forward for 16-byte aligned rows a warp holds ([`WarpRow`], at most `32 · V` vectors), a row
/// a warp: the mean, then the squares about it (an exact two-pass over the registers), each one
/// butterfly of one float; `gamma`/`beta` may be null.
///
/// # Safety
/// x and y hold rows·cols values in such rows, gamma/beta cols values or null, mean/rstd rows
/// floats; 1-D grid of whole-warp blocks.
#[inline(always)]
unsafe fn layernorm_warp_rows<F: Float, const V: usize>(
    (x, gamma, beta): (*const F::Raw, *const F::Raw, *const F::Raw),
    y: *mut F::Raw,
    (mean_out, rstd_out): (*mut f32, *mut f32),
    (rows, cols): (usize, usize),
    eps: f32,
) {
    let row = (block_x() * block_dim_x() + thread_x()) / 32;
    if row >= rows {
        return;
    }
    let w = WarpRow::<V>::new::<F>(cols);
    let offset = row * cols;
    let v = w.load::<F>(x.add(offset));
    // The count is an exact small integer: a reciprocal within an ulp.
    let inv = rcp_approx(cols as f32);
    let mean = w.sum::<F>(|i, e| v[i][e]) * inv;
    let var = w.sum::<F>(|i, e| (v[i][e] - mean) * (v[i][e] - mean)) * inv;
    let rstd = 1.0 / sqrt_rn(var + eps);
    if w.lane == 0 {
        store_f32(mean_out.add(row), mean);
        store_f32(rstd_out.add(row), rstd);
    }
    let mut out = [[0.0f32; 8]; V];
    unroll!(i in [0, 1, 2, 3] => {
        if i < V && w.holds(i) {
            let g = if gamma.is_null() { [1.0; 8] } else { F::load_vec(gamma.add(w.at(i))) };
            let b = if beta.is_null() { [0.0; 8] } else { F::load_vec(beta.add(w.at(i))) };
            unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { out[i][e] = fma((v[i][e] - mean) * rstd, g[e], b[e]); });
        }
    });
    w.store::<F>(y.add(offset), &out);
}

/// The end of a one-launch backward (`layernorm_bwd_fused_rows`, `layernorm_bwd_warp_rows`): the
/// block's warps add their column sums of dγ and dβ in warp order in shared memory
/// (`add_warp_sums(scratch, first)`: dγ of column c at `scratch[c]`, dβ at
/// `scratch[LAYERNORM_FUSED_COLS + c]`, stored on the first warp's turn, added after), the block
/// stores them in `partials[block · 2·cols ..]`, and the last block to finish adds the blocks' in
/// block order into `dgamma`/`dbeta`.
///
/// # Safety
/// As `layernorm_bwd_fused_rows`; every thread of the block calls it.
#[inline(always)]
unsafe fn fused_params_tail<F: Float>(
    add_warp_sums: impl Fn(*mut f32, bool),
    (partials, counter): (*mut f32, *mut u32),
    (dgamma, dbeta): (*mut F::Raw, *mut F::Raw),
    cols: usize,
) {
    let scratch = shared_ptr(&raw mut FUSED_PARAMS_SCRATCH);
    let warp = thread_x() / 32;
    for w in 0..block_dim_x() / 32 {
        if warp == w {
            add_warp_sums(scratch, w == 0);
        }
        sync_threads();
    }
    let mine = partials.add(block_x() * 2 * cols);
    let mut c = thread_x();
    while c < 2 * cols {
        let from = if c < cols { c } else { LAYERNORM_FUSED_COLS + c - cols };
        store_f32(mine.add(c), *scratch.add(from));
        c += block_dim_x();
    }
    if !last_block_to_finish(counter) {
        return;
    }
    // The last block adds every block's sums, a thread's (up to three) columns at once: eight
    // running sums per column, in a fixed pattern, with the 24 loads of a step issued together
    // (straight-line code: a thread past the last column reads the last one and drops it), so
    // that the fold is not a chain of dependent L2 round trips; their fixed-order fold keeps it
    // deterministic.
    let (blocks, n, stride) = (grid_dim_x(), 2 * cols, block_dim_x());
    let column = |j: usize| (thread_x() + j * stride).min(n - 1);
    let mut s = [[0.0f32; 8]; FUSED_COLUMNS_PER_THREAD];
    let mut b = 0;
    while b + 8 <= blocks {
        let mut step = [[0.0f32; 8]; FUSED_COLUMNS_PER_THREAD];
        unroll!(j in [0, 1, 2] => {
            unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7] => {
                step[j][i] = load_l2_f32(partials.add((b + i) * n + column(j)));
            });
        });
        unroll!(j in [0, 1, 2] => {
            unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7] => { s[j][i] += step[j][i]; });
        });
        b += 8;
    }
    while b < blocks {
        unroll!(j in [0, 1, 2] => { s[j][0] += load_l2_f32(partials.add(b * n + column(j))); });
        b += 1;
    }
    unroll!(j in [0, 1, 2] => {
        let c = thread_x() + j * stride;
        if c < n {
            unroll!(i in [0, 1, 2, 3] => { s[j][i] += s[j][i + 4]; });
            unroll!(i in [0, 1] => { s[j][i] += s[j][i + 2]; });
            s[j][0] += s[j][1];
            if c < cols {
                F::store(dgamma.add(c), s[j][0]);
            } else {
                F::store(dbeta.add(c - cols), s[j][0]);
            }
        }
    });
    if thread_x() == 0 {
        *counter = 0;
    }
}

/// `dγ`, `dβ` of one row group (column teams; see `prelude::rows::ColumnTeam`): written to
/// `dgamma`/`dbeta` when the grid has one group, else to `partials[g·2·cols ..]` (dγ) and
/// `partials[g·2·cols + cols ..]` (dβ).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn layernorm_bwd_params_cols<F: Float>(
    x: *const F::Raw,
    dy: *const F::Raw,
    mean: *const f32,
    rstd: *const f32,
    partials: *mut f32,
    dgamma: *mut F::Raw,
    dbeta: *mut F::Raw,
    (rows, cols, c_lanes, rows_per_group): (usize, usize, usize, usize),
) {
    let t = ColumnTeam::new::<F>(rows, cols, c_lanes, rows_per_group);
    let groups = grid_dim_y();
    t.sum(
        |r| {
            let (mu, rs) = (load_f32(mean.add(r)), load_f32(rstd.add(r)));
            let (xv, g) = (t.load::<F>(x.add(r * cols)), t.load::<F>(dy.add(r * cols)));
            let mut dg = g;
            unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { dg[e] = g[e] * (xv[e] - mu) * rs; });
            [dg, g]
        },
        |c, [dg, db]| {
            if groups == 1 {
                F::store(dgamma.add(c), dg);
                F::store(dbeta.add(c), db);
            } else {
                let p = partials.add(block_y() * 2 * cols);
                store_f32(p.add(c), dg);
                store_f32(p.add(cols + c), db);
            }
        },
    );
}

macro_rules! layernorm_fwd_kernels {
    ($($fwd:ident: $f:ty, $k:literal, $cluster:literal;)*) => {$(
        /// Layer norm forward; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $fwd(
            x: *const <$f as Float>::Raw, gamma: *const <$f as Float>::Raw, beta: *const <$f as Float>::Raw,
            y: *mut <$f as Float>::Raw, mean_out: *mut f32, rstd_out: *mut f32, partials: *mut f32,
            rows: usize, cols: usize, team: usize, chunk: usize, mode: u32, eps: f32,
        ) {
            grid_dependency_sync();
            let shape = (rows, cols, team, chunk, mode);
            layernorm_rows::<$f, $k, $cluster>(x, gamma, beta, y, mean_out, rstd_out, partials, shape, eps)
        }
    )*};
}

macro_rules! layernorm_row_kernels {
    ($($fwd:ident, $dx:ident: $f:ty, $k:literal;)*) => {$(
        layernorm_fwd_kernels! { $fwd: $f, $k, false; }
        /// `dx` of layer norm.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dx(
            x: *const <$f as Float>::Raw, gamma: *const <$f as Float>::Raw, dy: *const <$f as Float>::Raw,
            mean: *const f32, rstd: *const f32, dx: *mut <$f as Float>::Raw, partials: *mut f32,
            rows: usize, cols: usize, team: usize, chunk: usize, mode: u32,
        ) {
            grid_dependency_sync();
            let shape = (rows, cols, team, chunk, mode);
            layernorm_bwd_dx_rows::<$f, $k>(x, gamma, dy, mean, rstd, dx, partials, shape)
        }
    )*};
}

layernorm_row_kernels! {
    layernorm_fwd_f32, layernorm_bwd_dx_f32: f32, 4;
    layernorm_fwd_f16, layernorm_bwd_dx_f16: F16, 4;
    layernorm_fwd_bf16, layernorm_bwd_dx_bf16: BF16, 4;
    layernorm_fwd_v16_f32, layernorm_bwd_dx_v16_f32: f32, 2;
    layernorm_fwd_v16_f16, layernorm_bwd_dx_v16_f16: F16, 2;
    layernorm_fwd_v16_bf16, layernorm_bwd_dx_v16_bf16: BF16, 2;
    layernorm_fwd_v8_f32, layernorm_bwd_dx_v8_f32: f32, 1;
    layernorm_fwd_v8_f16, layernorm_bwd_dx_v8_f16: F16, 1;
    layernorm_fwd_v8_bf16, layernorm_bwd_dx_v8_bf16: BF16, 1;
}

// The 32-value build again for rows split over a cluster, which build.rs holds to 64 registers
// (four blocks of 256 an SM instead of three; perf-notes, twentieth session).
layernorm_fwd_kernels! {
    layernorm_fwd_cluster_f32: f32, 4, true;
    layernorm_fwd_cluster_f16: F16, 4, true;
    layernorm_fwd_cluster_bf16: BF16, 4, true;
}

macro_rules! layernorm_warp_kernels {
    ($($fwd:ident: $f:ty, $v:expr;)*) => {$(
        /// Forward for 16-byte aligned rows a warp holds (the build's vectors a lane at most), a
        /// row a warp.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $fwd(
            x: *const <$f as Float>::Raw, gamma: *const <$f as Float>::Raw, beta: *const <$f as Float>::Raw,
            y: *mut <$f as Float>::Raw, mean_out: *mut f32, rstd_out: *mut f32, rows: usize, cols: usize,
            eps: f32,
        ) {
            grid_dependency_sync();
            layernorm_warp_rows::<$f, { $v }>((x, gamma, beta), y, (mean_out, rstd_out), (rows, cols), eps)
        }
    )*};
}

// Two builds: rows of up to half the widest take the one of fewer registers (more warps an SM).
layernorm_warp_kernels! {
    layernorm_warp_fwd_f32: f32, LAYERNORM_WARP_VECTORS;
    layernorm_warp_fwd_f16: F16, LAYERNORM_WARP_VECTORS;
    layernorm_warp_fwd_bf16: BF16, LAYERNORM_WARP_VECTORS;
    layernorm_warp_fwd_v2_f32: f32, LAYERNORM_WARP_VECTORS / 2;
    layernorm_warp_fwd_v2_f16: F16, LAYERNORM_WARP_VECTORS / 2;
    layernorm_warp_fwd_v2_bf16: BF16, LAYERNORM_WARP_VECTORS / 2;
}

macro_rules! layernorm_kernels {
    ($($params:ident, $params_sum:ident: $f:ty;)*) => {$(
        /// `dγ`, `dβ` of layer norm, per row group.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $params(
            x: *const <$f as Float>::Raw, dy: *const <$f as Float>::Raw, mean: *const f32,
            rstd: *const f32, partials: *mut f32, dgamma: *mut <$f as Float>::Raw,
            dbeta: *mut <$f as Float>::Raw, rows: usize, cols: usize, c_lanes: usize,
            rows_per_group: usize,
        ) {
            grid_dependency_sync();
            let shape = (rows, cols, c_lanes, rows_per_group);
            layernorm_bwd_params_cols::<$f>(x, dy, mean, rstd, partials, dgamma, dbeta, shape)
        }
        /// The row groups' partial `dγ` (or `dβ`) added in order.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $params_sum(
            partials: *const f32, groups: usize, cols: usize, stride: usize, c_lanes: usize,
            out: *mut <$f as Float>::Raw,
        ) {
            grid_dependency_sync();
            sum_column_partials::<$f>(partials, groups, cols, stride, c_lanes, out)
        }
    )*};
}

layernorm_kernels! {
    layernorm_bwd_params_f32, layernorm_params_sum_f32: f32;
    layernorm_bwd_params_f16, layernorm_params_sum_f16: F16;
    layernorm_bwd_params_bf16, layernorm_params_sum_bf16: BF16;
}

macro_rules! layernorm_one_launch_kernels {
    ($($name:ident: $f:ty, $rows:ident, $inputs:literal;)*) => {$(
        /// The whole layer-norm backward in one launch (see the table below).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const <$f as Float>::Raw, gamma: *const <$f as Float>::Raw, dy: *const <$f as Float>::Raw,
            residual: *const <$f as Float>::Raw, mean: *const f32, rstd: *const f32,
            dx: *mut <$f as Float>::Raw, partials: *mut f32, counter: *mut u32,
            dgamma: *mut <$f as Float>::Raw, dbeta: *mut <$f as Float>::Raw, rows: usize, cols: usize,
        ) {
            grid_dependency_sync();
            $rows::<$f, { LAYERNORM_FUSED_COLS / 256 }, $inputs>(
                (x, gamma, dy, residual), (mean, rstd), dx, (partials, counter), (dgamma, dbeta), (rows, cols),
            )
        }
    )*};
}

// The whole backward in one launch, rows of up to `LAYERNORM_FUSED_COLS`: `_add_` kernels read a
// residual connection's gradient and add it to dx (rounded once; 16-bit only: f32's third
// prefetched row spills), the others leave `residual` unread; `_warp_` kernels take 16-byte
// aligned 16-bit rows (`WarpRow`).
layernorm_one_launch_kernels! {
    layernorm_bwd_f32: f32, layernorm_bwd_fused_rows, 2;
    layernorm_bwd_f16: F16, layernorm_bwd_fused_rows, 2;
    layernorm_bwd_bf16: BF16, layernorm_bwd_fused_rows, 2;
    layernorm_bwd_add_f16: F16, layernorm_bwd_fused_rows, 3;
    layernorm_bwd_add_bf16: BF16, layernorm_bwd_fused_rows, 3;
    layernorm_warp_bwd_f16: F16, layernorm_bwd_warp_rows, 2;
    layernorm_warp_bwd_bf16: BF16, layernorm_bwd_warp_rows, 2;
    layernorm_warp_bwd_add_f16: F16, layernorm_bwd_warp_rows, 3;
    layernorm_warp_bwd_add_bf16: BF16, layernorm_bwd_warp_rows, 3;
}
