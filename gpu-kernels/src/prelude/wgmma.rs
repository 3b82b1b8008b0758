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

/// The generic address of parameter `$index` of kernel `$kernel` (the entry's own name): the
/// tensor maps a kernel takes by value ([`TensorMaps`](crate::shapes::TensorMaps)), which TMA
/// reads in place. Taking the address in Rust would make LLVM copy the parameter to local memory
/// first, and a local copy is no tensor map, so `cvta.param` names the parameter's PTX symbol.
/// Parameters are fixed for the whole launch, so the tensor-map proxy needs no fence.
macro_rules! kernel_param_address {
    ($kernel:ident, $index:literal) => {{
        let address: u64;
        // SAFETY: reads no memory; `cvta.param` of a parameter of the entry this expands in.
        unsafe {
            core::arch::asm!(
                concat!("cvta.param.u64 {a}, ", stringify!($kernel), "_param_", stringify!($index), ";"),
                a = out(reg64) address,
                options(pure, nomem, nostack)
            )
        };
        address as *const u8
    }};
}
pub(crate) use kernel_param_address;

/// TMA: copy the box at element coordinates `(c0, c1, c2)` of the 3-D tensor described by the
/// tensor map at `map` into shared memory at `dst`; completion adds the box's bytes to `bar`'s
/// transaction count. Out-of-bounds elements are filled with zeros.
///
/// # Safety
/// `map` is the generic address of a `CUtensorMap` kernel parameter ([`kernel_param_address`]);
/// `dst` is a shared buffer of the box's size, aligned as the map's swizzle needs (1024 bytes
/// for 128-byte swizzle); `bar` is an initialised shared `mbarrier`.
#[inline(always)]
pub unsafe fn tma_load_3d(dst: u32, map: *const u8, bar: u32, (c0, c1, c2): (i32, i32, i32)) {
    asm!("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}, {z}}}], [{b}];",
         d = in(reg32) dst, m = in(reg64) map, b = in(reg32) bar, x = in(reg32) c0, y = in(reg32) c1, z = in(reg32) c2,
         options(nostack));
}

/// As [`tma_load_3d`], for a 4-D map (coordinates innermost first).
///
/// # Safety
/// As [`tma_load_3d`].
#[inline(always)]
pub unsafe fn tma_load_4d(dst: u32, map: *const u8, bar: u32, (c0, c1, c2, c3): (i32, i32, i32, i32)) {
    asm!("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}, {z}, {w}}}], [{b}];",
         d = in(reg32) dst, m = in(reg64) map, b = in(reg32) bar, x = in(reg32) c0, y = in(reg32) c1, z = in(reg32) c2,
         w = in(reg32) c3, options(nostack));
}

/// As [`tma_load_3d`], and the same bytes land at the same shared offsets `dst` of every block
/// of the cluster named in `mask` (bit r: the block of rank r), each completing on its own
/// `mbarrier` at offset `bar`.
///
/// # Safety
/// As [`tma_load_3d`] for every block in `mask`: the cluster's blocks are running, and `dst` and
/// `bar` are free for the copy in each of them.
#[inline(always)]
pub unsafe fn tma_load_3d_multicast(
    dst: u32,
    map: *const u8,
    bar: u32,
    (c0, c1, c2): (i32, i32, i32),
    mask: u16,
) {
    asm!("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [{d}], [{m}, {{{x}, {y}, {z}}}], [{b}], {k};",
         d = in(reg32) dst, m = in(reg64) map, b = in(reg32) bar, x = in(reg32) c0, y = in(reg32) c1, z = in(reg32) c2,
         k = in(reg16) mask, options(nostack));
}

