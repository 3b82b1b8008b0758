//! Batch norm over NCHW (or `[N, C]`, as H = W = 1): statistics per channel over N, H, W.
//!
//! Training forward, two launches over a grid of (channel, slice) blocks:
//! `batchnorm_stats_f32` writes each block's partial sums of `x - x₀` and `(x - x₀)²` (shifted
//! by the channel's first element `x₀`, which keeps `E[d²] - E[d]²` free of cancellation for
//! data whose mean is far from zero); `batchnorm_fwd_f32` adds the channel's partials in slice
//! order (deterministic), normalizes its slice, and its slice-0 block stores mean and `1/σ` and
//! updates the running statistics (unbiased variance, as PyTorch). `batchnorm_eval_f32` applies
//! the running statistics. Backward, the same way: `batchnorm_bwd_reduce_f32` (partial `Σdy`,
//! `Σdy·x̂`), `batchnorm_bwd_dx_f32` (`dx = γ/σ · (dy - mean dy - x̂ · mean(dy·x̂))`, and `dγ`,
//! `dβ` from the slice-0 block).
//!
//! Floor: training forward reads x twice (the second time mostly from L2 when x fits in it) and
//! writes y: 8 B per element from DRAM at best; (32, 64, 32, 32) is 16.8 MB → 5.6 µs at
//! 3.0 TB/s, so two launches (~2–3 µs each) dominate. Backward reads dy and x twice, writes dx.
//! Launch: grid (channels, slices), `BATCHNORM_BLOCK` threads; each thread loads
//! `BATCHNORM_UNROLL` units (16-byte vectors when `H·W % 4 == 0`, else single floats) before it
//! uses them.
use crate::prelude::*;
use crate::shapes::{BATCHNORM_BLOCK as BLOCK, BATCHNORM_UNROLL as UNROLL};

const _: () = assert!(UNROLL == 4);

/// One block's slice of one channel of `[n, channels, hw]`, in units of 4 floats (`VEC`) or 1.
#[derive(Clone, Copy)]
struct Slice {
    channel: usize,
    channels: usize,
    hw: usize,
    /// Units per (sample, channel) plane.
    per_plane: usize,
    start: usize,
    end: usize,
}

impl Slice {
    #[inline(always)]
    fn of_block<const VEC: bool>(n: usize, channels: usize, hw: usize) -> Slice {
        let per_plane = if VEC { hw / 4 } else { hw };
        let units = n * per_plane;
        let (s, slices) = (block_y(), grid_dim_y());
        Slice {
            channel: block_x(),
            channels,
            hw,
            per_plane,
            start: units * s / slices,
            end: units * (s + 1) / slices,
        }
    }

    /// Float offset of unit `u` of this channel.
    #[inline(always)]
    fn offset<const VEC: bool>(&self, u: usize) -> usize {
        let (sample, k) = (u / self.per_plane, u % self.per_plane);
        (sample * self.channels + self.channel) * self.hw + if VEC { 4 * k } else { k }
    }

    /// Call `f(offsets, valid)` for each step of `UNROLL` units of this thread's share.
    #[inline(always)]
    fn for_each_step<const VEC: bool>(&self, mut f: impl FnMut([usize; UNROLL], [bool; UNROLL])) {
        let mut u = self.start + thread_x();
        while u < self.end {
            let mut offsets = [0usize; UNROLL];
            let mut valid = [false; UNROLL];
            unroll!(k in [0, 1, 2, 3] => {
                let unit = u + k * BLOCK;
                valid[k] = unit < self.end;
                offsets[k] = if valid[k] { self.offset::<VEC>(unit) } else { 0 };
            });
            f(offsets, valid);
            u += UNROLL * BLOCK;
        }
    }
}

/// A unit at `p`: four floats, or one float followed by three copies of `fill`.
#[inline(always)]
unsafe fn load_unit<const VEC: bool>(p: *const f32, fill: f32) -> F32x4 {
    if VEC {
        load_f32x4(p)
    } else {
        F32x4([load_f32(p), fill, fill, fill])
    }
}

#[inline(always)]
unsafe fn store_unit<const VEC: bool>(p: *mut f32, v: F32x4) {
    if VEC {
        store_f32x4(p, v)
    } else {
        store_f32(p, v.0[0])
    }
}

/// Sum over slices of channel `c`'s partial pairs (`partials[(c·slices + s)·2 + {0, 1}]`).
#[inline(always)]
unsafe fn channel_totals(partials: *const f32, c: usize, slices: usize) -> (f32, f32) {
    let (mut a, mut b) = (0.0f32, 0.0f32);
    for s in 0..slices {
        a += load_f32(partials.add(2 * (c * slices + s)));
        b += load_f32(partials.add(2 * (c * slices + s) + 1));
    }
    (a, b)
}

/// Block-reduce this thread's sums `a`, `b` and store them as this slice's partial pair of
/// channel `c` (the layout [`channel_totals`] reads).
#[inline(always)]
unsafe fn store_partials(partials: *mut f32, c: usize, a: f32, b: f32) {
    let a = block_reduce::<Sum>(a);
    let b = block_reduce::<Sum>(b);
    if thread_x() == 0 {
        let at = 2 * (c * grid_dim_y() + block_y());
        *partials.add(at) = a;
        *partials.add(at + 1) = b;
    }
}

