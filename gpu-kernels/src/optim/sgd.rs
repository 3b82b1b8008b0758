//! `sgd_f32`: SGD with momentum, Nesterov and weight decay, over every parameter tensor in one
//! launch (see the module documentation). Floor: 20 B per parameter with momentum.
use super::my_chunk;
use crate::prelude::*;
use crate::shapes::OPTIMIZER_BLOCK as BLOCK;

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
    let (p, g, buf) = (words[0] as *mut f32, words[1] as *const f32, words[2] as *mut f32);
    let mut i = start + thread_x();
    while i < end {
        let mut d = *g.add(i) + weight_decay * *p.add(i);
        if momentum != 0.0 {
            let b = if first_step != 0 { d } else { fma(momentum, *buf.add(i), d) };
            *buf.add(i) = b;
            d = if nesterov != 0 { fma(momentum, b, d) } else { b };
        }
        *p.add(i) -= lr * d;
        i += BLOCK;
    }
}