/// Arrive on the `mbarrier` at this block's shared offset `bar` in the cluster's block `rank`.
/// The default (CTA-scope) release: it orders this thread's own accesses only, which is what a
/// consumer releasing a stage it read through `wgmma` (complete, waited for) needs; a
/// cluster-scope release would cost a GPU-wide memory barrier per arrival.
///
/// # Safety
/// That block is running and `bar` is an initialised `mbarrier` there.
#[inline(always)]
pub unsafe fn mbarrier_arrive_cluster(bar: u32, rank: u32) {
    asm!("{{ .reg .b32 remote; mapa.shared::cluster.u32 remote, {b}, {r}; mbarrier.arrive.shared::cluster.b64 _, [remote]; }}",
         b = in(reg32) bar, r = in(reg32) rank, options(nostack));
}

/// TMA: copy the box at `src` in shared memory to element coordinates `(c0, c1, c2)` of the 3-D
/// tensor described by the tensor map at `map` (the box's layout and swizzle as the map says);
/// the part of the box outside the tensor is not written. The copy joins this thread's current
/// bulk-async group ([`bulk_commit`], [`bulk_wait_read`]).
///
/// # Safety
/// `map` as for [`tma_load_3d`]; `src` is aligned as the map's swizzle needs and holds the box,
/// written by this block and made visible to the async proxy ([`fence_proxy_async_shared`] by each
/// writer, then a barrier) before the call, and left unchanged until [`bulk_wait_read`] says the
/// copy has read it.
#[inline(always)]
pub unsafe fn tma_store_3d(map: *const u8, src: u32, (c0, c1, c2): (i32, i32, i32)) {
    asm!("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [{m}, {{{x}, {y}, {z}}}], [{s}];",
         m = in(reg64) map, s = in(reg32) src, x = in(reg32) c0, y = in(reg32) c1, z = in(reg32) c2,
         options(nostack));
}

/// Close this thread's group of bulk-async copies issued since the last commit.
#[inline(always)]
pub fn bulk_commit() {
    // SAFETY: no operands.
    unsafe { asm!("cp.async.bulk.commit_group;", options(nostack)) }
}

/// Wait until at most `PENDING` of this thread's committed bulk-async groups still read their
/// shared-memory sources (their writes to global memory may still be under way).
#[inline(always)]
pub fn bulk_wait_read<const PENDING: u32>() {
    // SAFETY: a wait.
    unsafe { asm!("cp.async.bulk.wait_group.read {n};", n = const PENDING, options(nostack)) }
}

/// Wait until every committed bulk-async group of this thread has completed, writes included.
#[inline(always)]
pub fn bulk_wait_all() {
    // SAFETY: a wait.
    unsafe { asm!("cp.async.bulk.wait_group 0;", options(nostack)) }
}

/// Make this thread's shared-memory writes visible to the async proxy (TMA stores, `wgmma`).
#[inline(always)]
pub fn fence_proxy_async_shared() {
    // SAFETY: a fence.
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) }
}

/// Named barrier `id` (1–15; 0 is `sync_threads`'s) for `THREADS` threads, a multiple of 32:
/// the warps that take part wait for each other; shared-memory writes before it are visible
/// after it to those threads.
#[inline(always)]
pub fn named_barrier<const THREADS: u32>(id: u32) {
    // SAFETY: a barrier; callers keep every warp of the group on the same path to it.
    unsafe { asm!("bar.sync {id}, {n};", id = in(reg32) id, n = const THREADS, options(nostack)) }
}

/// Store `v` at shared address `addr`.
///
/// # Safety
/// `addr` is a 4-byte-aligned shared address in this block's allocation.
#[inline(always)]
pub unsafe fn store_shared_u32(addr: u32, v: u32) {
    asm!("st.shared.b32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack));
}

/// The `u32` at shared address `addr`.
///
/// # Safety
/// `addr` is a 4-byte-aligned shared address in this block's allocation, written before a
/// barrier this thread has passed.
#[inline(always)]
pub unsafe fn load_shared_u32(addr: u32) -> u32 {
    let v: u32;
    asm!("ld.shared.b32 {v}, [{a}];", a = in(reg32) addr, v = out(reg32) v, options(nostack, readonly));
    v
}

/// The four `f32` at shared address `addr`.
///
/// # Safety
/// `addr` is a 16-byte-aligned shared address in this block's allocation, written before a
/// barrier (or an mbarrier wait) this thread has passed.
#[inline(always)]
pub unsafe fn load_shared_f32x4(addr: u32) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    asm!("ld.shared.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}];", p = in(reg32) addr, a = out(reg32) a, b = out(reg32) b,
         c = out(reg32) c, d = out(reg32) d, options(nostack, readonly));
    [a, b, c, d]
}