/// `f::<true>(args)` (16-byte units) when the planes hold a multiple of 4 floats, else
/// `f::<false>(args)` (single floats).
macro_rules! by_plane_width {
    ($hw:expr, $f:ident($($arg:expr),* $(,)?)) => {
        if $hw % 4 == 0 {
            $f::<true>($($arg),*)
        } else {
            $f::<false>($($arg),*)
        }
    };
}

#[inline(always)]
unsafe fn stats<const VEC: bool>(x: *const f32, partials: *mut f32, n: usize, channels: usize, hw: usize) {
    let slice = Slice::of_block::<VEC>(n, channels, hw);
    let shift = load_f32(x.add(slice.channel * hw));
    let (mut sum, mut sum_sq) = (0.0f32, 0.0f32);
    slice.for_each_step::<VEC>(|offsets, valid| {
        let mut v = [F32x4([shift; 4]); UNROLL];
        unroll!(k in [0, 1, 2, 3] => {
            if valid[k] {
                v[k] = load_unit::<VEC>(x.add(offsets[k]), shift);
            }
        });
        unroll!(k in [0, 1, 2, 3] => {
            for e in v[k].0 {
                let d = e - shift;
                sum += d;
                sum_sq = fma(d, d, sum_sq);
            }
        });
    });
    store_partials(partials, slice.channel, sum, sum_sq);
}

/// Partial shifted sums of one slice of one channel: grid (channels, slices).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn batchnorm_stats_f32(
    x: *const f32,
    partials: *mut f32,
    n: usize,
    channels: usize,
    hw: usize,
) {
    grid_dependency_sync();
    by_plane_width!(hw, stats(x, partials, n, channels, hw))
}

