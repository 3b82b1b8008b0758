//! `softmax_f32`, `log_softmax_f32` along the last axis, and their backward passes.
//!
//! Floor: forward reads 4 B and writes 4 B per element (32768×4096: 1 GiB, ~0.36 ms at 3 TB/s);
//! backward reads 8 B and writes 4 B.
//! Forward: rows of at most 8192 floats whose length is a multiple of 4 are read once into
//! registers (16-byte loads), reduced (block max, then block sum of exponentials) and written from
//! registers: one pass over memory. Other rows use an online max/sum per thread in a first pass
//! and a second pass that re-reads the row (from L2 for all but the longest rows).
//! Backward (`y` the forward output): softmax `dx = y (dy - Σ dy·y)`, log-softmax
//! `dx = dy - e^y Σ dy`; two passes over the row.
use crate::prelude::*;
use crate::shapes::{NN_ROW_BLOCK as BLOCK, NN_ROW_VECTORS as VECS};

const _: () = assert!(VECS == 8);

/// Online (max, Σ e^(x - max)) of this thread's strided share of a row.
#[inline(always)]
unsafe fn online_max_sum(x: *const f32, cols: usize) -> (f32, f32) {
    let (mut m, mut s) = (f32::NEG_INFINITY, 0.0f32);
    let mut i = thread_x();
    while i < cols {
        let v = load_nc_f32(x.add(i));
        if v > m {
            s = s * exp_fast(m - v) + 1.0;
            m = v;
        } else {
            s += exp_fast(v - m);
        }
        i += BLOCK;
    }
    (m, s)
}

/// The row's (max, Σ e^(x - max)) from each thread's online pair.
#[inline(always)]
pub(crate) fn block_max_sum((m, s): (f32, f32)) -> (f32, f32) {
    let row_max = block_reduce::<Max>(m);
    let scaled = if s == 0.0 { 0.0 } else { s * exp_fast(m - row_max) };
    (row_max, block_reduce::<Sum>(scaled))
}

/// (max, sum) of a row, from global memory in one pass per thread.
#[inline(always)]
pub(crate) unsafe fn row_max_sum(x: *const f32, cols: usize) -> (f32, f32) {
    block_max_sum(online_max_sum(x, cols))
}

#[inline(always)]
unsafe fn softmax_row<const LOG: bool>(x: *const f32, out: *mut f32, cols: usize) {
    let row = block_x();
    let (x, out) = (x.add(row * cols), out.add(row * cols));
    let t = thread_x();
    if cols % 4 == 0 && cols <= BLOCK * 4 * VECS {
        let n4 = cols / 4;
        let mut v = [F32x4([f32::NEG_INFINITY; 4]); VECS];
        let mut m = f32::NEG_INFINITY;
        unroll!(u in [0, 1, 2, 3, 4, 5, 6, 7] => {
            if t + u * BLOCK < n4 {
                v[u] = load_nc_f32x4(x.add(4 * (t + u * BLOCK)));
                for e in v[u].0 {
                    m = Max::combine(m, e);
                }
            }
        });
        let m = block_reduce::<Max>(m);
        let mut s = 0.0f32;
        unroll!(u in [0, 1, 2, 3, 4, 5, 6, 7] => {
            for e in v[u].0 {
                s += exp_fast(e - m);
            }
        });
        let s = block_reduce::<Sum>(s);
        let (shift, inv) = (m + ln_fast(s), 1.0 / s);
        unroll!(u in [0, 1, 2, 3, 4, 5, 6, 7] => {
            if t + u * BLOCK < n4 {
                let y = if LOG { v[u].map(|e| e - shift) } else { v[u].map(|e| exp_fast(e - m) * inv) };
                store_f32x4(out.add(4 * (t + u * BLOCK)), y);
            }
        });
    } else {
        let (m, s) = row_max_sum(x, cols);
        let (shift, inv) = (m + ln_fast(s), 1.0 / s);
        let mut i = t;
        while i < cols {
            let e = load_nc_f32(x.add(i));
            store_f32(out.add(i), if LOG { e - shift } else { exp_fast(e - m) * inv });
            i += BLOCK;
        }
    }
}

/// Softmax of each row of `[rows, cols]`; one block per row.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn softmax_f32(x: *const f32, out: *mut f32, cols: usize) {
    softmax_row::<false>(x, out, cols)
}

/// Log-softmax of each row of `[rows, cols]`; one block per row.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn log_softmax_f32(x: *const f32, out: *mut f32, cols: usize) {
    softmax_row::<true>(x, out, cols)
}

/// Σ over this block's row of `f(y, dy)`.
#[inline(always)]
unsafe fn row_sum(y: *const f32, dy: *const f32, cols: usize, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = 0.0f32;
    let mut i = thread_x();
    while i < cols {
        acc += f(load_nc_f32(y.add(i)), load_nc_f32(dy.add(i)));
        i += BLOCK;
    }
    block_reduce::<Sum>(acc)
}

#[inline(always)]
unsafe fn softmax_bwd_row<const LOG: bool>(y: *const f32, dy: *const f32, dx: *mut f32, cols: usize) {
    let row = block_x();
    let (y, dy, dx) = (y.add(row * cols), dy.add(row * cols), dx.add(row * cols));
    let total = if LOG { row_sum(y, dy, cols, |_, g| g) } else { row_sum(y, dy, cols, |p, g| p * g) };
    let mut i = thread_x();
    while i < cols {
        let (p, g) = (load_nc_f32(y.add(i)), load_nc_f32(dy.add(i)));
        store_f32(dx.add(i), if LOG { g - exp_fast(p) * total } else { p * (g - total) });
        i += BLOCK;
    }
}

/// Backward of softmax: `dx = y (dy - Σ dy·y)` per row.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn softmax_bwd_f32(y: *const f32, dy: *const f32, dx: *mut f32, cols: usize) {
    softmax_bwd_row::<false>(y, dy, dx, cols)
}

/// Backward of log-softmax: `dx = dy - e^y Σ dy` per row.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn log_softmax_bwd_f32(
    y: *const f32,
    dy: *const f32,
    dx: *mut f32,
    cols: usize,
) {
    softmax_bwd_row::<true>(y, dy, dx, cols)
}
