//! Hopper (sm_90a) asynchronous tensor-core primitives: `wgmma`, `mbarrier`, TMA tensor copies
//! (`cp.async.bulk.tensor`), shared-memory matrix descriptors and register reallocation.
//!
//! Compiled only into the sm_90a module (cargo feature `sm90a` of the kernel crate): the plain
//! sm_90 target does not accept these instructions.
use core::arch::asm;

/// The accumulators of one `wgmma.m64n256k16` per thread of a warpgroup: for each 8-column
/// block `i` of the 64×256 tile (warp `w` of the warpgroup, lane = 4g + t), `acc[4i..4i+4]` =
/// (16w + g, 8i + 2t), (16w + g, 8i + 2t + 1), (16w + g + 8, 8i + 2t), (16w + g + 8, 8i + 2t + 1).
pub type WgmmaAcc = [f32; 128];

/// A 128-byte-swizzle shared-memory matrix descriptor: start address `addr` (the swizzle atom of
/// 8 rows × 128 bytes it lies in must be 1024-byte aligned), leading-dimension byte offset `lbo`
/// and stride-dimension byte offset `sbo` (PTX ISA, "Matrix Descriptor Format").
#[inline(always)]
pub fn sw128_descriptor(addr: u32, lbo: u32, sbo: u32) -> u64 {
    let field = |bytes: u32| (bytes as u64 >> 4) & 0x3FFF;
    field(addr) | field(lbo) << 16 | field(sbo) << 32 | 1u64 << 62
}

/// Initialise the `mbarrier` at shared address `bar` to expect `count` arrivals per phase.
///
/// # Safety
/// `bar` is an 8-byte-aligned shared address no other thread uses until a barrier follows.
#[inline(always)]
pub unsafe fn mbarrier_init(bar: u32, count: u32) {
    asm!("mbarrier.init.shared::cta.b64 [{b}], {n};", b = in(reg32) bar, n = in(reg32) count, options(nostack));
}

/// Make `mbarrier` initialisations visible to the other threads and to the async (TMA) proxy;
/// a block barrier must follow before any thread uses them.
#[inline(always)]
pub fn fence_mbarrier_init() {
    // SAFETY: fences only.
    unsafe {
        asm!("fence.mbarrier_init.release.cluster;", "fence.proxy.async.shared::cta;", options(nostack))
    }
}

/// Arrive on `bar` and add `bytes` to the transaction count its current phase waits for.
///
/// # Safety
/// `bar` is an initialised shared `mbarrier`.
#[inline(always)]
pub unsafe fn mbarrier_arrive_expect_tx(bar: u32, bytes: u32) {
    asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};", b = in(reg32) bar, n = in(reg32) bytes, options(nostack));
}

/// Arrive on `bar`.
///
/// # Safety
/// `bar` is an initialised shared `mbarrier`.
#[inline(always)]
pub unsafe fn mbarrier_arrive(bar: u32) {
    asm!("mbarrier.arrive.shared::cta.b64 _, [{b}];", b = in(reg32) bar, options(nostack));
}

/// Wait until the phase of `bar` with parity `parity` has completed.
///
/// # Safety
/// `bar` is an initialised shared `mbarrier`.
#[inline(always)]
pub unsafe fn mbarrier_wait(bar: u32, parity: u32) {
    loop {
        let done: u32;
        asm!("{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {q}; selp.u32 {d}, 1, 0, p; }}",
             b = in(reg32) bar, q = in(reg32) parity, d = out(reg32) done, options(nostack));
        if done != 0 {
            break;
        }
    }
}

/// Make the tensor map at global address `map` (128 bytes), written by the host (a copy from host
/// memory) before this kernel was launched, visible to the tensor-map proxy that TMA reads it
/// through (`fence.proxy.tensormap::generic.acquire.sys`, PTX ISA 8.3). Without it the proxy may
/// use a descriptor it cached for the same address from an earlier launch. System scope because
/// the host wrote the map (the programming guide's rule for maps copied in with `cudaMemcpy`).
///
/// # Safety
/// `map` is the generic address of a 128-byte `CUtensorMap` in global memory.
#[inline(always)]
pub unsafe fn tensormap_acquire(map: *const u8) {
    asm!("fence.proxy.tensormap::generic.acquire.sys [{m}], 128;", m = in(reg64) map, options(nostack));
}

