//! Fast math on the special-function unit, and the activations built from it.
//!
//! `tanh.approx.f32` alone is off by up to 2^-11 relative, too coarse for the f32 tolerance
//! (1e-5), so `tanh`, `sigmoid` and `gelu` are built from `ex2.approx` (about 2^-22) and
//! `rcp.approx` instead, in forms without cancellation.

unsafe extern "C" {
    #[link_name = "llvm.nvvm.ex2.approx.ftz.f32"]
    fn ex2_approx_ftz_f32(x: f32) -> f32;
    #[link_name = "llvm.nvvm.rcp.approx.ftz.f"]
    fn rcp_approx_ftz_f32(x: f32) -> f32;
    #[link_name = "llvm.nvvm.lg2.approx.ftz.f"]
    fn lg2_approx_ftz_f32(x: f32) -> f32;
    #[link_name = "llvm.nvvm.tanh.approx.f32"]
    fn tanh_approx_f32(x: f32) -> f32;
    #[link_name = "llvm.fma.f32"]
    fn fma_f32(a: f32, b: f32, c: f32) -> f32;
}

const LOG2_E: f32 = core::f32::consts::LOG2_E;

/// `2^x` (`ex2.approx.ftz.f32`).
#[inline(always)]
pub fn exp2_approx(x: f32) -> f32 {
    // SAFETY: pure arithmetic intrinsic.
    unsafe { ex2_approx_ftz_f32(x) }
}

/// `1/x` (`rcp.approx.ftz.f32`).
#[inline(always)]
pub fn rcp_approx(x: f32) -> f32 {
    // SAFETY: pure arithmetic intrinsic.
    unsafe { rcp_approx_ftz_f32(x) }
}

/// `log2(x)` (`lg2.approx.ftz.f32`, about 2^-22 relative).
#[inline(always)]
pub fn log2_approx(x: f32) -> f32 {
    // SAFETY: pure arithmetic intrinsic.
    unsafe { lg2_approx_ftz_f32(x) }
}

/// `ln(x)` through `lg2.approx`.
#[inline(always)]
pub fn ln_fast(x: f32) -> f32 {
    log2_approx(x) * core::f32::consts::LN_2
}

/// `tanh.approx.f32`: 2^-11 relative; for code that tolerates it.
#[inline(always)]
pub fn tanh_approx(x: f32) -> f32 {
    // SAFETY: pure arithmetic intrinsic.
    unsafe { tanh_approx_f32(x) }
}

/// `√x`, correctly rounded (`sqrt.rn.f32`).
#[inline(always)]
pub fn sqrt_rn(x: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic instruction.
    unsafe {
        core::arch::asm!("sqrt.rn.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack))
    };
    r
}

/// `x` rounded to TF32 (10 mantissa bits, to nearest, ties away from zero), as an f32.
#[inline(always)]
pub fn round_tf32(x: f32) -> f32 {
    let r: u32;
    // SAFETY: pure conversion instruction.
    unsafe {
        core::arch::asm!("cvt.rna.tf32.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack))
    };
    f32::from_bits(r)
}

/// What a TF32 tensor core leaves of `x`'s low part when it reads `x` itself: `x` less its
/// truncation to TF32 (the tensor cores drop the low 13 mantissa bits), rounded to TF32, so that
/// `x`·b + low·b is a 3xTF32 product with `x` read unchanged.
#[inline(always)]
pub fn tf32_low(x: f32) -> f32 {
    round_tf32(below_tf32(x))
}

/// `x` less its truncation to TF32 (the low 13 mantissa bits, as an exact f32).
#[inline(always)]
fn below_tf32(x: f32) -> f32 {
    x - f32::from_bits(x.to_bits() & 0xffff_e000)
}

/// [`tf32_low`] rounded by an integer add (the tensor cores drop the bits below it), two
/// instructions fewer than `cvt.rna`, whose test for infinities only matters where `x` is
/// infinite or NaN: there this gives a NaN or a tiny value, and the product of the high part,
/// `x` itself, is what counts.
#[inline(always)]
pub fn tf32_low_by_add(x: f32) -> f32 {
    f32::from_bits(below_tf32(x).to_bits().wrapping_add(0x1000))
}

/// Fused multiply-add `a * b + c`, one rounding.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    // SAFETY: pure arithmetic intrinsic.
    unsafe { fma_f32(a, b, c) }
}

/// `e^x` through `ex2.approx`.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    exp2_approx(x * LOG2_E)
}

