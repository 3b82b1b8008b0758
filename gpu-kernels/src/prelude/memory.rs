//! Global-memory access: 16-byte vectors, the read-only (`.nc`) path, and L2-only loads.
use core::arch::asm;

/// Four `f32` moved as one 16-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct F32x4(pub [f32; 4]);

impl F32x4 {
    #[inline(always)]
    pub fn map(self, f: impl Fn(f32) -> f32) -> Self {
        let [a, b, c, d] = self.0;
        F32x4([f(a), f(b), f(c), f(d)])
    }
    #[inline(always)]
    pub fn zip(self, o: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        let ([a, b, c, d], [e, g, h, i]) = (self.0, o.0);
        F32x4([f(a, e), f(b, g), f(c, h), f(d, i)])
    }
}

/// `ld.global.nc.v4.f32`: 16 bytes through the read-only data path.
///
/// # Safety
/// `p` is 16-byte aligned, points into global memory, and nothing writes those bytes during
/// the kernel.
#[inline(always)]
pub unsafe fn load_nc_f32x4(p: *const f32) -> F32x4 {
    let (a, b, c, d): (f32, f32, f32, f32);
    asm!("ld.global.nc.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}];",
         p = in(reg64) p, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
         options(pure, readonly, nostack));
    F32x4([a, b, c, d])
}

/// `ld.global.nc.f32`.
///
/// # Safety
/// As [`load_nc_f32x4`], 4-byte aligned.
#[inline(always)]
pub unsafe fn load_nc_f32(p: *const f32) -> f32 {
    let v: f32;
    asm!("ld.global.nc.f32 {v}, [{p}];", p = in(reg64) p, v = out(reg32) v,
         options(pure, readonly, nostack));
    v
}

/// `ld.global.cg.f32`: bypasses L1, so it sees what other blocks wrote before a GPU-scope fence.
///
/// # Safety
/// `p` is 4-byte aligned and points into global memory.
#[inline(always)]
pub unsafe fn load_l2_f32(p: *const f32) -> f32 {
    let v: f32;
    asm!("ld.global.cg.f32 {v}, [{p}];", p = in(reg64) p, v = out(reg32) v,
         options(readonly, nostack));
    v
}

/// `st.global.v4.f32`.
///
/// # Safety
/// `p` is 16-byte aligned and points to 16 writable bytes of global memory.
#[inline(always)]
pub unsafe fn store_f32x4(p: *mut f32, v: F32x4) {
    let [a, b, c, d] = v.0;
    asm!("st.global.v4.f32 [{p}], {{{a}, {b}, {c}, {d}}};",
         p = in(reg64) p, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, d = in(reg32) d,
         options(nostack));
}

/// `st.global.f32`.
///
/// # Safety
/// `p` is 4-byte aligned and points to 4 writable bytes of global memory.
#[inline(always)]
pub unsafe fn store_f32(p: *mut f32, v: f32) {
    asm!("st.global.f32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack));
}