/// TMA: copy the box at element coordinates `(c0, c1, c2)` of the 3-D tensor described by the
/// tensor map at global address `map` into shared memory at `dst`; completion adds the box's
/// bytes to `bar`'s transaction count. Out-of-bounds elements are filled with zeros.
///
/// # Safety
/// `map` is a 64-byte-aligned `CUtensorMap` in global memory, valid for the kernel's duration and
/// made visible to the tensor-map proxy by [`tensormap_acquire`] in this thread;
/// `dst` is a shared buffer of the box's size, aligned as the map's swizzle needs (1024 bytes
/// for 128-byte swizzle); `bar` is an initialised shared `mbarrier`.
#[inline(always)]
pub unsafe fn tma_load_3d(dst: u32, map: *const u8, bar: u32, (c0, c1, c2): (i32, i32, i32)) {
    asm!("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}, {z}}}], [{b}];",
         d = in(reg32) dst, m = in(reg64) map, b = in(reg32) bar, x = in(reg32) c0, y = in(reg32) c1, z = in(reg32) c2,
         options(nostack));
}

/// Release registers to the other warpgroups (`setmaxnreg.dec`) down to `REGS` per thread;
/// every thread of the warpgroup executes it.
#[inline(always)]
pub fn setmaxnreg_dec<const REGS: u32>() {
    // SAFETY: register budget only.
    unsafe { asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const REGS, options(nostack)) }
}

/// Raise this warpgroup's registers per thread to `REGS` (`setmaxnreg.inc`).
#[inline(always)]
pub fn setmaxnreg_inc<const REGS: u32>() {
    // SAFETY: register budget only.
    unsafe { asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const REGS, options(nostack)) }
}

/// `{d0}, {d1}, …, {d127}`: the accumulator operands of [`asm_on_accumulators!`], for its
/// template.
macro_rules! accumulator_operands {
    () => {
        "{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}, {d32}, {d33}, {d34}, {d35}, {d36}, {d37}, {d38}, {d39}, {d40}, {d41}, {d42}, {d43}, {d44}, {d45}, {d46}, {d47}, {d48}, {d49}, {d50}, {d51}, {d52}, {d53}, {d54}, {d55}, {d56}, {d57}, {d58}, {d59}, {d60}, {d61}, {d62}, {d63}, {d64}, {d65}, {d66}, {d67}, {d68}, {d69}, {d70}, {d71}, {d72}, {d73}, {d74}, {d75}, {d76}, {d77}, {d78}, {d79}, {d80}, {d81}, {d82}, {d83}, {d84}, {d85}, {d86}, {d87}, {d88}, {d89}, {d90}, {d91}, {d92}, {d93}, {d94}, {d95}, {d96}, {d97}, {d98}, {d99}, {d100}, {d101}, {d102}, {d103}, {d104}, {d105}, {d106}, {d107}, {d108}, {d109}, {d110}, {d111}, {d112}, {d113}, {d114}, {d115}, {d116}, {d117}, {d118}, {d119}, {d120}, {d121}, {d122}, {d123}, {d124}, {d125}, {d126}, {d127}"
    };
}

