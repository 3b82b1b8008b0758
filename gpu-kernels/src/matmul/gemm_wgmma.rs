//! Hopper tensor-core GEMM on f16, bf16 (`wgmma.m64n256k16`) and TF32 (`wgmma.m64n256k8`), f32
//! accumulate, one rounding to the output dtype, fed by TMA: the mma.sync kernels' contract (`c`
//! and `bias` in the input dtype, alpha/beta/bias/activation fused), in the sm_90a module only.
//! TF32 takes K-major operands only (`_nt`); the host transposes others first.
//!
//! Floor: 2·M·N·K flops at the H100's ~990 TFLOP/s dense 16-bit rate (8192³: ≥ 1.11 ms; cuBLAS
//! reaches ~780 TFLOP/s) or ~495 TF32 (≥ 2.2 ms; cuBLAS ~390).
//!
//! A block computes a 128×256 tile of C with three warpgroups. Warpgroup 0 gives most of its
//! registers away (`setmaxnreg`) and one of its threads issues the TMA copies: per k-step of 128
//! bytes (64 16-bit or 32 f32 elements), A's 128-row and B's 256-row pieces into one of
//! `WGMMA_STAGES` shared stages, 128-byte swizzled, zero-filled outside the matrices (so any M,
//! N, K works), completion counted on the stage's `full` mbarrier. Warpgroups 1 and 2 wait on
//! it, run four `wgmma` (32 bytes of k each) on their 64 rows, keep one k-step of `wgmma` in
//! flight and release the stage before it on its `empty` mbarrier. K-major operands arrive as
//! one box of 128 bytes of k × rows (8-row swizzle atoms 1024 bytes apart); M/N-major ones (16-bit
//! only) as boxes of 64 rows × 64 k (atoms of 8 k-rows 1024 bytes apart, 64-row boxes 8 KiB
//! apart), which `wgmma` reads transposed. The epilogue works from registers. Blocks walk the
//! tiles in groups of `WGMMA_GROUP_M` rows of tiles, so that the blocks resident together share
//! A and B panels in L2.
//!
//! Split-K (thin or few output tiles): block z = batch·slices + slice runs its slice's k-steps
//! and stores raw f32 sums into a workspace, which `gemm_reduce_*` adds in order.
//!
//! Launch: block `WGMMA_THREADS` (PTX `.maxntid` set by build.rs), grid
//! `(⌈M/128⌉·⌈N/256⌉, 1, batch · slices)`, dynamic shared memory `WGMMA_SHARED_BYTES`; `maps` points to
//! two `CUtensorMap`s in global memory (A's, then B's; 3-D: contiguous dimension, rows, batch;
//! boxes as above, 128-byte swizzle), copied in by the host on the launch's stream and left
//! untouched until the kernel ends.
//!
//! The maps live in global memory, not in kernel parameters (`__grid_constant__`, which would save
//! the upload): a by-value 128-byte parameter needs `.align 64`, which rustc's `ptx-kernel` ABI
//! cannot express (it stops at 16-byte alignment, an internal compiler error above), and the
//! kernel would have to take the parameter's own address, which LLVM gives only after copying it
//! to local memory (a `.local` copy is no tensor map). So the producer thread issues the
//! tensor-map acquire fence on both maps before its first TMA copy: the pool gives a freed map
//! block to the next launch on the stream, whose maps then sit at the same address with new
//! contents, and without the fence the tensor-map proxy may still hold the earlier descriptor.
use super::epilogue;
use crate::prelude::*;
use crate::shapes::{
    WGMMA_GROUP_M as GROUP_M, WGMMA_MN_BOX as MN_BOX, WGMMA_ROW_BYTES, WGMMA_STAGES as STAGES,
    WGMMA_STAGE_BYTES as STAGE_BYTES, WGMMA_THREADS, WGMMA_TILE,
};

const BM: usize = WGMMA_TILE.0;
const BN: usize = WGMMA_TILE.1;
/// One row of a k-step: the 128-byte swizzle width.
const ROW_BYTES: u32 = WGMMA_ROW_BYTES as u32;
/// Bytes of the A tile at the start of a stage (the B tile follows).
const A_BYTES: u32 = BM as u32 * ROW_BYTES;
/// Bytes of one M/N-major TMA box (64 rows × 128 bytes of k).
const MN_BOX_BYTES: u32 = MN_BOX as u32 * ROW_BYTES;
/// A 128-byte swizzle atom: 8 rows of 128 bytes.
const ATOM_BYTES: u32 = 8 * ROW_BYTES;
/// The computing warpgroups; one thread of each arrives on a stage's `empty` barrier (a
/// warpgroup's `wgmma` complete together, and 256 arrivals per stage cost shared-memory atomics).
const CONSUMERS: usize = (WGMMA_THREADS - 128) / 128;
const PRODUCER_REGS: u32 = 40;
const CONSUMER_REGS: u32 = 232;

