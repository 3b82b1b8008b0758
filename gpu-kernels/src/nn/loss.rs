//! `cross_entropy_f32`: softmax, loss and gradient of cross-entropy with logits, fused.
//!
//! Floor: reads the logits once (twice from L2 for long rows) and writes the gradient: 8 B per
//! element. Per row r with label c: `loss[r] = ln Σ e^x + max - x[c]`,
//! `grad[r, i] = scale · (softmax(x)[i] - [i = c])` (`scale` = 1/rows for a mean loss).
use super::softmax::row_max_sum;
use crate::prelude::*;
use crate::shapes::NN_ROW_BLOCK as BLOCK;

/// One block per row of `[rows, cols]`; labels are row indices checked by the host (< cols).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn cross_entropy_f32(
    logits: *const f32,
    labels: *const u32,
    loss: *mut f32,
    grad: *mut f32,
    cols: usize,
    scale: f32,
) {
    let row = block_x();
    let (x, g) = (logits.add(row * cols), grad.add(row * cols));
    let label = *labels.add(row) as usize;
    let (m, s) = row_max_sum(x, cols);
    if thread_x() == 0 {
        *loss.add(row) = ln_fast(s) + m - load_nc_f32(x.add(label));
    }
    let inv = 1.0 / s;
    let mut i = thread_x();
    while i < cols {
        let p = exp_fast(load_nc_f32(x.add(i)) - m) * inv;
        store_f32(g.add(i), scale * (p - if i == label { 1.0 } else { 0.0 }));
        i += BLOCK;
    }
}
