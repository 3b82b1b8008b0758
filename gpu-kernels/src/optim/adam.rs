//! `adam_f32`: Adam and AdamW, bias-corrected, over every parameter tensor in one launch (see the
//! module documentation). Floor: 28 B per parameter. `adam_advance` + `adam_dev_f32`: the same
//! step with the step count kept on the device (a graph replays the launch, so the count cannot
//! be a kernel argument); floor 28 B per parameter and 12 B per step.
use super::{my_chunk, update_chunk};
use crate::prelude::*;
use crate::shapes::adam_bias_correction;

/// One thread: `state[0] += 1` (the step t), then `state[1]`, `state[2]` ← the f32 bits of
/// `1 − β1^t`, `1 − β2^t`, computed exactly as the host computes them for `adam_f32`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn adam_advance(state: *mut u32, beta1: f32, beta2: f32) {
    if global_x() != 0 {
        return;
    }
    let t = (*state).wrapping_add(1);
    *state = t;
    *state.add(1) = (adam_bias_correction(beta1, t) as f32).to_bits();
    *state.add(2) = (adam_bias_correction(beta2, t) as f32).to_bits();
}

/// `adam_f32` with the bias corrections read from `state[1]`, `state[2]` (see `adam_advance`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn adam_dev_f32(
    slots: *const u64,
    chunks: *const u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    state: *const u32,
    decoupled: u32,
) {
    let (c1, c2) = (f32::from_bits(*state.add(1)), f32::from_bits(*state.add(2)));
    adam(slots, chunks, [lr, beta1, beta2, eps, weight_decay, c1, c2], decoupled);
}

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
    let (c1, c2) = (bias_correction1, bias_correction2);
    adam(slots, chunks, [lr, beta1, beta2, eps, weight_decay, c1, c2], decoupled);
}

#[inline(always)]
unsafe fn adam(slots: *const u64, chunks: *const u32, hyper: [f32; 7], decoupled: u32) {
    let [lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2] = hyper;
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
