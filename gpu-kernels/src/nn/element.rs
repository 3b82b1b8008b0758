//! The storage formats of the nn kernels that take f32, f16 and bf16 tensors: loads to f32 and
//! stores from f32 (bf16 and f16 round to nearest even), one element or one 16-byte vector at a
//! time, through the coherent path (cross-entropy may write its gradient over its logits).
use crate::prelude::*;

/// A storage format. Values travel as `[f32; 8]`, of which the first `VEC` are the vector's.
pub trait Elem {
    type Bits: Copy;
    /// One 16-byte vector of `Bits`.
    type Vector: Copy;
    /// Elements in one 16-byte vector.
    const VEC: usize;
    unsafe fn load(p: *const Self::Bits) -> f32;
    unsafe fn store(p: *mut Self::Bits, v: f32);
    /// `p` is 16-byte aligned.
    unsafe fn load_vector(p: *const Self::Bits) -> Self::Vector;
    /// `p` is 16-byte aligned.
    unsafe fn store_vector(p: *mut Self::Bits, v: Self::Vector);
    fn unpack(v: Self::Vector) -> [f32; 8];
    fn pack(v: [f32; 8]) -> Self::Vector;
}

/// IEEE single precision.
pub struct F32;

impl Elem for F32 {
    type Bits = f32;
    type Vector = F32x4;
    const VEC: usize = 4;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> f32 {
        load_f32(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: f32) {
        store_f32(p, v)
    }
    #[inline(always)]
    unsafe fn load_vector(p: *const f32) -> F32x4 {
        load_f32x4(p)
    }
    #[inline(always)]
    unsafe fn store_vector(p: *mut f32, v: F32x4) {
        store_f32x4(p, v)
    }
    #[inline(always)]
    fn unpack(v: F32x4) -> [f32; 8] {
        let [a, b, c, d] = v.0;
        [a, b, c, d, 0.0, 0.0, 0.0, 0.0]
    }
    #[inline(always)]
    fn pack(v: [f32; 8]) -> F32x4 {
        F32x4([v[0], v[1], v[2], v[3]])
    }
}

/// One 16-byte vector of 16-bit values as four words (two values each, the lower first): packed
/// and unpacked a word at a time, without byte permutes.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct Words(pub [u32; 4]);

macro_rules! half_elem {
    ($($h:ty),*) => {$(
        impl Elem for $h {
            type Bits = u16;
            type Vector = Words;
            const VEC: usize = 8;
            #[inline(always)]
            unsafe fn load(p: *const u16) -> f32 {
                <$h>::to_f32(load_u16(p))
            }
            #[inline(always)]
            unsafe fn store(p: *mut u16, v: f32) {
                store_u16(p, <$h>::from_f32(v))
            }
            #[inline(always)]
            unsafe fn load_vector(p: *const u16) -> Words {
                Words(load_u32x4(p as *const u32))
            }
            #[inline(always)]
            unsafe fn store_vector(p: *mut u16, v: Words) {
                store_u32x4(p as *mut u32, v.0)
            }
            #[inline(always)]
            fn unpack(v: Words) -> [f32; 8] {
                let mut out = [0.0f32; 8];
                for (i, &w) in v.0.iter().enumerate() {
                    (out[2 * i], out[2 * i + 1]) = <$h>::unpack2(w);
                }
                out
            }
            #[inline(always)]
            fn pack(v: [f32; 8]) -> Words {
                Words([0, 1, 2, 3].map(|i| <$h>::pack2(v[2 * i], v[2 * i + 1])))
            }
        }
    )*};
}
half_elem!(F16, BF16);