const _: () = assert!(ROW_BYTES == 128 && BM == 2 * 64 && BN == 256 && BM % MN_BOX == 0 && BN % MN_BOX == 0);
const _: () = assert!(STAGE_BYTES == (BM + BN) * WGMMA_ROW_BYTES && CONSUMERS == 2);

/// The block's output tile `(m0, n0)`: tiles numbered down groups of `GROUP_M` tile rows, then
/// across, so that the blocks resident together share A and B panels.
#[inline(always)]
fn tile_origin(m: usize, n: usize) -> (usize, usize) {
    let (tiles_m, tiles_n) = (m.div_ceil(BM), n.div_ceil(BN));
    let id = block_x();
    let per_group = GROUP_M * tiles_n;
    let first_m = id / per_group * GROUP_M;
    let rows = (tiles_m - first_m).min(GROUP_M);
    let in_group = id % per_group;
    ((first_m + in_group % rows) * BM, in_group / rows * BN)
}

#[inline(always)]
unsafe fn gemm<E: WgmmaInput, const TA: bool, const TB: bool>(
    maps: *const u8,
    (c, bias, out): (*const E::Elem, *const E::Elem, *mut E::Elem),
    (m, n, k): (usize, usize, usize),
    stride_c: usize,
    (alpha, beta, activation): (f32, f32, u32),
    (batched_a, batched_b): (u32, u32),
    (k_steps, ws): (usize, *mut f32),
) {
    let t = thread_x();
    let (m0, n0) = tile_origin(m, n);
    // Elements of k per stage (one 128-byte row).
    let bk = WGMMA_ROW_BYTES / core::mem::size_of::<E::Elem>();
    // Split-K: block z is (batch, slice); slice s runs k-steps [s·k_steps, (s+1)·k_steps).
    let all_steps = k.div_ceil(bk);
    let slices = all_steps.div_ceil(k_steps.max(1)).max(1);
    let (z, batch) = (block_z(), block_z() / slices);
    let first_step = z % slices * k_steps;
    let steps = k_steps.min(all_steps.saturating_sub(first_step));
    let base = (shared_addr(dynamic_shared::<u8>()) + ATOM_BYTES - 1) & !(ATOM_BYTES - 1);
    let stage = |s: usize| base + (s * STAGE_BYTES) as u32;
    let barriers = base + (STAGES * STAGE_BYTES) as u32;
    let full = |s: usize| barriers + 8 * s as u32;
    let empty = |s: usize| barriers + 8 * (STAGES + s) as u32;
    if t == 0 {
        for s in 0..STAGES {
            mbarrier_init(full(s), 1);
            mbarrier_init(empty(s), CONSUMERS as u32);
        }
        fence_mbarrier_init();
    }
    sync_threads();

    if t < 128 {
        setmaxnreg_dec::<PRODUCER_REGS>();
        if t == 0 {
            let (za, zb) = ((batch as u32 * batched_a) as i32, (batch as u32 * batched_b) as i32);
            let (map_a, map_b) = (maps, maps.add(128));
            // The host copied the maps in before the launch, often to the address an earlier
            // launch's maps had (the pool hands the block out again): see the module docs.
            tensormap_acquire(map_a);
            tensormap_acquire(map_b);
            for step in 0..steps {
                let s = step % STAGES;
                if step >= STAGES {
                    // The consumers are done with what this stage held STAGES steps ago.
                    mbarrier_wait(empty(s), ((step / STAGES - 1) & 1) as u32);
                }
                mbarrier_arrive_expect_tx(full(s), STAGE_BYTES as u32);
                let (a_dst, b_dst, k0) = (stage(s), stage(s) + A_BYTES, ((first_step + step) * bk) as i32);
                if TA {
                    for j in 0..BM / MN_BOX {
                        let at = ((m0 + j * MN_BOX) as i32, k0, za);
                        tma_load_3d(a_dst + j as u32 * MN_BOX_BYTES, map_a, full(s), at);
                    }
                } else {
                    tma_load_3d(a_dst, map_a, full(s), (k0, m0 as i32, za));
                }
                if TB {
                    tma_load_3d(b_dst, map_b, full(s), (k0, n0 as i32, zb));
                } else {
                    for j in 0..BN / MN_BOX {
                        let at = ((n0 + j * MN_BOX) as i32, k0, zb);
                        tma_load_3d(b_dst + j as u32 * MN_BOX_BYTES, map_b, full(s), at);
                    }
                }
            }
        }
        return;
    }

    setmaxnreg_inc::<CONSUMER_REGS>();
    let wg = (t / 128 - 1) as u32;
    let mut acc: WgmmaAcc = [0.0; 128];
    for step in 0..steps {
        let s = step % STAGES;
        mbarrier_wait(full(s), ((step / STAGES) & 1) as u32);
        let (a_s, b_s) = (stage(s), stage(s) + A_BYTES);
        wgmma_fence(&mut acc);
        unroll!(kk in [0, 1, 2, 3] => {
            let kk = kk as u32;
            // k-steps of 32 bytes: along a K-major row (the descriptor's swizzle
            // follows the absolute address), 16 rows = 2 atoms down an M/N-major box.
            let a = if TA {
                sw128_descriptor(a_s + wg * MN_BOX_BYTES + kk * 2 * ATOM_BYTES, MN_BOX_BYTES, ATOM_BYTES)
            } else {
                sw128_descriptor(a_s + wg * 64 * ROW_BYTES + kk * 32, 16, ATOM_BYTES)
            };
            let b = if TB {
                sw128_descriptor(b_s + kk * 32, 16, ATOM_BYTES)
            } else {
                sw128_descriptor(b_s + kk * 2 * ATOM_BYTES, MN_BOX_BYTES, ATOM_BYTES)
            };
            E::wgmma_k32_bytes(&mut acc, a, b, TA, !TB);
        });
        wgmma_commit();
        // The previous k-step's wgmma have finished: its stage may be refilled.
        wgmma_wait::<1>(&mut acc);
        if step > 0 && t % 128 == 0 {
            mbarrier_arrive(empty((step - 1) % STAGES));
        }
    }
    wgmma_wait::<0>(&mut acc);

    let tw = t % 128;
    let (g, q) = (tw % 32 / 4, tw % 4);
    let row0 = m0 + wg as usize * 64 + tw / 32 * 16 + g;
    if !ws.is_null() {
        // One slice of a split-K product: the raw sums, reduced and finished by `gemm_reduce_*`.
        let part = ws.add(z * m * n);
        unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                      16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] => {
            let col = n0 + 8 * i + 2 * q;
            unroll!(h in [0, 1] => {
                let row = row0 + 8 * h;
                unroll!(e in [0, 1] => {
                    if row < m && col + e < n {
                        store_f32(part.add(row * n + col + e), acc[4 * i + 2 * h + e]);
                    }
                });
            });
        });
        return;
    }
    let has_c = !c.is_null() && beta != 0.0;
    let (out, c) = (out.add(batch * m * n), if has_c { c.add(batch * stride_c) } else { c });
    let pairs = n % 2 == 0;
    let value = |row: usize, col: usize, a: f32| {
        let idx = row * n + col;
        // SAFETY: row < m and col < n, checked by the callers; `c` and `bias` hold m·n and n.
        let beta_c = if has_c { beta * E::widen(unsafe { E::load_elem(c.add(idx)) }) } else { 0.0 };
        let b = if bias.is_null() { 0.0 } else { E::widen(unsafe { E::load_elem(bias.add(col)) }) };
        epilogue(a, alpha, beta_c, b, activation)
    };
    unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                  16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] => {
        let col = n0 + 8 * i + 2 * q;
        unroll!(h in [0, 1] => {
            let row = row0 + 8 * h;
            let (a0, a1) = (acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]);
            if row < m && col < n {
                let idx = row * n + col;
                let v0 = E::narrow(value(row, col, a0));
                if pairs && col + 1 < n {
                    let v1 = E::narrow(value(row, col + 1, a1));
                    E::store_elem_pair(out.add(idx), v0, v1);
                } else {
                    E::store_elem(out.add(idx), v0);
                    if col + 1 < n {
                        E::store_elem(out.add(idx + 1), E::narrow(value(row, col + 1, a1)));
                    }
                }
            }
        });
    });
}