/// `e^(x - m)` for many `x` and one `m`: an FMA and `ex2.approx` a value, one operation fewer
/// than [`exp_fast`]`(x - m)`. The product `m · log2 e` is rounded once, an error of
/// `|m| · 2^-24` in the exponent.
#[derive(Clone, Copy)]
pub struct ExpBelow(f32);

impl ExpBelow {
    #[inline(always)]
    pub fn new(m: f32) -> Self {
        ExpBelow(-m * LOG2_E)
    }

    #[inline(always)]
    pub fn at(self, x: f32) -> f32 {
        exp2_approx(fma(x, LOG2_E, self.0))
    }
}

/// Logistic sigmoid `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    rcp_approx(1.0 + exp_fast(-x))
}

/// `tanh(x)`: an odd Taylor polynomial near 0 (where `1 - 2/(e^2x + 1)` would cancel), the
/// exponential form elsewhere. Both are computed and one selected: a branch here would keep the
/// callers' unrolled loops rolled (their vectors then go to local memory).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = if x < 0.0 { -x } else { x };
    let a2 = a * a;
    // x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 - 1382x^11/155925
    let p = fma(a2, -0.008_863_24, 0.021_869_49);
    let p = fma(a2, p, -0.053_968_25);
    let p = fma(a2, p, 0.133_333_33);
    let p = fma(a2, p, -0.333_333_34);
    let near_zero = fma(a * a2, p, a);
    let elsewhere = 1.0 - 2.0 * rcp_approx(exp_fast(2.0 * a) + 1.0);
    let t = if a < 0.3 { near_zero } else { elsewhere };
    if x < 0.0 {
        -t
    } else {
        t
    }
}

/// GELU, tanh form: `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`, computed as
/// `x · sigmoid(2u)`, the same value without the cancellation of `1 + tanh` for negative x.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const C: f32 = 0.044_715;
    let u = SQRT_2_OVER_PI * fma(C * x, x * x, x);
    x * sigmoid(2.0 * u)
}

/// d gelu / dx · dy for the tanh form ([`gelu_tanh`]), written as `gelu = x·s` with `s =
/// sigmoid(2u)`, `u = √(2/π)(x + 0.044715 x³)`: `gelu' = s + x·s(1-s)·2√(2/π)(1 + 3·0.044715 x²)`.
#[inline(always)]
pub fn gelu_grad(x: f32, dy: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const C: f32 = 0.044_715;
    let u = SQRT_2_OVER_PI * fma(C * x, x * x, x);
    let s = rcp_approx(1.0 + exp_fast(-2.0 * u));
    let du = 2.0 * SQRT_2_OVER_PI * fma(3.0 * C * x, x, 1.0);
    dy * fma(x * s * (1.0 - s), du, s)
}

/// [`gelu_tanh`] through `tanh.approx.f32` (`x/2 · (1 + tanh u)`): one special-function op
/// where `gelu_tanh` takes two (`ex2`, `rcp`), for outputs rounded to 16 bits: its error,
/// below |x|·2^-12, is under their rounding of values of x's size.
#[inline(always)]
pub fn gelu_tanh_approx(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const C: f32 = 0.044_715;
    // u = √(2/π)·(x + C·x³) = x·(√(2/π) + √(2/π)·C·x²): six operations in all.
    let u = x * fma(x * x, SQRT_2_OVER_PI * C, SQRT_2_OVER_PI);
    let half = 0.5 * x;
    fma(half, tanh_approx(u), half)
}

/// `max(x, 0)`; NaN passes through.
#[inline(always)]
pub fn relu(x: f32) -> f32 {
    if x < 0.0 {
        0.0
    } else {
        x
    }
}
