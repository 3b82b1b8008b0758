//! `adam_f32`: Adam and AdamW, bias-corrected, over every parameter tensor in one launch (see the
//! module documentation). Floor: 28 B per parameter.
use super::{my_chunk, update_chunk};
use crate::prelude::*;

/// Adam: `m ← β1 m + (1−β1) g`, `v ← β2 v + (1−β2) g²`,
/// `p ← p − lr · (m / c1) / (√(v / c2) + eps)` with `c1 = 1 − β1^t`, `c2 = 1 − β2^t`; weight decay
/// added to g (Adam) or applied as `p ← p (1 − lr·wd)` first (AdamW, `decoupled` ≠ 0).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn adam_f32(
    slots: *const u64,
    chunks: *const u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bias_correction1: f32,
    bias_correction2: f32,
    decoupled: u32,
) {
    let (words, start, end) = my_chunk(slots, chunks);
    let streams = [words[0], words[1], words[2], words[3]].map(|w| w as *mut f32);
    let (step_size, inv_c2) = (lr / bias_correction1, 1.0 / bias_correction2);
    update_chunk(streams, [true, false, true, true], (start, end), |[param, grad, m, v]| {
        if decoupled != 0 {
            *param *= 1.0 - lr * weight_decay;
        } else {
            *grad = fma(weight_decay, *param, *grad);
        }
        *m = fma(beta1, *m, (1.0 - beta1) * *grad);
        *v = fma(beta2, *v, (1.0 - beta2) * *grad * *grad);
        *param -= step_size * *m / (sqrt_rn(*v * inv_c2) + eps);
    });
}