/// `asm!` over a warpgroup's [`WgmmaAcc`]: `$acc[i]` is bound, read and written, as `{di}`; the
/// template (the `concat!` of `$template`, which names them through
/// [`accumulator_operands!`]) may use the extra named `$operands` too.
macro_rules! asm_on_accumulators {
    ($acc:ident, [$($operands:tt)*], $($template:expr),+ $(,)?) => {
        asm!(concat!($($template),+),
            $($operands)*
            d0 = inout(reg32) $acc[0],
            d1 = inout(reg32) $acc[1],
            d2 = inout(reg32) $acc[2],
            d3 = inout(reg32) $acc[3],
            d4 = inout(reg32) $acc[4],
            d5 = inout(reg32) $acc[5],
            d6 = inout(reg32) $acc[6],
            d7 = inout(reg32) $acc[7],
            d8 = inout(reg32) $acc[8],
            d9 = inout(reg32) $acc[9],
            d10 = inout(reg32) $acc[10],
            d11 = inout(reg32) $acc[11],
            d12 = inout(reg32) $acc[12],
            d13 = inout(reg32) $acc[13],
            d14 = inout(reg32) $acc[14],
            d15 = inout(reg32) $acc[15],
            d16 = inout(reg32) $acc[16],
            d17 = inout(reg32) $acc[17],
            d18 = inout(reg32) $acc[18],
            d19 = inout(reg32) $acc[19],
            d20 = inout(reg32) $acc[20],
            d21 = inout(reg32) $acc[21],
            d22 = inout(reg32) $acc[22],
            d23 = inout(reg32) $acc[23],
            d24 = inout(reg32) $acc[24],
            d25 = inout(reg32) $acc[25],
            d26 = inout(reg32) $acc[26],
            d27 = inout(reg32) $acc[27],
            d28 = inout(reg32) $acc[28],
            d29 = inout(reg32) $acc[29],
            d30 = inout(reg32) $acc[30],
            d31 = inout(reg32) $acc[31],
            d32 = inout(reg32) $acc[32],
            d33 = inout(reg32) $acc[33],
            d34 = inout(reg32) $acc[34],
            d35 = inout(reg32) $acc[35],
            d36 = inout(reg32) $acc[36],
            d37 = inout(reg32) $acc[37],
            d38 = inout(reg32) $acc[38],
            d39 = inout(reg32) $acc[39],
            d40 = inout(reg32) $acc[40],
            d41 = inout(reg32) $acc[41],
            d42 = inout(reg32) $acc[42],
            d43 = inout(reg32) $acc[43],
            d44 = inout(reg32) $acc[44],
            d45 = inout(reg32) $acc[45],
            d46 = inout(reg32) $acc[46],
            d47 = inout(reg32) $acc[47],
            d48 = inout(reg32) $acc[48],
            d49 = inout(reg32) $acc[49],
            d50 = inout(reg32) $acc[50],
            d51 = inout(reg32) $acc[51],
            d52 = inout(reg32) $acc[52],
            d53 = inout(reg32) $acc[53],
            d54 = inout(reg32) $acc[54],
            d55 = inout(reg32) $acc[55],
            d56 = inout(reg32) $acc[56],
            d57 = inout(reg32) $acc[57],
            d58 = inout(reg32) $acc[58],
            d59 = inout(reg32) $acc[59],
            d60 = inout(reg32) $acc[60],
            d61 = inout(reg32) $acc[61],
            d62 = inout(reg32) $acc[62],
            d63 = inout(reg32) $acc[63],
            d64 = inout(reg32) $acc[64],
            d65 = inout(reg32) $acc[65],
            d66 = inout(reg32) $acc[66],
            d67 = inout(reg32) $acc[67],
            d68 = inout(reg32) $acc[68],
            d69 = inout(reg32) $acc[69],
            d70 = inout(reg32) $acc[70],
            d71 = inout(reg32) $acc[71],
            d72 = inout(reg32) $acc[72],
            d73 = inout(reg32) $acc[73],
            d74 = inout(reg32) $acc[74],
            d75 = inout(reg32) $acc[75],
            d76 = inout(reg32) $acc[76],
            d77 = inout(reg32) $acc[77],
            d78 = inout(reg32) $acc[78],
            d79 = inout(reg32) $acc[79],
            d80 = inout(reg32) $acc[80],
            d81 = inout(reg32) $acc[81],
            d82 = inout(reg32) $acc[82],
            d83 = inout(reg32) $acc[83],
            d84 = inout(reg32) $acc[84],
            d85 = inout(reg32) $acc[85],
            d86 = inout(reg32) $acc[86],
            d87 = inout(reg32) $acc[87],
            d88 = inout(reg32) $acc[88],
            d89 = inout(reg32) $acc[89],
            d90 = inout(reg32) $acc[90],
            d91 = inout(reg32) $acc[91],
            d92 = inout(reg32) $acc[92],
            d93 = inout(reg32) $acc[93],
            d94 = inout(reg32) $acc[94],
            d95 = inout(reg32) $acc[95],
            d96 = inout(reg32) $acc[96],
            d97 = inout(reg32) $acc[97],
            d98 = inout(reg32) $acc[98],
            d99 = inout(reg32) $acc[99],
            d100 = inout(reg32) $acc[100],
            d101 = inout(reg32) $acc[101],
            d102 = inout(reg32) $acc[102],
            d103 = inout(reg32) $acc[103],
            d104 = inout(reg32) $acc[104],
            d105 = inout(reg32) $acc[105],
            d106 = inout(reg32) $acc[106],
            d107 = inout(reg32) $acc[107],
            d108 = inout(reg32) $acc[108],
            d109 = inout(reg32) $acc[109],
            d110 = inout(reg32) $acc[110],
            d111 = inout(reg32) $acc[111],
            d112 = inout(reg32) $acc[112],
            d113 = inout(reg32) $acc[113],
            d114 = inout(reg32) $acc[114],
            d115 = inout(reg32) $acc[115],
            d116 = inout(reg32) $acc[116],
            d117 = inout(reg32) $acc[117],
            d118 = inout(reg32) $acc[118],
            d119 = inout(reg32) $acc[119],
            d120 = inout(reg32) $acc[120],
            d121 = inout(reg32) $acc[121],
            d122 = inout(reg32) $acc[122],
            d123 = inout(reg32) $acc[123],
            d124 = inout(reg32) $acc[124],
            d125 = inout(reg32) $acc[125],
            d126 = inout(reg32) $acc[126],
            d127 = inout(reg32) $acc[127],
            options(nostack))
    };
}

