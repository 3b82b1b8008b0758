//! `sgd_f32`: SGD with momentum, Nesterov and weight decay, over every parameter tensor in one
//! launch (see the module documentation). Floor: 20 B per parameter with momentum.
use super::{my_chunk, update_chunk};
use crate::prelude::*;

/// `p ← p − lr·d`, where (with g the gradient plus `weight_decay·p`) `d = g` without momentum,
/// else `buf ← momentum·buf + g` (`buf ← g` on the first step) and `d = buf`, or `g + momentum·buf`
/// with Nesterov.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn sgd_f32(
    slots: *const u64,
    chunks: *const u32,
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    nesterov: u32,
    first_step: u32,
) {
    let (words, start, end) = my_chunk(slots, chunks);
    let (p, g, buf) = (words[0] as *mut f32, words[1] as *mut f32, words[2] as *mut f32);
    if momentum == 0.0 {
        update_chunk([p, g], [true, false], (start, end), |[param, grad]| {
            *param -= lr * fma(weight_decay, *param, *grad);
        });
    } else {
        update_chunk([p, g, buf], [true, false, true], (start, end), |[param, grad, buf]| {
            let d = fma(weight_decay, *param, *grad);
            *buf = if first_step != 0 { d } else { fma(momentum, *buf, d) };
            *param -= lr * if nesterov != 0 { fma(momentum, *buf, d) } else { *buf };
        });
    }
}
