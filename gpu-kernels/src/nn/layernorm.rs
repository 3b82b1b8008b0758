//! `layernorm_fwd_f32` and its backward (`layernorm_bwd_dx_f32`, `layernorm_bwd_params_f32`).
//!
//! Floor: forward reads 4 B and writes 4 B per element (the per-row mean and rstd are noise);
//! backward reads x and dy and writes dx (12 B), and the parameter gradients read x and dy again.
//! Forward: rows of at most 8192 floats whose length is a multiple of 4 are held in registers
//! (one read, one write) with an exact two-pass mean and variance; other rows stream twice, with
//! Welford per thread combined over the block (Chan). Then `y = (x - mean) · rstd · γ + β`; mean
//! and rstd are saved for the backward pass.
//! Backward, per row with x̂ = (x - mean)·rstd and g = dy·γ:
//! `dx = rstd (g - mean(g) - x̂ mean(g x̂))`; per column `dγ = Σ_rows dy x̂`, `dβ = Σ_rows dy`.
use crate::prelude::*;
use crate::shapes::{NN_ROW_BLOCK as BLOCK, NN_ROW_VECTORS as VECS};

const _: () = assert!(VECS == 8);

/// Forward for a row held in registers (16-byte loads, one read, one write): the exact two-pass
/// mean and variance over the registers.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn layernorm_row_in_registers(
    x: *const f32,
    gamma: *const f32,
    beta: *const f32,
    y: *mut f32,
    mean_out: *mut f32,
    rstd_out: *mut f32,
    cols: usize,
    eps: f32,
) {
    let (t, n4) = (thread_x(), cols / 4);
    let mut v = [F32x4([0.0; 4]); VECS];
    let mut sum = 0.0f32;
    unroll!(u in [0, 1, 2, 3, 4, 5, 6, 7] => {
        if t + u * BLOCK < n4 {
            v[u] = load_nc_f32x4(x.add(4 * (t + u * BLOCK)));
            sum += (v[u].0[0] + v[u].0[1]) + (v[u].0[2] + v[u].0[3]);
        }
    });
    let mean = block_reduce::<Sum>(sum) / cols as f32;
    let mut squares = 0.0f32;
    unroll!(u in [0, 1, 2, 3, 4, 5, 6, 7] => {
        if t + u * BLOCK < n4 {
            for e in v[u].0 {
                squares += (e - mean) * (e - mean);
            }
        }
    });
    let rstd = 1.0 / sqrt_rn(block_reduce::<Sum>(squares) / cols as f32 + eps);
    if t == 0 {
        *mean_out = mean;
        *rstd_out = rstd;
    }
    unroll!(u in [0, 1, 2, 3, 4, 5, 6, 7] => {
        let i = t + u * BLOCK;
        if i < n4 {
            let g = if gamma.is_null() { F32x4([1.0; 4]) } else { load_nc_f32x4(gamma.add(4 * i)) };
            let b = if beta.is_null() { F32x4([0.0; 4]) } else { load_nc_f32x4(beta.add(4 * i)) };
            let mut out = [0.0f32; 4];
            for j in 0..4 {
                out[j] = (v[u].0[j] - mean) * rstd * g.0[j] + b.0[j];
            }
            store_f32x4(y.add(4 * i), F32x4(out));
        }
    });
}

#[inline(always)]
unsafe fn param(p: *const f32, i: usize, default: f32) -> f32 {
    if p.is_null() {
        default
    } else {
        load_nc_f32(p.add(i))
    }
}

/// One block per row of `[rows, cols]`; `gamma`/`beta` may be null (no affine part).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn layernorm_fwd_f32(
    x: *const f32,
    gamma: *const f32,
    beta: *const f32,
    y: *mut f32,
    mean_out: *mut f32,
    rstd_out: *mut f32,
    cols: usize,
    eps: f32,
) {
    let row = block_x();
    let (x, y) = (x.add(row * cols), y.add(row * cols));
    if cols % 4 == 0 && cols <= BLOCK * 4 * VECS {
        return layernorm_row_in_registers(
            x,
            gamma,
            beta,
            y,
            mean_out.add(row),
            rstd_out.add(row),
            cols,
            eps,
        );
    }
    let mut state = (0.0f32, 0.0f32, 0.0f32);
    let mut i = thread_x();
    while i < cols {
        state = welford_combine(state, (1.0, load_nc_f32(x.add(i)), 0.0));
        i += BLOCK;
    }
    let (n, mean, m2) = block_welford(state);
    let rstd = 1.0 / sqrt_rn(m2 / n + eps);
    if thread_x() == 0 {
        *mean_out.add(row) = mean;
        *rstd_out.add(row) = rstd;
    }
    let mut i = thread_x();
    while i < cols {
        let v = (load_nc_f32(x.add(i)) - mean) * rstd;
        store_f32(y.add(i), v * param(gamma, i, 1.0) + param(beta, i, 0.0));
        i += BLOCK;
    }
}

/// `dx` of layer norm; one block per row; `gamma` may be null.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn layernorm_bwd_dx_f32(
    x: *const f32,
    gamma: *const f32,
    dy: *const f32,
    mean: *const f32,
    rstd: *const f32,
    dx: *mut f32,
    cols: usize,
) {
    let row = block_x();
    let (x, dy, dx) = (x.add(row * cols), dy.add(row * cols), dx.add(row * cols));
    let (mu, r) = (*mean.add(row), *rstd.add(row));
    let (mut sum_g, mut sum_gx) = (0.0f32, 0.0f32);
    let mut i = thread_x();
    while i < cols {
        let g = load_nc_f32(dy.add(i)) * param(gamma, i, 1.0);
        sum_g += g;
        sum_gx += g * (load_nc_f32(x.add(i)) - mu) * r;
        i += BLOCK;
    }
    let inv_n = 1.0 / cols as f32;
    let mean_g = block_reduce::<Sum>(sum_g) * inv_n;
    let mean_gx = block_reduce::<Sum>(sum_gx) * inv_n;
    let mut i = thread_x();
    while i < cols {
        let g = load_nc_f32(dy.add(i)) * param(gamma, i, 1.0);
        let xhat = (load_nc_f32(x.add(i)) - mu) * r;
        store_f32(dx.add(i), r * (g - mean_g - xhat * mean_gx));
        i += BLOCK;
    }
}

/// `dγ` and `dβ` of layer norm: one thread per column, summing over the rows in order.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn layernorm_bwd_params_f32(
    x: *const f32,
    dy: *const f32,
    mean: *const f32,
    rstd: *const f32,
    dgamma: *mut f32,
    dbeta: *mut f32,
    rows: usize,
    cols: usize,
) {
    let col = global_x();
    if col >= cols {
        return;
    }
    let (mut dg, mut db) = (0.0f32, 0.0f32);
    for r in 0..rows {
        let g = load_nc_f32(dy.add(r * cols + col));
        dg += g * (load_nc_f32(x.add(r * cols + col)) - *mean.add(r)) * *rstd.add(r);
        db += g;
    }
    *dgamma.add(col) = dg;
    *dbeta.add(col) = db;
}
