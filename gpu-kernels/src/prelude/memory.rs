//! Global-memory access: 16-byte vectors, the read-only (`.nc`) path, and L2-only loads.
//!
//! The `.nc` loads are for kernels that are never launched as programmatic dependents (those that
//! do not call `grid_dependency_sync`): `.nc` tells ptxas the data is constant while the kernel
//! runs, so it may schedule such a load above `griddepcontrol.wait`, before the predecessor has
//! finished writing it. `build.rs` fails the build for a `.nc` load in a dependent kernel.
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

/// 16-byte f32 loads of memory that may change while the kernel runs (not `pure`: never merged
/// or hoisted across other memory accesses), one function per PTX form.
macro_rules! load_f32x4_forms {
    ($($(#[$doc:meta])* $name:ident: $instr:literal;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `p` is 16-byte aligned and points into global memory.
        #[inline(always)]
        pub unsafe fn $name(p: *const f32) -> F32x4 {
            let (a, b, c, d): (f32, f32, f32, f32);
            asm!(concat!($instr, " {{{a}, {b}, {c}, {d}}}, [{p}];"),
                 p = in(reg64) p, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
                 options(readonly, nostack));
            F32x4([a, b, c, d])
        }
    )*};
}

load_f32x4_forms! {
    /// `ld.global.v4.f32`: 16 bytes through the coherent path, for buffers the kernel also writes.
    load_f32x4: "ld.global.v4.f32";
    /// `ld.global.cg.v4.f32`: 16 bytes past L1, for what other blocks wrote before a GPU-scope
    /// fence.
    load_l2_f32x4: "ld.global.cg.v4.f32";
}

/// `ld.global.v4.u32` of eight 16-bit values through the coherent path, for buffers the kernel
/// also writes.
///
/// # Safety
/// As [`load_f32x4`].
#[inline(always)]
pub unsafe fn load_u16x8(p: *const u16) -> U16x8 {
    unpack_u16x8(load_u32x4(p as *const u32))
}

/// `ld.global.v4.u32` through the coherent path: 16 bytes as four words.
///
/// # Safety
/// As [`load_f32x4`].
#[inline(always)]
pub unsafe fn load_u32x4(p: *const u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.global.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
         p = in(reg64) p, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
         options(readonly, nostack));
    [a, b, c, d]
}

/// `ld.global.f32` (coherent).
///
/// # Safety
/// `p` is 4-byte aligned and points into global memory.
#[inline(always)]
pub unsafe fn load_f32(p: *const f32) -> f32 {
    let v: f32;
    asm!("ld.global.f32 {v}, [{p}];", p = in(reg64) p, v = out(reg32) v, options(readonly, nostack));
    v
}