/// `y = x · scale + shift` over this block's slice.
#[inline(always)]
unsafe fn apply<const VEC: bool>(x: *const f32, y: *mut f32, slice: &Slice, scale: f32, shift: f32) {
    slice.for_each_step::<VEC>(|offsets, valid| {
        let mut v = [F32x4([0.0; 4]); UNROLL];
        unroll!(k in [0, 1, 2, 3] => {
            if valid[k] {
                v[k] = load_unit::<VEC>(x.add(offsets[k]), 0.0);
            }
        });
        unroll!(k in [0, 1, 2, 3] => {
            if valid[k] {
                store_unit::<VEC>(y.add(offsets[k]), v[k].map(|e| fma(e, scale, shift)));
            }
        });
    });
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn forward<const VEC: bool>(
    x: *const f32,
    gamma: *const f32,
    beta: *const f32,
    partials: *const f32,
    y: *mut f32,
    (mean_out, rstd_out, running_mean, running_var): (*mut f32, *mut f32, *mut f32, *mut f32),
    n: usize,
    channels: usize,
    hw: usize,
    momentum: f32,
    eps: f32,
) {
    let slice = Slice::of_block::<VEC>(n, channels, hw);
    let c = slice.channel;
    let (sum, sum_sq) = channel_totals(partials, c, grid_dim_y());
    let count = (n * hw) as f32;
    let mean_d = sum / count;
    let var = (sum_sq / count - mean_d * mean_d).max(0.0);
    let mean = load_f32(x.add(c * hw)) + mean_d;
    let rstd = 1.0 / sqrt_rn(var + eps);
    let scale = load_f32(gamma.add(c)) * rstd;
    apply::<VEC>(x, y, &slice, scale, load_f32(beta.add(c)) - mean * scale);
    if block_y() == 0 && thread_x() == 0 {
        *mean_out.add(c) = mean;
        *rstd_out.add(c) = rstd;
        let unbiased = var * (count / (count - 1.0));
        *running_mean.add(c) = (1.0 - momentum) * *running_mean.add(c) + momentum * mean;
        *running_var.add(c) = (1.0 - momentum) * *running_var.add(c) + momentum * unbiased;
    }
}

/// Normalize with the batch statistics (from `batchnorm_stats_f32`'s partials of the same grid),
/// store mean and `1/σ`, update the running statistics in place.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn batchnorm_fwd_f32(
    x: *const f32,
    gamma: *const f32,
    beta: *const f32,
    partials: *const f32,
    y: *mut f32,
    mean_out: *mut f32,
    rstd_out: *mut f32,
    running_mean: *mut f32,
    running_var: *mut f32,
    n: usize,
    channels: usize,
    hw: usize,
    momentum: f32,
    eps: f32,
) {
    grid_dependency_sync();
    let stats_out = (mean_out, rstd_out, running_mean, running_var);
    by_plane_width!(hw, forward(x, gamma, beta, partials, y, stats_out, n, channels, hw, momentum, eps))
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn eval<const VEC: bool>(
    x: *const f32,
    gamma: *const f32,
    beta: *const f32,
    running_mean: *const f32,
    running_var: *const f32,
    y: *mut f32,
    n: usize,
    channels: usize,
    hw: usize,
    eps: f32,
) {
    let slice = Slice::of_block::<VEC>(n, channels, hw);
    let c = slice.channel;
    let scale = load_f32(gamma.add(c)) / sqrt_rn(load_f32(running_var.add(c)) + eps);
    apply::<VEC>(x, y, &slice, scale, load_f32(beta.add(c)) - load_f32(running_mean.add(c)) * scale);
}

/// Normalize with the running statistics; grid (channels, slices).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn batchnorm_eval_f32(
    x: *const f32,
    gamma: *const f32,
    beta: *const f32,
    running_mean: *const f32,
    running_var: *const f32,
    y: *mut f32,
    n: usize,
    channels: usize,
    hw: usize,
    eps: f32,
) {
    grid_dependency_sync();
    by_plane_width!(hw, eval(x, gamma, beta, running_mean, running_var, y, n, channels, hw, eps))
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn bwd_reduce<const VEC: bool>(
    dy: *const f32,
    x: *const f32,
    mean: *const f32,
    rstd: *const f32,
    partials: *mut f32,
    n: usize,
    channels: usize,
    hw: usize,
) {
    let slice = Slice::of_block::<VEC>(n, channels, hw);
    let c = slice.channel;
    let (mu, r) = (load_f32(mean.add(c)), load_f32(rstd.add(c)));
    let (mut sum_dy, mut sum_dy_xhat) = (0.0f32, 0.0f32);
    slice.for_each_step::<VEC>(|offsets, valid| {
        let mut g = [F32x4([0.0; 4]); UNROLL];
        let mut v = [F32x4([0.0; 4]); UNROLL];
        unroll!(k in [0, 1, 2, 3] => {
            if valid[k] {
                g[k] = load_unit::<VEC>(dy.add(offsets[k]), 0.0);
                v[k] = load_unit::<VEC>(x.add(offsets[k]), 0.0);
            }
        });
        unroll!(k in [0, 1, 2, 3] => {
            for (d, e) in g[k].0.into_iter().zip(v[k].0) {
                sum_dy += d;
                sum_dy_xhat = fma(d, (e - mu) * r, sum_dy_xhat);
            }
        });
    });
    store_partials(partials, c, sum_dy, sum_dy_xhat);
}

/// Partial `Σdy` and `Σdy·x̂` of one slice of one channel: grid (channels, slices).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn batchnorm_bwd_reduce_f32(
    dy: *const f32,
    x: *const f32,
    mean: *const f32,
    rstd: *const f32,
    partials: *mut f32,
    n: usize,
    channels: usize,
    hw: usize,
) {
    grid_dependency_sync();
    by_plane_width!(hw, bwd_reduce(dy, x, mean, rstd, partials, n, channels, hw))
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn bwd_dx<const VEC: bool>(
    dy: *const f32,
    x: *const f32,
    gamma: *const f32,
    mean: *const f32,
    rstd: *const f32,
    partials: *const f32,
    dx: *mut f32,
    dgamma: *mut f32,
    dbeta: *mut f32,
    n: usize,
    channels: usize,
    hw: usize,
) {
    let slice = Slice::of_block::<VEC>(n, channels, hw);
    let c = slice.channel;
    let (sum_dy, sum_dy_xhat) = channel_totals(partials, c, grid_dim_y());
    let count = (n * hw) as f32;
    let (mu, r) = (load_f32(mean.add(c)), load_f32(rstd.add(c)));
    let (mean_dy, mean_dy_xhat) = (sum_dy / count, sum_dy_xhat / count);
    let gr = load_f32(gamma.add(c)) * r;
    slice.for_each_step::<VEC>(|offsets, valid| {
        let mut g = [F32x4([0.0; 4]); UNROLL];
        let mut v = [F32x4([0.0; 4]); UNROLL];
        unroll!(k in [0, 1, 2, 3] => {
            if valid[k] {
                g[k] = load_unit::<VEC>(dy.add(offsets[k]), 0.0);
                v[k] = load_unit::<VEC>(x.add(offsets[k]), 0.0);
            }
        });
        unroll!(k in [0, 1, 2, 3] => {
            if valid[k] {
                let out = g[k].zip(v[k], |d, e| gr * (d - mean_dy - (e - mu) * r * mean_dy_xhat));
                store_unit::<VEC>(dx.add(offsets[k]), out);
            }
        });
    });
    if block_y() == 0 && thread_x() == 0 {
        *dgamma.add(c) = sum_dy_xhat;
        *dbeta.add(c) = sum_dy;
    }
}

/// `dx`, and `dγ`, `dβ` from the slice-0 blocks, from `batchnorm_bwd_reduce_f32`'s partials of
/// the same grid.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn batchnorm_bwd_dx_f32(
    dy: *const f32,
    x: *const f32,
    gamma: *const f32,
    mean: *const f32,
    rstd: *const f32,
    partials: *const f32,
    dx: *mut f32,
    dgamma: *mut f32,
    dbeta: *mut f32,
    n: usize,
    channels: usize,
    hw: usize,
) {
    grid_dependency_sync();
    by_plane_width!(hw, bwd_dx(dy, x, gamma, mean, rstd, partials, dx, dgamma, dbeta, n, channels, hw))
}
