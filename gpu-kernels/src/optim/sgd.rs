//! `sgd_step`: SGD with momentum, Nesterov and weight decay, over every f32 parameter tensor in
//! one launch (see the module documentation). Floor: 20 B per parameter with momentum.
use super::{clip_factor, my_chunk, update_chunk};
use crate::prelude::*;

/// `p ← p − lr·d`, where (with g the gradient times the clip factor `clip[1]`, none when `clip` is
/// null, plus `weight_decay·p`) `d = g` without momentum, else `buf ← momentum·buf + g`
/// (`buf ← g` on the first step) and `d = buf`, or `g + momentum·buf` with Nesterov.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn sgd_step(
    slots: *const u64,
    chunks: *const u32,
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    nesterov: u32,
    first_step: u32,
    clip: *const f32,
) {
    grid_dependency_sync();
    let chunk = my_chunk(slots, chunks);
    let factor = clip_factor(clip);
    let range = (chunk.start, chunk.end);
    let [p, g, buf, ..] = chunk.words;
    let (p, buf) = (p as *mut f32, buf as *mut f32);
    if momentum == 0.0 {
        update_chunk::<f32, 1>(g, false, [p], 0, range, |grad, [param]| {
            *param -= lr * fma(weight_decay, *param, *grad * factor);
        });
    } else {
        update_chunk::<f32, 2>(g, false, [p, buf], 0, range, |grad, [param, buf]| {
            let d = fma(weight_decay, *param, *grad * factor);
            *buf = if first_step != 0 { d } else { fma(momentum, *buf, d) };
            *param -= lr * if nesterov != 0 { fma(momentum, *buf, d) } else { *buf };
        });
    }
}
