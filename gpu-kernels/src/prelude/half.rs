//! 16-bit floats: conversions to and from f32 (round to nearest even), as element types.
use core::arch::asm;

/// A 16-bit float format, stored as its bits.
pub trait HalfFloat {
    fn to_f32(bits: u16) -> f32;
    fn from_f32(x: f32) -> u16;
    /// Two values rounded into one word (`lo` in the low half): one `cvt.rn.{f16x2,bf16x2}.f32`
    /// where two scalar conversions and a byte permute would take three instructions, two of
    /// them on the pipe that also runs `ex2`.
    fn pack2(lo: f32, hi: f32) -> u32;
    /// The two values of a word (the low half first).
    #[inline(always)]
    fn unpack2(w: u32) -> (f32, f32) {
        (Self::to_f32(w as u16), Self::to_f32((w >> 16) as u16))
    }
}

/// IEEE binary16.
pub struct F16;
/// bfloat16: f32's exponent, 7 mantissa bits.
pub struct BF16;

impl HalfFloat for F16 {
    #[inline(always)]
    fn to_f32(bits: u16) -> f32 {
        let x: f32;
        // SAFETY: pure conversion (exact).
        unsafe {
            asm!("cvt.f32.f16 {x}, {h};", x = out(reg32) x, h = in(reg16) bits, options(pure, nomem, nostack))
        };
        x
    }
    #[inline(always)]
    fn from_f32(x: f32) -> u16 {
        let h: u16;
        // SAFETY: pure conversion, round to nearest even.
        unsafe {
            asm!("cvt.rn.f16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x, options(pure, nomem, nostack))
        };
        h
    }
    #[inline(always)]
    fn pack2(lo: f32, hi: f32) -> u32 {
        let d: u32;
        // SAFETY: pure conversion, round to nearest even.
        unsafe {
            asm!("cvt.rn.f16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi, lo = in(reg32) lo,
                 options(pure, nomem, nostack))
        };
        d
    }
}

impl HalfFloat for BF16 {
    #[inline(always)]
    fn to_f32(bits: u16) -> f32 {
        f32::from_bits((bits as u32) << 16)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> u16 {
        let h: u16;
        // SAFETY: pure conversion, round to nearest even (sm_80 and up).
        unsafe {
            asm!("cvt.rn.bf16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x, options(pure, nomem, nostack))
        };
        h
    }
    #[inline(always)]
    fn pack2(lo: f32, hi: f32) -> u32 {
        let d: u32;
        // SAFETY: pure conversion, round to nearest even (sm_80 and up).
        unsafe {
            asm!("cvt.rn.bf16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi, lo = in(reg32) lo,
                 options(pure, nomem, nostack))
        };
        d
    }
    #[inline(always)]
    fn unpack2(w: u32) -> (f32, f32) {
        (f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000))
    }
}