/// `wgmma.fence`: order this warpgroup's register accesses to `acc` before the next `wgmma`.
#[inline(always)]
pub fn wgmma_fence(acc: &mut WgmmaAcc) {
    // SAFETY: a fence; the accumulators are tied so that no access moves across it.
    unsafe {
        asm_on_accumulators!(acc, [], "wgmma.fence.sync.aligned; // ", accumulator_operands!());
    }
}

/// Close the group of `wgmma` issued since the last commit.
#[inline(always)]
pub fn wgmma_commit() {
    // SAFETY: no operands.
    unsafe { asm!("wgmma.commit_group.sync.aligned;", options(nostack)) }
}

/// Wait until at most `PENDING` `wgmma` groups of this warpgroup are in flight; the accumulators
/// are tied so that no read of them moves above the wait.
#[inline(always)]
pub fn wgmma_wait<const PENDING: u32>(acc: &mut WgmmaAcc) {
    // SAFETY: a wait; the accumulators are only tied.
    unsafe {
        asm_on_accumulators!(acc, [n = const PENDING,], "wgmma.wait_group.sync.aligned {n}; // ", accumulator_operands!());
    }
}

/// `acc += A · B` for one warpgroup: A 64×k and B k×256 (32 bytes of k) from shared memory
/// through the descriptors `a` and `b`; `$shape` names the shape and types, `$flags` the
/// immediate scale (and, for 16-bit types, transpose: 0 K-major, 1 M/N-major) operands.
macro_rules! wgmma_m64n256 {
    ($name:ident, $shape:literal, $flags:literal) => {
        #[inline(always)]
        unsafe fn $name(acc: &mut WgmmaAcc, a: u64, b: u64) {
            asm_on_accumulators!(acc, [a = in(reg64) a, b = in(reg64) b,], "wgmma.mma_async.sync.aligned.", $shape, " {{", accumulator_operands!(),
                         "}}, {a}, {b}, 1, ", $flags, ";");
        }
    };
}

