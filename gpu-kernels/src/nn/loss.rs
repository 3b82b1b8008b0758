//! The elementwise losses `mse_loss_f32`, `bce_loss_f32`, `bce_with_logits_loss_f32` (gradient
//! and per-block partial sums of the mean loss in one pass: 12 B per element, memory-bound;
//! launched over a fixed grid of `LOSS_BLOCK`-thread blocks so that the partials, summed by the
//! host in a second launch, come out the same on every run). Cross-entropy with logits:
//! `cross_entropy.rs`.
use crate::prelude::*;

/// The elementwise losses: (loss term, gradient term) of one element before the mean's `scale`.
trait PointLoss {
    fn eval(pred: f32, target: f32) -> (f32, f32);
}

/// `(p - t)²`, gradient `2 (p - t)`.
struct Mse;
/// `-(t · max(ln p, -100) + (1 - t) · max(ln(1 - p), -100))`, gradient
/// `(p - t) / max(p (1 - p), 1e-12)` (PyTorch's clamps).
struct Bce;
/// `max(x, 0) - x t + ln(1 + e^-|x|)`, gradient `σ(x) - t`.
struct BceWithLogits;

impl PointLoss for Mse {
    #[inline(always)]
    fn eval(p: f32, t: f32) -> (f32, f32) {
        let d = p - t;
        (d * d, 2.0 * d)
    }
}

impl PointLoss for Bce {
    #[inline(always)]
    fn eval(p: f32, t: f32) -> (f32, f32) {
        // A clamp that lets NaN through (`f32::max` would replace it).
        let clamp = |l: f32| if l < -100.0 { -100.0 } else { l };
        let (lp, lq) = (clamp(ln_fast(p)), clamp(ln_fast(1.0 - p)));
        (-(t * lp + (1.0 - t) * lq), (p - t) / (p * (1.0 - p)).max(1e-12))
    }
}

impl PointLoss for BceWithLogits {
    #[inline(always)]
    fn eval(x: f32, t: f32) -> (f32, f32) {
        let a = if x < 0.0 { -x } else { x };
        (x.max(0.0) - x * t + ln_fast(1.0 + exp_fast(-a)), sigmoid(x) - t)
    }
}

/// `grad[i] = scale · ∂loss/∂pred[i]`, and `partials[block] = scale · Σ loss` over the block's
/// grid-stride share; any grid (the host sums the partials).
#[inline(always)]
unsafe fn point_loss<L: PointLoss>(
    pred: *const f32,
    target: *const f32,
    grad: *mut f32,
    partials: *mut f32,
    n: usize,
    scale: f32,
) {
    let full = n / 4;
    let mut acc = 0.0f32;
    for g in grid_stride(n.div_ceil(4)) {
        if g < full {
            let (p, t) = (load_f32x4(pred.add(4 * g)), load_f32x4(target.add(4 * g)));
            let mut d = F32x4([0.0; 4]);
            for k in 0..4 {
                let (l, dl) = L::eval(p.0[k], t.0[k]);
                acc += l;
                d.0[k] = scale * dl;
            }
            store_f32x4(grad.add(4 * g), d);
        } else {
            for i in 4 * g..n {
                let (l, dl) = L::eval(load_f32(pred.add(i)), load_f32(target.add(i)));
                acc += l;
                store_f32(grad.add(i), scale * dl);
            }
        }
    }
    let total = block_reduce::<Sum>(acc);
    if thread_x() == 0 {
        *partials.add(block_x()) = scale * total;
    }
}

/// One kernel per elementwise loss over `pred` (probabilities for `bce`, logits for
/// `bce_with_logits`): [`point_loss`] with that loss.
macro_rules! point_loss_kernels {
    ($($(#[doc = $doc:literal])* $name:ident: $loss:ty;)*) => {$(
        $(#[doc = $doc])*
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            pred: *const f32,
            target: *const f32,
            grad: *mut f32,
            partials: *mut f32,
            n: usize,
            scale: f32,
        ) {
            grid_dependency_sync();
            point_loss::<$loss>(pred, target, grad, partials, n, scale)
        }
    )*};
}

point_loss_kernels! {
    /// Mean squared error: gradient and per-block partial sums.
    mse_loss_f32: Mse;
    /// Binary cross-entropy on probabilities: gradient and per-block partial sums.
    bce_loss_f32: Bce;
    /// Binary cross-entropy on logits (stable form): gradient and per-block partial sums.
    bce_with_logits_loss_f32: BceWithLogits;
}
