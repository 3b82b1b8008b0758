//! Layer norm and its backward pass, for f32, f16 and bf16 (x, y, γ, β, dy, dx, dγ, dβ in the
//! input's dtype, computed in f32; the saved mean and rstd in f32).
//!
//! Floor: forward reads x and writes y (8 B per f32 element, 4 B per 16-bit one; mean, rstd, γ, β
//! are noise); backward reads x and dy and writes dx (12 B / 6 B), and the parameter gradients
//! read x and dy once more.
//! Forward: a row team (see `prelude::rows`) holds its row in registers: the exact two-pass
//! mean and M2 over the team (two plain sums), then `y = (x - mean) · rstd · γ + β` from the
//! registers; one read, one write. Rows split across blocks merge the chunks' (count, mean, M2)
//! by Chan's formula in a second launch that re-reads its chunk.
//! Backward, per row with x̂ = (x - mean)·rstd and g = dy·γ:
//! `dx = rstd (g - mean(g) - x̂ mean(g x̂))`, the two sums merged the same way; per column
//! `dγ = Σ_rows dy x̂`, `dβ = Σ_rows dy` by column teams over row groups, then a pass that adds
//! the groups' partial sums in order (deterministic, no atomics).
use crate::prelude::*;
use crate::shapes::{ROW_APPLY, ROW_PARTIAL};

/// Forward; `gamma`/`beta` may be null (no affine part).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn layernorm_rows<F: Float>(
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
    let t = RowTeam::new::<F>(rows, cols, team, chunk);
    let offset = t.row * cols;
    let v = t.load::<F>(x.wrapping_add(offset), 0.0);
    // Whole rows and chunks: the exact two-pass mean and M2 over the values held (two plain
    // reductions); only the merge of a split row's chunks takes Chan's formula.
    let stat = if mode == ROW_APPLY {
        t.merge_partials::<Welford>(partials)
    } else {
        let n = (t.end - t.begin) as f32;
        let mean = t.combine(Folded::<Sum>::new(sum_slots(&t, &v))).0 / n;
        Welford(
            n,
            mean,
            t.combine(Folded::<Sum>::new(fold_slots::<Sum>(&t, &v, |e| (e - mean) * (e - mean)))).0,
        )
    };
    if mode == ROW_PARTIAL {
        return t.write_partial(partials, stat);
    }
    let Welford(n, mean, m2) = stat;
    let rstd = 1.0 / sqrt_rn(m2 / n + eps);
    if t.lane == 0 && t.chunk == 0 && t.begin < t.end {
        store_f32(mean_out.add(t.row), mean);
        store_f32(rstd_out.add(t.row), rstd);
    }
    t.store::<F>(
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
}

/// `dx`; `gamma` may be null.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn layernorm_bwd_dx_rows<F: Float>(
    x: *const F::Raw,
    gamma: *const F::Raw,
    dy: *const F::Raw,
    mean: *const f32,
    rstd: *const f32,
    dx: *mut F::Raw,
    partials: *mut f32,
    (rows, cols, team, chunk, mode): (usize, usize, usize, usize, u32),
) {
    let t = RowTeam::new::<F>(rows, cols, team, chunk);
    let offset = t.row * cols;
    let active = t.begin < t.end;
    let (mu, r) =
        if active { (load_nc_f32(mean.add(t.row)), load_nc_f32(rstd.add(t.row))) } else { (0.0, 0.0) };
    let v = t.load::<F>(x.wrapping_add(offset), 0.0);
    let d = t.load::<F>(dy.wrapping_add(offset), 0.0);
    // g = dy·γ, chunk by chunk: γ is read again where needed rather than held.
    let g = #[inline(always)]
    |k: usize| {
        let w = if gamma.is_null() { [1.0; 8] } else { t.load_chunk::<F>(gamma, k, 1.0) };
        let mut g = d[k];
        unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { g[e] *= w[e]; });
        g
    };
    let Sum2(sum_g, sum_gx) = if mode == ROW_APPLY {
        t.merge_partials(partials)
    } else {
        let (mut a, mut b) = (0.0f32, 0.0f32);
        unroll!(k in [0, 1, 2, 3] => {
            if t.holds(k, 0) {
                let gk = g(k);
                unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    if t.holds(k, e) {
                        a += gk[e];
                        b += gk[e] * (v[k][e] - mu) * r;
                    }
                });
            }
        });
        t.combine(Sum2(a, b))
    };
    if mode == ROW_PARTIAL {
        return t.write_partial(partials, Sum2(sum_g, sum_gx));
    }
    let inv_n = 1.0 / cols as f32;
    let (mean_g, mean_gx) = (sum_g * inv_n, sum_gx * inv_n);
    t.store::<F>(
        dx.wrapping_add(offset),
        #[inline(always)]
        |k| {
            let gk = g(k);
            let mut out = [0.0f32; 8];
            unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                out[e] = r * (gk[e] - mean_g - (v[k][e] - mu) * r * mean_gx);
            });
            out
        },
    );
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
            let (mu, rs) = (load_nc_f32(mean.add(r)), load_nc_f32(rstd.add(r)));
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