wgmma_m64n256!(wgmma_f16_kk, "m64n256k16.f32.f16.f16", "1, 1, 0, 0");
wgmma_m64n256!(wgmma_f16_km, "m64n256k16.f32.f16.f16", "1, 1, 0, 1");
wgmma_m64n256!(wgmma_f16_mk, "m64n256k16.f32.f16.f16", "1, 1, 1, 0");
wgmma_m64n256!(wgmma_f16_mm, "m64n256k16.f32.f16.f16", "1, 1, 1, 1");
wgmma_m64n256!(wgmma_bf16_kk, "m64n256k16.f32.bf16.bf16", "1, 1, 0, 0");
wgmma_m64n256!(wgmma_bf16_km, "m64n256k16.f32.bf16.bf16", "1, 1, 0, 1");
wgmma_m64n256!(wgmma_bf16_mk, "m64n256k16.f32.bf16.bf16", "1, 1, 1, 0");
wgmma_m64n256!(wgmma_bf16_mm, "m64n256k16.f32.bf16.bf16", "1, 1, 1, 1");
wgmma_m64n256!(wgmma_tf32_kk, "m64n256k8.f32.tf32.tf32", "1, 1");

/// TF32 inputs: f32 in memory, read by `wgmma` with their low 13 mantissa bits ignored.
pub struct Tf32;

/// Element types of the Hopper GEMM (f32 accumulation): storage, conversions, global loads and
/// stores for the epilogue, and one `wgmma` over 32 bytes of k.
pub trait WgmmaInput {
    /// How an element is stored.
    type Elem: Copy;
    /// The element as f32 (exact).
    fn widen(x: Self::Elem) -> f32;
    /// f32 rounded to the element type.
    fn narrow(x: f32) -> Self::Elem;
    /// # Safety
    /// `p` is aligned global memory that nothing writes during the kernel.
    unsafe fn load_elem(p: *const Self::Elem) -> Self::Elem;
    /// # Safety
    /// `p` is aligned writable global memory.
    unsafe fn store_elem(p: *mut Self::Elem, v: Self::Elem);
    /// Two consecutive elements in one store.
    ///
    /// # Safety
    /// `p` is writable global memory aligned to two elements.
    unsafe fn store_elem_pair(p: *mut Self::Elem, v0: Self::Elem, v1: Self::Elem);
    /// `acc += A · B` for one warpgroup (see [`WgmmaAcc`] for the accumulator layout) over 32
    /// bytes of k; `a_mn_major` / `b_mn_major` say which operand is stored M- / N-major
    /// (constants at every call site, so the match folds to one instruction; TF32 supports only
    /// K-major operands and ignores them).
    ///
    /// # Safety
    /// The descriptors describe shared memory that holds the operands (written and made visible
    /// to the async proxy before the call); every thread of the warpgroup calls it, after
    /// [`wgmma_fence`].
    unsafe fn wgmma_k32_bytes(acc: &mut WgmmaAcc, a: u64, b: u64, a_mn_major: bool, b_mn_major: bool);
}

macro_rules! wgmma_16bit {
    ($ty:ty, $kk:ident, $km:ident, $mk:ident, $mm:ident) => {
        impl WgmmaInput for $ty {
            type Elem = u16;
            #[inline(always)]
            fn widen(x: u16) -> f32 {
                <$ty as super::HalfFloat>::to_f32(x)
            }
            #[inline(always)]
            fn narrow(x: f32) -> u16 {
                <$ty as super::HalfFloat>::from_f32(x)
            }
            #[inline(always)]
            unsafe fn load_elem(p: *const u16) -> u16 {
                super::load_nc_u16(p)
            }
            #[inline(always)]
            unsafe fn store_elem(p: *mut u16, v: u16) {
                super::store_u16(p, v)
            }
            #[inline(always)]
            unsafe fn store_elem_pair(p: *mut u16, v0: u16, v1: u16) {
                super::store_u16x2(p, v0, v1)
            }
            #[inline(always)]
            unsafe fn wgmma_k32_bytes(
                acc: &mut WgmmaAcc,
                a: u64,
                b: u64,
                a_mn_major: bool,
                b_mn_major: bool,
            ) {
                match (a_mn_major, b_mn_major) {
                    (false, false) => $kk(acc, a, b),
                    (false, true) => $km(acc, a, b),
                    (true, false) => $mk(acc, a, b),
                    (true, true) => $mm(acc, a, b),
                }
            }
        }
    };
}