/// Store `v` at shared address `addr`.
///
/// # Safety
/// `addr` is a 16-byte-aligned shared address in this block's allocation that no other thread
/// or proxy reads or writes until a barrier (or fence and mbarrier) orders them.
#[inline(always)]
pub unsafe fn store_shared_f32x4(addr: u32, v: [f32; 4]) {
    asm!("st.shared.v4.f32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg32) addr, a = in(reg32) v[0], b = in(reg32) v[1],
         c = in(reg32) v[2], d = in(reg32) v[3], options(nostack));
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

/// `$callback!($($args)* [i0 i1 …; last])` with the indices 0 to `$count` − 1 (32, 64, 96 or 128
/// accumulators): the lists [`asm_on_accumulators!`] takes.
macro_rules! with_accumulator_indices {
    (32, $callback:ident!($($args:tt)*)) => {
        $callback!($($args)* [
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30; 31
        ])
    };
    (64, $callback:ident!($($args:tt)*)) => {
        $callback!($($args)* [
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
            61 62; 63
        ])
    };
    (96, $callback:ident!($($args:tt)*)) => {
        $callback!($($args)* [
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
            61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89
            90 91 92 93 94; 95
        ])
    };
    (128, $callback:ident!($($args:tt)*)) => {
        $callback!($($args)* [
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
            61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89
            90 91 92 93 94 95 96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113
            114 115 116 117 118 119 120 121 122 123 124 125 126; 127
        ])
    };
}

/// `asm!` on accumulators `$acc[$base + i]` for the listed i (read and written, each in its own
/// register): the template is `$head`, the accumulators as a brace list, then `$tail`, which may
/// use the extra named `$operands`.
macro_rules! asm_on_accumulators {
    ($acc:ident, $base:expr, [$($operands:tt)*], $head:expr, $tail:expr, [$($i:literal)*; $last:literal]) => {
        asm!(concat!($head, "{{", $("{", $i, "}, ",)* "{", $last, "}}}", $tail),
            $(inout(reg32) $acc[$base + $i],)*
            inout(reg32) $acc[$base + $last],
            $($operands)*
            options(nostack))
    };
}

/// `wgmma.fence`: order this warpgroup's register accesses to `acc` before the next `wgmma`.
#[inline(always)]
pub fn wgmma_fence(acc: &mut WgmmaAcc) {
    // SAFETY: a fence; the accumulators are tied so that no access moves across it.
    unsafe {
        with_accumulator_indices!(
            128,
            asm_on_accumulators!(acc, 0, [], "wgmma.fence.sync.aligned; // ", "",)
        );
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
        with_accumulator_indices!(
            128,
            asm_on_accumulators!(acc, 0, [n = const PENDING,], "wgmma.wait_group.sync.aligned {n}; // ", "",)
        );
    }
}

/// `acc += A · B` for one warpgroup: A 64×k and B k×N (32 bytes of k) from shared memory through
/// the descriptors `a` and `b`, on the `$count` accumulators from `$half`·64 (`$half` a const
/// generic, 0 when the product uses one half or all); `$shape` names the shape and types,
/// `$flags` the immediate scale (and, for 16-bit types, transpose: 0 K-major, 1 M/N-major)
/// operands.
macro_rules! wgmma_product {
    ($name:ident, $count:tt, $shape:literal, $flags:literal) => {
        #[inline(always)]
        unsafe fn $name<const HALF: usize>(acc: &mut WgmmaAcc, a: u64, b: u64) {
            with_accumulator_indices!(
                $count,
                asm_on_accumulators!(
                    acc,
                    HALF * 64,
                    [a = in(reg64) a, b = in(reg64) b,],
                    concat!("wgmma.mma_async.sync.aligned.", $shape, " "),
                    concat!(", {a}, {b}, 1, ", $flags, ";"),
                )
            );
        }
    };
}

wgmma_product!(wgmma_f16_kk, 128, "m64n256k16.f32.f16.f16", "1, 1, 0, 0");
wgmma_product!(wgmma_f16_km, 128, "m64n256k16.f32.f16.f16", "1, 1, 0, 1");
wgmma_product!(wgmma_f16_mk, 128, "m64n256k16.f32.f16.f16", "1, 1, 1, 0");
wgmma_product!(wgmma_f16_mm, 128, "m64n256k16.f32.f16.f16", "1, 1, 1, 1");
wgmma_product!(wgmma_bf16_kk, 128, "m64n256k16.f32.bf16.bf16", "1, 1, 0, 0");
wgmma_product!(wgmma_bf16_km, 128, "m64n256k16.f32.bf16.bf16", "1, 1, 0, 1");
wgmma_product!(wgmma_bf16_mk, 128, "m64n256k16.f32.bf16.bf16", "1, 1, 1, 0");
wgmma_product!(wgmma_bf16_mm, 128, "m64n256k16.f32.bf16.bf16", "1, 1, 1, 1");
wgmma_product!(wgmma_tf32_kk, 128, "m64n256k8.f32.tf32.tf32", "1, 1");

wgmma_product!(wgmma_n128_f16_kk, 64, "m64n128k16.f32.f16.f16", "1, 1, 0, 0");
wgmma_product!(wgmma_n128_f16_km, 64, "m64n128k16.f32.f16.f16", "1, 1, 0, 1");
wgmma_product!(wgmma_n128_f16_mk, 64, "m64n128k16.f32.f16.f16", "1, 1, 1, 0");
wgmma_product!(wgmma_n128_f16_mm, 64, "m64n128k16.f32.f16.f16", "1, 1, 1, 1");
wgmma_product!(wgmma_n128_bf16_kk, 64, "m64n128k16.f32.bf16.bf16", "1, 1, 0, 0");
wgmma_product!(wgmma_n128_bf16_km, 64, "m64n128k16.f32.bf16.bf16", "1, 1, 0, 1");
wgmma_product!(wgmma_n128_bf16_mk, 64, "m64n128k16.f32.bf16.bf16", "1, 1, 1, 0");
wgmma_product!(wgmma_n128_bf16_mm, 64, "m64n128k16.f32.bf16.bf16", "1, 1, 1, 1");
wgmma_product!(wgmma_n128_tf32_kk, 64, "m64n128k8.f32.tf32.tf32", "1, 1");

wgmma_product!(wgmma_n192_f16_kk, 96, "m64n192k16.f32.f16.f16", "1, 1, 0, 0");
wgmma_product!(wgmma_n192_f16_km, 96, "m64n192k16.f32.f16.f16", "1, 1, 0, 1");
wgmma_product!(wgmma_n192_f16_mk, 96, "m64n192k16.f32.f16.f16", "1, 1, 1, 0");
wgmma_product!(wgmma_n192_f16_mm, 96, "m64n192k16.f32.f16.f16", "1, 1, 1, 1");
wgmma_product!(wgmma_n192_bf16_kk, 96, "m64n192k16.f32.bf16.bf16", "1, 1, 0, 0");
wgmma_product!(wgmma_n192_bf16_km, 96, "m64n192k16.f32.bf16.bf16", "1, 1, 0, 1");
wgmma_product!(wgmma_n192_bf16_mk, 96, "m64n192k16.f32.bf16.bf16", "1, 1, 1, 0");
wgmma_product!(wgmma_n192_bf16_mm, 96, "m64n192k16.f32.bf16.bf16", "1, 1, 1, 1");
wgmma_product!(wgmma_n192_tf32_kk, 96, "m64n192k8.f32.tf32.tf32", "1, 1");

wgmma_product!(wgmma_n64_f16_kk, 32, "m64n64k16.f32.f16.f16", "1, 1, 0, 0");
wgmma_product!(wgmma_n64_f16_km, 32, "m64n64k16.f32.f16.f16", "1, 1, 0, 1");
wgmma_product!(wgmma_n64_f16_mk, 32, "m64n64k16.f32.f16.f16", "1, 1, 1, 0");
wgmma_product!(wgmma_n64_f16_mm, 32, "m64n64k16.f32.f16.f16", "1, 1, 1, 1");
wgmma_product!(wgmma_n64_bf16_kk, 32, "m64n64k16.f32.bf16.bf16", "1, 1, 0, 0");
wgmma_product!(wgmma_n64_bf16_km, 32, "m64n64k16.f32.bf16.bf16", "1, 1, 0, 1");
wgmma_product!(wgmma_n64_bf16_mk, 32, "m64n64k16.f32.bf16.bf16", "1, 1, 1, 0");
wgmma_product!(wgmma_n64_bf16_mm, 32, "m64n64k16.f32.bf16.bf16", "1, 1, 1, 1");
wgmma_product!(wgmma_n64_tf32_kk, 32, "m64n64k8.f32.tf32.tf32", "1, 1");

/// `acc += A · B` for one warpgroup over k = 8 in TF32 on the `$count` accumulators from 0: A
/// 64×8 from registers, `a` this thread's fragment of its warp's 16 rows (lane = 4g + t: (g, t),
/// (g + 8, t), (g, t + 4), (g + 8, t + 4), f32 bits whose low 13 mantissa bits the tensor cores
/// ignore); B 8×N K-major from shared memory through the descriptor `b`. `wgmma` reads TF32 from
/// shared memory K-major only, so an M-major A comes this way.
macro_rules! wgmma_tf32_rs_product {
    ($name:ident, $count:tt, $shape:literal) => {
        /// See [`wgmma_tf32_rs_product!`]'s documentation.
        ///
        /// # Safety
        /// As the shared-memory products: `b` describes written shared memory made visible to
        /// the async proxy, every thread of the warpgroup calls it after [`wgmma_fence`]; the
        /// registers of `a` are read asynchronously and must not be written until
        /// [`wgmma_wait`] says the product completed.
        #[inline(always)]
        pub unsafe fn $name(acc: &mut WgmmaAcc, a: [u32; 4], b: u64) {
            with_accumulator_indices!(
                $count,
                asm_on_accumulators!(
                    acc,
                    0,
                    [a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3], b = in(reg64) b,],
                    concat!("wgmma.mma_async.sync.aligned.", $shape, " "),
                    ", {{{a0}, {a1}, {a2}, {a3}}}, {b}, 1, 1, 1;",
                )
            );
        }
    };
}