macro_rules! wgmma_kernels {
    ($($name:ident: $e:ty, $elem:ty, $ta:literal, $tb:literal;)*) => {$(
        /// Hopper GEMM; `maps` holds A's and B's tensor maps, the other arguments are the
        /// mma.sync kernels' (no A/B pointers or strides: the maps carry them);
        /// `batched_a`/`batched_b` are 1 when the operand has a batch dimension. Split-K: with
        /// `k_steps` below ⌈K / bk⌉ (bk = 128 bytes of k), `gridDim.z` = batch × slices and each
        /// block writes its slice's raw f32 sums to `ws[z]` (`[M, N]`) instead of `out`; `ws` is
        /// null without a split.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            maps: *const u8, c: *const $elem, bias: *const $elem, out: *mut $elem,
            m: usize, n: usize, k: usize, stride_c: usize,
            alpha: f32, beta: f32, activation: u32, batched_a: u32, batched_b: u32, k_steps: usize,
            ws: *mut f32,
        ) {
            gemm::<$e, $ta, $tb>(
                maps, (c, bias, out), (m, n, k), stride_c, (alpha, beta, activation), (batched_a, batched_b),
                (k_steps, ws),
            )
        }
    )*};
}

wgmma_kernels! {
    gemm_wgmma_f16_nn: F16, u16, false, false;
    gemm_wgmma_f16_nt: F16, u16, false, true;
    gemm_wgmma_f16_tn: F16, u16, true, false;
    gemm_wgmma_f16_tt: F16, u16, true, true;
    gemm_wgmma_bf16_nn: BF16, u16, false, false;
    gemm_wgmma_bf16_nt: BF16, u16, false, true;
    gemm_wgmma_bf16_tn: BF16, u16, true, false;
    gemm_wgmma_bf16_tt: BF16, u16, true, true;
    gemm_wgmma_tf32_nt: Tf32, f32, false, true;
}