macro_rules! layernorm_kernels {
    ($($fwd:ident, $dx:ident, $params:ident, $params_sum:ident: $f:ty;)*) => {$(
        /// Layer norm forward; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $fwd(
            x: *const <$f as Float>::Raw, gamma: *const <$f as Float>::Raw, beta: *const <$f as Float>::Raw,
            y: *mut <$f as Float>::Raw, mean_out: *mut f32, rstd_out: *mut f32, partials: *mut f32,
            rows: usize, cols: usize, team: usize, chunk: usize, mode: u32, eps: f32,
        ) {
            let shape = (rows, cols, team, chunk, mode);
            layernorm_rows::<$f>(x, gamma, beta, y, mean_out, rstd_out, partials, shape, eps)
        }
        /// `dx` of layer norm.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $dx(
            x: *const <$f as Float>::Raw, gamma: *const <$f as Float>::Raw, dy: *const <$f as Float>::Raw,
            mean: *const f32, rstd: *const f32, dx: *mut <$f as Float>::Raw, partials: *mut f32,
            rows: usize, cols: usize, team: usize, chunk: usize, mode: u32,
        ) {
            let shape = (rows, cols, team, chunk, mode);
            layernorm_bwd_dx_rows::<$f>(x, gamma, dy, mean, rstd, dx, partials, shape)
        }
        /// `dγ`, `dβ` of layer norm, per row group.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $params(
            x: *const <$f as Float>::Raw, dy: *const <$f as Float>::Raw, mean: *const f32,
            rstd: *const f32, partials: *mut f32, dgamma: *mut <$f as Float>::Raw,
            dbeta: *mut <$f as Float>::Raw, rows: usize, cols: usize, c_lanes: usize,
            rows_per_group: usize,
        ) {
            let shape = (rows, cols, c_lanes, rows_per_group);
            layernorm_bwd_params_cols::<$f>(x, dy, mean, rstd, partials, dgamma, dbeta, shape)
        }
        /// The row groups' partial `dγ` (or `dβ`) added in order.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $params_sum(
            partials: *const f32, groups: usize, cols: usize, stride: usize, c_lanes: usize,
            out: *mut <$f as Float>::Raw,
        ) {
            sum_column_partials::<$f>(partials, groups, cols, stride, c_lanes, out)
        }
    )*};
}

layernorm_kernels! {
    layernorm_fwd_f32, layernorm_bwd_dx_f32, layernorm_bwd_params_f32, layernorm_params_sum_f32: f32;
    layernorm_fwd_f16, layernorm_bwd_dx_f16, layernorm_bwd_params_f16, layernorm_params_sum_f16: F16;
    layernorm_fwd_bf16, layernorm_bwd_dx_bf16, layernorm_bwd_params_bf16, layernorm_params_sum_bf16: BF16;
}