wgmma_tf32_rs_product!(wgmma_n192_tf32_rs, 96, "m64n192k8.f32.tf32.tf32");
wgmma_tf32_rs_product!(wgmma_n64_tf32_rs, 32, "m64n64k8.f32.tf32.tf32");

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
    /// Two consecutive elements, widened, in one load.
    ///
    /// # Safety
    /// `p` is global memory aligned to two elements that nothing writes during the kernel.
    unsafe fn load_pair(p: *const Self::Elem) -> [f32; 2];
    /// # Safety
    /// `p` is aligned writable global memory.
    unsafe fn store_elem(p: *mut Self::Elem, v: Self::Elem);
    /// Two consecutive elements in one store.
    ///
    /// # Safety
    /// `p` is writable global memory aligned to two elements.
    unsafe fn store_elem_pair(p: *mut Self::Elem, v0: Self::Elem, v1: Self::Elem);
    /// Two consecutive elements at shared address `addr`, widened, in one load (the
    /// counterpart of [`WgmmaInput::store_shared_pair`]).
    ///
    /// # Safety
    /// `addr` is a shared address in this block's allocation aligned to two elements, written
    /// before a barrier this thread has passed.
    unsafe fn load_shared_pair(addr: u32) -> [f32; 2];
    /// `v0` and `v1`, each rounded to the element type (16-bit: one paired conversion), as two
    /// consecutive elements into shared memory at `addr`, in one store.
    ///
    /// # Safety
    /// `addr` is a shared address in this block's allocation aligned to two elements.
    unsafe fn store_shared_pair(addr: u32, v0: f32, v1: f32);
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
    /// As [`WgmmaInput::wgmma_k32_bytes`] with B k×128 (`m64n128`), on half `HALF` of `acc`
    /// (its 64 floats laid out as [`WgmmaAcc`]'s first 16 column blocks).
    ///
    /// # Safety
    /// As [`WgmmaInput::wgmma_k32_bytes`].
    unsafe fn wgmma_n128_k32_bytes<const HALF: usize>(
        acc: &mut WgmmaAcc,
        a: u64,
        b: u64,
        a_mn_major: bool,
        b_mn_major: bool,
    );
    /// As [`WgmmaInput::wgmma_k32_bytes`] with B k×192 (`m64n192`), on the first 96 floats of
    /// `acc` (laid out as [`WgmmaAcc`]'s first 24 column blocks).
    ///
    /// # Safety
    /// As [`WgmmaInput::wgmma_k32_bytes`].
    unsafe fn wgmma_n192_k32_bytes(acc: &mut WgmmaAcc, a: u64, b: u64, a_mn_major: bool, b_mn_major: bool);
    /// As [`WgmmaInput::wgmma_k32_bytes`] with B k×64 (`m64n64`), on the first 32 floats of
    /// `acc` (laid out as [`WgmmaAcc`]'s first 8 column blocks).
    ///
    /// # Safety
    /// As [`WgmmaInput::wgmma_k32_bytes`].
    unsafe fn wgmma_n64_k32_bytes(acc: &mut WgmmaAcc, a: u64, b: u64, a_mn_major: bool, b_mn_major: bool);
}

