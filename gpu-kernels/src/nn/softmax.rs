//! Softmax and log-softmax along the last axis, and their backward passes, for f32, f16 and
//! bf16 (16-bit values are computed in f32 and rounded once).
//!
//! Floor: forward reads and writes each element once (4 + 4 B for f32, 2 + 2 B for 16-bit;
//! 32768×4096 f32: 1 GiB, ~0.36 ms at 3 TB/s); backward reads y and dy and writes dx.
//! Launch (see `prelude::rows` and the host's dispatch): a team of threads per row holds the row
//! (or its chunk) in registers, so each element is read once and written once: the team's
//! (max, Σ e^(x - max)) comes from the values held, then the outputs. Rows longer than a block
//! holds, or too few for the SMs, are split into chunks over `gridDim.y` and take two launches
//! of the 32-value build over all rows (`ROW_PARTIAL`: each chunk's (max, sum); `ROW_APPLY`:
//! re-read the chunk, merge the row's partials online, write), or, when a cluster holds the row,
//! one `ROW_CLUSTER` launch that reads it once.
//! Backward (`y` the forward output): softmax `dx = y (dy - Σ dy·y)`, log-softmax
//! `dx = dy - e^y Σ dy`, the same structure with one sum.
use crate::prelude::*;
use crate::shapes::ROW_CLUSTER;

/// Softmax (or log-softmax) of the rows of `[rows, cols]`; see the module documentation.
/// `CLUSTER`: a build launched only for rows split over a cluster (`ROW_CLUSTER`), so that the
/// other modes' code drops out.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_rows<F: Float, const LOG: bool, const K: usize, const CLUSTER: bool>(
    x: *const F::Raw,
    out: *mut F::Raw,
    partials: *mut f32,
    rows: usize,
    cols: usize,
    team: usize,
    chunk: usize,
    mode: u32,
) {
    row_items::<F, K>(
        (rows, cols, team, chunk),
        if CLUSTER { ROW_CLUSTER } else { mode },
        #[inline(always)]
        |t, mode| {
            let offset = t.row * cols;
            let v = t.load_first::<F, K>(x.wrapping_add(offset), f32::NEG_INFINITY);
            let Some(MaxSumExp(m, s)) = t.row_stat(mode, partials, || max_sum_exp::<K>(&t, &v)) else {
                return;
            };
            let (shift, inv) = (m + ln_fast(s), 1.0 / s);
            t.store_first::<F, K>(
                out.wrapping_add(offset),
                #[inline(always)]
                |k| v[k].map(|e| if LOG { e - shift } else { exp_fast(e - m) * inv }),
            );
        },
    );
}

/// Backward of softmax (`LOG = false`: `dx = y (dy - Σ dy·y)`) or log-softmax (`dx = dy - e^y Σ dy`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_bwd_rows<F: Float, const LOG: bool, const K: usize>(
    y: *const F::Raw,
    dy: *const F::Raw,
    dx: *mut F::Raw,
    partials: *mut f32,
    rows: usize,
    cols: usize,
    team: usize,
    chunk: usize,
    mode: u32,
) {
    row_items::<F, K>(
        (rows, cols, team, chunk),
        mode,
        #[inline(always)]
        |t, mode| {
            let offset = t.row * cols;
            let p = t.load_first::<F, K>(y.wrapping_add(offset), 0.0);
            let g = t.load_first::<F, K>(dy.wrapping_add(offset), 0.0);
            let Some(Folded(total, _)) = t.row_stat(mode, partials, || {
                let mut acc = 0.0f32;
                t.each_first::<K>(|k, e| acc += if LOG { g[k][e] } else { p[k][e] * g[k][e] });
                t.combine(Folded::<Sum>::new(acc))
            }) else {
                return;
            };
            t.store_first::<F, K>(
                dx.wrapping_add(offset),
                #[inline(always)]
                |k| {
                    let mut d = [0.0f32; 8];
                    unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                        let (pe, ge) = (p[k][e], g[k][e]);
                        d[e] = if LOG { ge - exp_fast(pe) * total } else { pe * (ge - total) };
                    });
                    d
                },
            );
        },
    );
}

macro_rules! softmax_fwd_kernels {
    ($($name:ident: $f:ty, $log:literal, $k:literal, $cluster:literal;)*) => {$(
        /// Softmax (log-softmax where `$log`) of each row; see the module documentation for the
        /// launch.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            x: *const <$f as Float>::Raw, out: *mut <$f as Float>::Raw, partials: *mut f32, rows: usize,
            cols: usize, team: usize, chunk: usize, mode: u32,
        ) {
            grid_dependency_sync();
            softmax_rows::<$f, $log, $k, $cluster>(x, out, partials, rows, cols, team, chunk, mode)
        }
    )*};
}

macro_rules! softmax_kernels {
    ($($fwd:ident, $log:ident, $bwd:ident, $log_bwd:ident: $f:ty, $k:literal;)*) => {$(
        softmax_fwd_kernels! { $fwd: $f, false, $k, false; $log: $f, true, $k, false; }
        /// Backward of softmax: `dx = y (dy - Σ dy·y)` per row.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $bwd(
            y: *const <$f as Float>::Raw, dy: *const <$f as Float>::Raw, dx: *mut <$f as Float>::Raw,
            partials: *mut f32, rows: usize, cols: usize, team: usize, chunk: usize, mode: u32,
        ) {
            grid_dependency_sync();
            softmax_bwd_rows::<$f, false, $k>(y, dy, dx, partials, rows, cols, team, chunk, mode)
        }
        /// Backward of log-softmax: `dx = dy - e^y Σ dy` per row.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $log_bwd(
            y: *const <$f as Float>::Raw, dy: *const <$f as Float>::Raw, dx: *mut <$f as Float>::Raw,
            partials: *mut f32, rows: usize, cols: usize, team: usize, chunk: usize, mode: u32,
        ) {
            grid_dependency_sync();
            softmax_bwd_rows::<$f, true, $k>(y, dy, dx, partials, rows, cols, team, chunk, mode)
        }
    )*};
}

softmax_kernels! {
    softmax_f32, log_softmax_f32, softmax_bwd_f32, log_softmax_bwd_f32: f32, 4;
    softmax_f16, log_softmax_f16, softmax_bwd_f16, log_softmax_bwd_f16: F16, 4;
    softmax_bf16, log_softmax_bf16, softmax_bwd_bf16, log_softmax_bwd_bf16: BF16, 4;
    softmax_v16_f32, log_softmax_v16_f32, softmax_bwd_v16_f32, log_softmax_bwd_v16_f32: f32, 2;
    softmax_v16_f16, log_softmax_v16_f16, softmax_bwd_v16_f16, log_softmax_bwd_v16_f16: F16, 2;
    softmax_v16_bf16, log_softmax_v16_bf16, softmax_bwd_v16_bf16, log_softmax_bwd_v16_bf16: BF16, 2;
    softmax_v8_f32, log_softmax_v8_f32, softmax_bwd_v8_f32, log_softmax_bwd_v8_f32: f32, 1;
    softmax_v8_f16, log_softmax_v8_f16, softmax_bwd_v8_f16, log_softmax_bwd_v8_f16: F16, 1;
    softmax_v8_bf16, log_softmax_v8_bf16, softmax_bwd_v8_bf16, log_softmax_bwd_v8_bf16: BF16, 1;
}

// The 32-value softmax again for rows split over a cluster (see `CLUSTER` above).
softmax_fwd_kernels! {
    softmax_cluster_f32: f32, false, 4, true;
    softmax_cluster_f16: F16, false, 4, true;
    softmax_cluster_bf16: BF16, false, 4, true;
}