wgmma_16bit!(super::F16, wgmma_f16_kk, wgmma_f16_km, wgmma_f16_mk, wgmma_f16_mm);
wgmma_16bit!(super::BF16, wgmma_bf16_kk, wgmma_bf16_km, wgmma_bf16_mk, wgmma_bf16_mm);

impl WgmmaInput for Tf32 {
    type Elem = f32;
    #[inline(always)]
    fn widen(x: f32) -> f32 {
        x
    }
    #[inline(always)]
    fn narrow(x: f32) -> f32 {
        x
    }
    #[inline(always)]
    unsafe fn load_elem(p: *const f32) -> f32 {
        super::load_nc_f32(p)
    }
    #[inline(always)]
    unsafe fn store_elem(p: *mut f32, v: f32) {
        super::store_f32(p, v)
    }
    #[inline(always)]
    unsafe fn store_elem_pair(p: *mut f32, v0: f32, v1: f32) {
        super::store_f32x2(p, [v0, v1])
    }
    #[inline(always)]
    unsafe fn wgmma_k32_bytes(acc: &mut WgmmaAcc, a: u64, b: u64, _: bool, _: bool) {
        wgmma_tf32_kk(acc, a, b)
    }
}

/// Two f32 rounded (to nearest even) to 16-bit `E` and packed in one `cvt` (`cvt.rn.f16x2.f32`,
/// `cvt.rn.bf16x2.f32`), `lo` in the low half: a `wgmma` register A operand from f32 values in
/// one instruction where two conversions and a permute would take three.
#[inline(always)]
pub fn pack_rn_half2<E: super::WgmmaHalf>(lo: f32, hi: f32) -> u32 {
    let d: u32;
    // SAFETY: pure conversion.
    unsafe {
        if E::IS_BF16 {
            asm!("cvt.rn.bf16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi, lo = in(reg32) lo,
                 options(pure, nomem, nostack));
        } else {
            asm!("cvt.rn.f16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi, lo = in(reg32) lo,
                 options(pure, nomem, nostack));
        }
    }
    d
}

/// Make every value of `v` computed here: an empty `asm!` that reads and writes them. LLVM
/// otherwise sinks pure arithmetic (a softmax) to its first use, which may lie past a wait that
/// the arithmetic was meant to overlap. Emits no instruction.
#[inline(always)]
pub fn pin_values<const N: usize>(v: &mut [f32; N]) {
    unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
                  24, 25, 26, 27, 28, 29, 30, 31] => {
        if 4 * i < N {
            // SAFETY: an empty template; the operands are only tied.
            unsafe {
                asm!("// pin {0} {1} {2} {3}", inout(reg32) v[4 * i], inout(reg32) v[4 * i + 1],
                     inout(reg32) v[4 * i + 2], inout(reg32) v[4 * i + 3], options(nomem, nostack, preserves_flags));
            }
        }
    });
}

/// `bar.sync ID, THREADS`: wait at named barrier `ID` (1..16; 0 is `sync_threads`'s) until
/// `THREADS` threads (a multiple of 32) have arrived or synced on it, this warp included.
///
/// # Safety
/// Every warp that uses barrier `ID` agrees on `THREADS`, and the arrivals of each phase add up
/// to it (a phase that never completes hangs the block).
#[inline(always)]
pub unsafe fn named_barrier_sync<const ID: u32, const THREADS: u32>() {
    asm!("bar.sync {i}, {n};", i = const ID, n = const THREADS, options(nostack));
}

/// `bar.arrive ID, THREADS`: count this warp's arrival at named barrier `ID` without waiting.
///
/// # Safety
/// As [`named_barrier_sync`].
#[inline(always)]
pub unsafe fn named_barrier_arrive<const ID: u32, const THREADS: u32>() {
    asm!("bar.arrive {i}, {n};", i = const ID, n = const THREADS, options(nostack));
}
