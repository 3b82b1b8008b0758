//! Asynchronous global→shared copies (`cp.async`) and warp-level tensor-core MMA (`mma.sync`).
use core::arch::asm;

/// The 32-bit shared-memory address of a generic pointer into shared memory.
#[inline(always)]
pub fn shared_addr<T>(p: *const T) -> u32 {
    let a: u64;
    // SAFETY: address arithmetic only. `cvta.to.shared.u64` then truncate: the 32-bit form on a
    // truncated generic pointer is refused by ptxas under `.address_size 64`.
    unsafe {
        asm!("cvta.to.shared.u64 {a}, {p};", a = out(reg64) a, p = in(reg64) p, options(pure, nomem, nostack))
    };
    a as u32
}

/// Copy 16 bytes from global `src` to shared `dst`, of which the first `src_bytes` (0..=16) are
/// read and the rest zero-filled; bypasses L1.
///
/// # Safety
/// `dst` is a 16-byte-aligned shared address; `src` is 16-byte aligned and its first
/// `src_bytes` bytes are readable global memory.
#[inline(always)]
pub unsafe fn cp_async_16(dst: u32, src: *const f32, src_bytes: u32) {
    asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};",
         d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack));
}

/// Copy 4 bytes (or zero-fill them when `src_bytes` is 0), for sources that are not 16-byte
/// aligned.
///
/// # Safety
/// As [`cp_async_16`], with 4-byte alignment and `src_bytes` 0 or 4.
#[inline(always)]
pub unsafe fn cp_async_4(dst: u32, src: *const f32, src_bytes: u32) {
    asm!("cp.async.ca.shared.global [{d}], [{s}], 4, {n};",
         d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack));
}

/// Close the group of `cp.async` issued since the last commit.
#[inline(always)]
pub fn cp_async_commit() {
    // SAFETY: no operands.
    unsafe { asm!("cp.async.commit_group;", options(nostack)) }
}

/// Wait until at most `PENDING` committed groups of this thread are still in flight.
#[inline(always)]
pub fn cp_async_wait<const PENDING: u32>() {
    // SAFETY: no operands; orders this thread's later shared reads after its copies.
    unsafe { asm!("cp.async.wait_group {n};", n = const PENDING, options(nostack)) }
}

/// `d += a · b` for one warp: a 16×8 (row) TF32 fragment, an 8×8 (col) TF32 fragment, a 16×8 f32
/// accumulator, in the `mma.m16n8k8` fragment layout (lane = 4g + t: `a` = (g, t), (g+8, t),
/// (g, t+4), (g+8, t+4); `b` = (t, g), (t+4, g); `d` = (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)).
#[inline(always)]
pub fn mma_tf32_16x8x8(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    // SAFETY: register-only warp-synchronous instruction; every lane of the warp executes it.
    unsafe {
        asm!("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}, {d2}, {d3}}};",
             d0 = inout(reg32) d[0], d1 = inout(reg32) d[1], d2 = inout(reg32) d[2], d3 = inout(reg32) d[3],
             a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
             b0 = in(reg32) b[0], b1 = in(reg32) b[1], options(pure, nomem, nostack));
    }
}

/// `d += a · b` for one warp on 16-bit inputs: `mma.m16n8k16` with f32 accumulation. Fragments
/// hold pairs of consecutive-k values (low half first), lane = 4g + t: `a` = (g, 2t..),
/// (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); `b` = (2t.., g), (2t+8.., g); `d` as in
/// [`mma_tf32_16x8x8`].
pub trait MmaInput: super::HalfFloat {
    fn mma_16x8x16(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]);
}

macro_rules! mma_16bit {
    ($ty:ty, $instr:literal) => {
        impl MmaInput for $ty {
            #[inline(always)]
            fn mma_16x8x16(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
                // SAFETY: register-only warp-synchronous instruction; every lane executes it.
                unsafe {
                    asm!(concat!($instr, " {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}, {d2}, {d3}}};"),
                         d0 = inout(reg32) d[0], d1 = inout(reg32) d[1], d2 = inout(reg32) d[2], d3 = inout(reg32) d[3],
                         a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                         b0 = in(reg32) b[0], b1 = in(reg32) b[1], options(pure, nomem, nostack));
                }
            }
        }
    };
}

mma_16bit!(super::F16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");
mma_16bit!(super::BF16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");

/// `ldmatrix.x4.trans`: four 8×8 16-bit matrices from shared memory, transposed; lanes 8i..8i+7
/// give the row addresses (16 bytes each) of matrix i, which lands in register i. Lane 4g + t
/// gets (rows 2t, 2t+1; column g) of each: the `b` fragment of [`MmaInput::mma_16x8x16`] from a
/// k-major (`[k][n]`) tile.
///
/// # Safety
/// `addr` is a 16-byte-aligned shared address of 16 readable bytes; every lane executes it.
#[inline(always)]
pub unsafe fn ldmatrix_x4_trans(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
         p = in(reg32) addr, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
         options(readonly, nostack));
    [a, b, c, d]
}

/// `ldmatrix.x4`: four 8×8 16-bit matrices from shared memory; lanes 8i..8i+7 give the row
/// addresses (16 bytes each) of matrix i, which lands in register i. Lane 4g + t gets (row g;
/// columns 2t, 2t + 1) of each: the `a` fragment of [`MmaInput::mma_16x8x16`] (matrices: rows
/// 0-7 and 8-15 at k 0-7, then at k 8-15), or two `b` fragments from an n-major (`[n][k]`) tile.
///
/// # Safety
/// As [`ldmatrix_x4_trans`].
#[inline(always)]
pub unsafe fn ldmatrix_x4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
         p = in(reg32) addr, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
         options(readonly, nostack));
    [a, b, c, d]
}