/// `ld.global.u16` (coherent).
///
/// # Safety
/// `p` is 2-byte aligned and points into global memory.
#[inline(always)]
pub unsafe fn load_u16(p: *const u16) -> u16 {
    let v: u16;
    asm!("ld.global.u16 {v}, [{p}];", p = in(reg64) p, v = out(reg16) v, options(readonly, nostack));
    v
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

/// `st.global.cs.v4.f32`: a streaming store (evict-first), for outputs nothing reads soon.
///
/// # Safety
/// As [`store_f32x4`].
#[inline(always)]
pub unsafe fn store_stream_f32x4(p: *mut f32, v: F32x4) {
    let [a, b, c, d] = v.0;
    asm!("st.global.cs.v4.f32 [{p}], {{{a}, {b}, {c}, {d}}};",
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

/// `st.global.u64`.
///
/// # Safety
/// `p` is 8-byte aligned and points to 8 writable bytes of global memory.
#[inline(always)]
pub unsafe fn store_u64(p: *mut u64, v: u64) {
    asm!("st.global.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v, options(nostack));
}

/// Eight 16-bit floats (f16 or bf16 bits) moved as one 16-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct U16x8(pub [u16; 8]);

/// `ld.global.nc.v4.u32`: 16 bytes of 16-bit values through the read-only path.
///
/// # Safety
/// As [`load_nc_f32x4`].
#[inline(always)]
pub unsafe fn load_nc_u16x8(p: *const u16) -> U16x8 {
    unpack_u16x8(load_nc_u32x4(p as *const u32))
}

/// Read-only 16-byte loads as four words, one function per PTX form.
macro_rules! load_nc_words {
    ($($(#[$doc:meta])* $name:ident: $instr:literal;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// As [`load_nc_f32x4`].
        #[inline(always)]
        pub unsafe fn $name(p: *const u32) -> [u32; 4] {
            let (a, b, c, d): (u32, u32, u32, u32);
            asm!(concat!($instr, " {{{a}, {b}, {c}, {d}}}, [{p}];"),
                 p = in(reg64) p, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
                 options(pure, readonly, nostack));
            [a, b, c, d]
        }
    )*};
}

load_nc_words! {
    /// `ld.global.nc.v4.u32`: 16 bytes through the read-only path, as four words.
    load_nc_u32x4: "ld.global.nc.v4.u32";
    /// As [`load_nc_u32x4`], asking L2 to fetch the whole 256-byte block around `p` from DRAM
    /// (`.L2::256B`): for streams whose neighbouring bytes other warps or later steps read soon.
    load_nc_l2_256_u32x4: "ld.global.nc.L2::256B.v4.u32";
}

/// Four 32-bit words as eight 16-bit values, the lower half first.
#[inline(always)]
fn unpack_u16x8(w: [u32; 4]) -> U16x8 {
    let mut v = [0u16; 8];
    for i in 0..8 {
        v[i] = (w[i / 2] >> (16 * (i % 2))) as u16;
    }
    U16x8(v)
}

/// `st.global.v4.u32` of eight 16-bit values.
///
/// # Safety
/// As [`store_f32x4`].
#[inline(always)]
pub unsafe fn store_u16x8(p: *mut u16, v: U16x8) {
    let w = |i: usize| v.0[2 * i] as u32 | (v.0[2 * i + 1] as u32) << 16;
    store_u32x4(p as *mut u32, [w(0), w(1), w(2), w(3)]);
}

/// `st.global.v4.u32`.
///
/// # Safety
/// As [`store_f32x4`].
#[inline(always)]
pub unsafe fn store_u32x4(p: *mut u32, w: [u32; 4]) {
    let [a, b, c, d] = w;
    asm!("st.global.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
         p = in(reg64) p, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, d = in(reg32) d,
         options(nostack));
}

/// `ld.global.nc.u16`.
///
/// # Safety
/// `p` is 2-byte aligned global memory that nothing writes during the kernel.
#[inline(always)]
pub unsafe fn load_nc_u16(p: *const u16) -> u16 {
    let v: u16;
    asm!("ld.global.nc.u16 {v}, [{p}];", p = in(reg64) p, v = out(reg16) v, options(pure, readonly, nostack));
    v
}

/// `ld.global.nc.u32`.
///
/// # Safety
/// `p` is 4-byte aligned global memory that nothing writes during the kernel.
#[inline(always)]
pub unsafe fn load_nc_u32(p: *const u32) -> u32 {
    let v: u32;
    asm!("ld.global.nc.u32 {v}, [{p}];", p = in(reg64) p, v = out(reg32) v, options(pure, readonly, nostack));
    v
}

/// `st.global.u16`.
///
/// # Safety
/// `p` is 2-byte aligned writable global memory.
#[inline(always)]
pub unsafe fn store_u16(p: *mut u16, v: u16) {
    asm!("st.global.u16 [{p}], {v};", p = in(reg64) p, v = in(reg16) v, options(nostack));
}

/// `ld.global.nc.v2.f32`: 8 bytes through the read-only path.
///
/// # Safety
/// As [`load_nc_f32x4`], 8-byte aligned.
#[inline(always)]
pub unsafe fn load_nc_f32x2(p: *const f32) -> [f32; 2] {
    let (a, b): (f32, f32);
    asm!("ld.global.nc.v2.f32 {{{a}, {b}}}, [{p}];",
         p = in(reg64) p, a = out(reg32) a, b = out(reg32) b, options(pure, readonly, nostack));
    [a, b]
}

/// `st.global.u32` of two 16-bit values, `lo` at the lower address.
///
/// # Safety
/// `p` is 4-byte aligned writable global memory.
#[inline(always)]
pub unsafe fn store_u16x2(p: *mut u16, lo: u16, hi: u16) {
    let w = lo as u32 | (hi as u32) << 16;
    asm!("st.global.u32 [{p}], {w};", p = in(reg64) p, w = in(reg32) w, options(nostack));
}

/// `st.global.v2.f32`.
///
/// # Safety
/// `p` is 8-byte aligned and points to 8 writable bytes of global memory.
#[inline(always)]
pub unsafe fn store_f32x2(p: *mut f32, v: [f32; 2]) {
    asm!("st.global.v2.f32 [{p}], {{{a}, {b}}};", p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1],
         options(nostack));
}

/// `ld.global.nc.u8`.
///
/// # Safety
/// `p` is global memory that nothing writes during the kernel.
#[inline(always)]
pub unsafe fn load_nc_u8(p: *const u8) -> u8 {
    let v: u16;
    asm!("ld.global.nc.u8 {v}, [{p}];", p = in(reg64) p, v = out(reg16) v, options(pure, readonly, nostack));
    v as u8
}

/// `st.global.u8`.
///
/// # Safety
/// `p` points to a writable byte of global memory.
#[inline(always)]
pub unsafe fn store_u8(p: *mut u8, v: u8) {
    asm!("st.global.u8 [{p}], {v};", p = in(reg64) p, v = in(reg16) v as u16, options(nostack));
}

/// `ld.global.v2.u32` of four 16-bit values (8 bytes) through the coherent path, for buffers the
/// kernel also writes.
///
/// # Safety
/// `p` is 8-byte aligned and points into global memory.
#[inline(always)]
pub unsafe fn load_u16x4(p: *const u16) -> [u16; 4] {
    let (a, b): (u32, u32);
    asm!("ld.global.v2.u32 {{{a}, {b}}}, [{p}];", p = in(reg64) p, a = out(reg32) a, b = out(reg32) b,
         options(readonly, nostack));
    [a as u16, (a >> 16) as u16, b as u16, (b >> 16) as u16]
}

/// `st.global.v2.u32` of four 16-bit values.
///
/// # Safety
/// `p` is 8-byte aligned and points to 8 writable bytes of global memory.
#[inline(always)]
pub unsafe fn store_u16x4(p: *mut u16, v: [u16; 4]) {
    let (a, b) = (v[0] as u32 | (v[1] as u32) << 16, v[2] as u32 | (v[3] as u32) << 16);
    asm!("st.global.v2.u32 [{p}], {{{a}, {b}}};", p = in(reg64) p, a = in(reg32) a, b = in(reg32) b,
         options(nostack));
}