/// The product among `[kk, km, mk, mm]` (A K- or M-major, then B K- or N-major) for the
/// operands' layouts `(a_mn_major, b_mn_major)`, called with `$args` (constants at every call
/// site, so the match folds to one instruction).
macro_rules! by_major {
    ($majors:expr, [$kk:ident, $km:ident, $mk:ident, $mm:ident]::<$half:tt>($($args:tt)*)) => {
        match $majors {
            (false, false) => $kk::<$half>($($args)*),
            (false, true) => $km::<$half>($($args)*),
            (true, false) => $mk::<$half>($($args)*),
            (true, true) => $mm::<$half>($($args)*),
        }
    };
}

macro_rules! wgmma_16bit {
    ($ty:ty, [$kk:ident, $km:ident, $mk:ident, $mm:ident], [$kk2:ident, $km2:ident, $mk2:ident, $mm2:ident],
     [$kk3:ident, $km3:ident, $mk3:ident, $mm3:ident], [$kk4:ident, $km4:ident, $mk4:ident, $mm4:ident]) => {
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
            unsafe fn load_pair(p: *const u16) -> [f32; 2] {
                let bits = super::load_nc_u32(p.cast());
                [Self::widen(bits as u16), Self::widen((bits >> 16) as u16)]
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
            unsafe fn load_shared_pair(addr: u32) -> [f32; 2] {
                let (lo, hi) = <$ty as super::HalfFloat>::unpack2(load_shared_u32(addr));
                [lo, hi]
            }
            #[inline(always)]
            unsafe fn store_shared_pair(addr: u32, v0: f32, v1: f32) {
                store_shared_u32(addr, <$ty as super::HalfFloat>::pack2(v0, v1))
            }
            #[inline(always)]
            unsafe fn wgmma_k32_bytes(
                acc: &mut WgmmaAcc,
                a: u64,
                b: u64,
                a_mn_major: bool,
                b_mn_major: bool,
            ) {
                by_major!((a_mn_major, b_mn_major), [$kk, $km, $mk, $mm]::<0>(acc, a, b))
            }
            #[inline(always)]
            unsafe fn wgmma_n128_k32_bytes<const HALF: usize>(
                acc: &mut WgmmaAcc,
                a: u64,
                b: u64,
                a_mn_major: bool,
                b_mn_major: bool,
            ) {
                by_major!((a_mn_major, b_mn_major), [$kk2, $km2, $mk2, $mm2]::<HALF>(acc, a, b))
            }
            #[inline(always)]
            unsafe fn wgmma_n192_k32_bytes(
                acc: &mut WgmmaAcc,
                a: u64,
                b: u64,
                a_mn_major: bool,
                b_mn_major: bool,
            ) {
                by_major!((a_mn_major, b_mn_major), [$kk3, $km3, $mk3, $mm3]::<0>(acc, a, b))
            }
            #[inline(always)]
            unsafe fn wgmma_n64_k32_bytes(
                acc: &mut WgmmaAcc,
                a: u64,
                b: u64,
                a_mn_major: bool,
                b_mn_major: bool,
            ) {
                by_major!((a_mn_major, b_mn_major), [$kk4, $km4, $mk4, $mm4]::<0>(acc, a, b))
            }
        }
    };
}

