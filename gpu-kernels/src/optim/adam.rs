//! `adam_step`: Adam and AdamW, bias-corrected, over every parameter tensor in one launch (see the
//! module documentation): f32 parameters in place, 16-bit ones through their f32 master copy.
//! Floor: 28 B per parameter either way. `adam_advance` + `adam_step_dev`: the same step with the
//! step count and learning rate kept on the device (a graph replays the launch, so neither can be
//! a kernel argument); floor 28 B per parameter and 16 B per step.
use super::{clip_factor, my_chunk, update_chunk, with_element};
use crate::prelude::*;
use crate::shapes::{adam_bias_correction, OPTIMIZER_F32};

/// One thread: `state[0] += 1` (the step t), then `state[1]`, `state[2]` ← the f32 bits of
/// `1 − β1^t`, `1 − β2^t`, computed exactly as the host computes them for `adam_step`, and
/// `state[3]` ← the bits of `lrs[min(t − 1, lr_steps − 1)]` (the schedule's learning rate of
/// step t − 1, counted from 0; `lr_steps` ≥ 1).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn adam_advance(
    state: *mut u32,
    beta1: f32,
    beta2: f32,
    lrs: *const f32,
    lr_steps: u32,
) {
    grid_dependency_sync();
    if global_x() != 0 {
        return;
    }
    let t = (*state).wrapping_add(1);
    *state = t;
    *state.add(1) = (adam_bias_correction(beta1, t) as f32).to_bits();
    *state.add(2) = (adam_bias_correction(beta2, t) as f32).to_bits();
    *state.add(3) = (*lrs.add(t.wrapping_sub(1).min(lr_steps - 1) as usize)).to_bits();
}

/// `adam_step` with the bias corrections and the learning rate read from `state[1..4]` (see
/// `adam_advance`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn adam_step_dev(
    slots: *const u64,
    chunks: *const u32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    state: *const u32,
    decoupled: u32,
    clip: *const f32,
) {
    grid_dependency_sync();
    let [c1, c2, lr] = [1, 2, 3].map(|i| f32::from_bits(*state.add(i)));
    adam(slots, chunks, [lr, beta1, beta2, eps, weight_decay, c1, c2], decoupled, clip);
}

/// Adam: `m ← β1 m + (1−β1) g`, `v ← β2 v + (1−β2) g²`,
/// `p ← p − lr · (m / c1) / (√(v / c2) + eps)` with `c1 = 1 − β1^t`, `c2 = 1 − β2^t`; weight decay
/// (for the tensors whose slot asks for it) added to g (Adam) or applied as `p ← p (1 − lr·wd)`
/// first (AdamW, `decoupled` ≠ 0). g is first multiplied by the clip factor `clip[1]` (none when
/// `clip` is null). A 16-bit parameter's p is its f32 master, and the parameter gets the master
/// rounded to nearest even.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn adam_step(
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
    clip: *const f32,
) {
    grid_dependency_sync();
    let (c1, c2) = (bias_correction1, bias_correction2);
    adam(slots, chunks, [lr, beta1, beta2, eps, weight_decay, c1, c2], decoupled, clip);
}

#[inline(always)]
unsafe fn adam(slots: *const u64, chunks: *const u32, hyper: [f32; 7], decoupled: u32, clip: *const f32) {
    let [lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2] = hyper;
    let chunk = my_chunk(slots, chunks);
    let factor = clip_factor(clip);
    let weight_decay = if chunk.decay { weight_decay } else { 0.0 };
    let (step_size, inv_c2) = (lr / bias_correction1, 1.0 / bias_correction2);
    let step = |grad: &mut f32, [param, m, v]: &mut [f32; 3]| {
        *grad *= factor;
        if decoupled != 0 {
            *param *= 1.0 - lr * weight_decay;
        } else {
            *grad = fma(weight_decay, *param, *grad);
        }
        *m = fma(beta1, *m, (1.0 - beta1) * *grad);
        *v = fma(beta2, *v, (1.0 - beta2) * *grad * *grad);
        *param -= step_size * *m / (sqrt_rn(*v * inv_c2) + eps);
    };
    let [p, g, m, v, master, _] = chunk.words;
    let (param, mirror) = if chunk.dtype == OPTIMIZER_F32 { (p, 0) } else { (master, p) };
    let streams = [param, m, v].map(|w| w as *mut f32);
    with_element!(chunk.dtype, E => update_chunk::<E, 3>(g, false, streams, mirror, (chunk.start, chunk.end), step));
}