wgmma_16bit!(
    super::F16,
    [wgmma_f16_kk, wgmma_f16_km, wgmma_f16_mk, wgmma_f16_mm],
    [wgmma_n128_f16_kk, wgmma_n128_f16_km, wgmma_n128_f16_mk, wgmma_n128_f16_mm],
    [wgmma_n192_f16_kk, wgmma_n192_f16_km, wgmma_n192_f16_mk, wgmma_n192_f16_mm],
    [wgmma_n64_f16_kk, wgmma_n64_f16_km, wgmma_n64_f16_mk, wgmma_n64_f16_mm]
);
wgmma_16bit!(
    super::BF16,
    [wgmma_bf16_kk, wgmma_bf16_km, wgmma_bf16_mk, wgmma_bf16_mm],
    [wgmma_n128_bf16_kk, wgmma_n128_bf16_km, wgmma_n128_bf16_mk, wgmma_n128_bf16_mm],
    [wgmma_n192_bf16_kk, wgmma_n192_bf16_km, wgmma_n192_bf16_mk, wgmma_n192_bf16_mm],
    [wgmma_n64_bf16_kk, wgmma_n64_bf16_km, wgmma_n64_bf16_mk, wgmma_n64_bf16_mm]
);

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
    unsafe fn load_pair(p: *const f32) -> [f32; 2] {
        super::load_nc_f32x2(p)
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
    unsafe fn load_shared_pair(addr: u32) -> [f32; 2] {
        let (x, y): (f32, f32);
        asm!("ld.shared.v2.b32 {{{x}, {y}}}, [{a}];", a = in(reg32) addr, x = out(reg32) x, y = out(reg32) y,
             options(nostack, readonly));
        [x, y]
    }
    #[inline(always)]
    unsafe fn store_shared_pair(addr: u32, v0: f32, v1: f32) {
        asm!("st.shared.v2.b32 [{a}], {{{x}, {y}}};", a = in(reg32) addr, x = in(reg32) v0, y = in(reg32) v1, options(nostack));
    }
    #[inline(always)]
    unsafe fn wgmma_k32_bytes(acc: &mut WgmmaAcc, a: u64, b: u64, _: bool, _: bool) {
        wgmma_tf32_kk::<0>(acc, a, b)
    }
    #[inline(always)]
    unsafe fn wgmma_n128_k32_bytes<const HALF: usize>(acc: &mut WgmmaAcc, a: u64, b: u64, _: bool, _: bool) {
        wgmma_n128_tf32_kk::<HALF>(acc, a, b)
    }
    #[inline(always)]
    unsafe fn wgmma_n192_k32_bytes(acc: &mut WgmmaAcc, a: u64, b: u64, _: bool, _: bool) {
        wgmma_n192_tf32_kk::<0>(acc, a, b)
    }
    #[inline(always)]
    unsafe fn wgmma_n64_k32_bytes(acc: &mut WgmmaAcc, a: u64, b: u64, _: bool, _: bool) {
        wgmma_n64_tf32_kk::<0>(acc, a, b)
    }
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
