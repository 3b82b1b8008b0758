//! Tensor-core GEMM on f16 and bf16 (`mma.sync.m16n8k16`, f32 accumulate, one rounding to the
//! output dtype): the SIMT kernel's contract for 16-bit tensors (`c` and `bias` in the same
//! dtype).
//!
//! Floor: 2·M·N·K flops; `mma.sync` reaches about half of the H100's ~990 TFLOP/s dense 16-bit
//! rate (the full rate needs `wgmma`), so 4096³ needs ≥ ~0.28 ms.
//!
//! Same structure as the TF32 kernel: a 128×128 tile per 256-thread block, 8 warps of 64×32,
//! k-steps of 32 through three `cp.async` stages (16-byte copies of 8 elements, zero fill at the
//! edges; 2-byte copies when rows are not 16-byte multiples). k-contiguous operands live as
//! `[rows][32 + 8]` and give their k-pairs as one 32-bit read; row-contiguous ones as
//! `[32][rows + 8]`, read as two halves. Split-K (few tiles, long K): block z = batch·slices +
//! slice runs its slice and writes raw f32 sums to a workspace that `gemm_reduce_*` adds in order.
//! Launch: block `MMA_THREADS`, grid `(⌈N/128⌉, ⌈M/128⌉, batch · slices)`, dynamic shared memory
//! `MMA16_SHARED_BYTES`.
use super::{mma_epilogue, mma_mainloop, warp_origin, WarpAcc, WARP_M as WM, WARP_N as WN};
use crate::prelude::*;
use crate::shapes::{ACTIVATION_NONE, MMA16_OPERAND_HALVES, MMA_BK as BK, MMA_THREADS as THREADS, MMA_TILE};

const BM: usize = MMA_TILE.0;
/// 16-byte chunks (8 elements) one thread copies per operand per stage.
const CHUNKS: usize = BM * BK / 8 / THREADS;

const _: () = assert!(WM / 16 == 4 && WN / 8 == 4 && BK / 16 == 2 && CHUNKS == 2);

/// Copy 2 bytes (or zero-fill them): there is no 2-byte `cp.async`, so this is a plain load and
/// shared store, which the barrier at the top of the next k-step orders like the copies.
#[inline(always)]
unsafe fn copy_2(dst: *mut u16, src: *const u16, valid: bool) {
    *dst = if valid { load_nc_u16(src) } else { 0 };
}

#[derive(Clone, Copy)]
struct Operand {
    src: *const u16,
    ld: usize,
    rows: usize,
    k: usize,
    k_contiguous: bool,
    vector_ok: bool,
}

impl Operand {
    #[inline(always)]
    fn offset(&self, row: usize, kk: usize) -> usize {
        if self.k_contiguous {
            row * (BK + 8) + kk
        } else {
            kk * (BM + 8) + row
        }
    }

    /// The k-pair (row, kk), (row, kk + 1) packed low-first.
    #[inline(always)]
    unsafe fn pair(&self, tile: *const u16, row: usize, kk: usize) -> u32 {
        if self.k_contiguous {
            *(tile.add(self.offset(row, kk)) as *const u32)
        } else {
            *tile.add(self.offset(row, kk)) as u32 | (*tile.add(self.offset(row, kk + 1)) as u32) << 16
        }
    }

    #[inline(always)]
    unsafe fn load(&self, tile: *mut u16, r0: usize, k0: usize, t: usize) {
        unroll!(i in [0, 1] => {
            let c = t + i * THREADS;
            let (row, kk, valid) = if self.k_contiguous {
                let (row, kk) = (c / (BK / 8), c % (BK / 8) * 8);
                let valid = if r0 + row < self.rows { self.k.saturating_sub(k0 + kk).min(8) } else { 0 };
                (row, kk, valid)
            } else {
                let (kk, row) = (c / (BM / 8), c % (BM / 8) * 8);
                let valid = if k0 + kk < self.k { self.rows.saturating_sub(r0 + row).min(8) } else { 0 };
                (row, kk, valid)
            };
            let src_offset = if self.k_contiguous { (r0 + row) * self.ld + k0 + kk } else { (k0 + kk) * self.ld + r0 + row };
            let dst = tile.add(self.offset(row, kk));
            if self.vector_ok {
                let src = if valid > 0 { self.src.add(src_offset) } else { self.src };
                cp_async_16(shared_addr(dst), src as *const f32, 2 * valid as u32);
            } else {
                for j in 0..8 {
                    copy_2(dst.add(j), self.src.add(src_offset + j), j < valid);
                }
            }
        });
    }
}

#[inline(always)]
unsafe fn gemm<H: MmaInput, const TA: bool, const TB: bool>(
    (a, b, c, bias, out): (*const u16, *const u16, *const u16, *const u16, *mut u16),
    (m, n, k): (usize, usize, usize),
    (stride_a, stride_b, stride_c): (usize, usize, usize),
    (alpha, beta, activation): (f32, f32, u32),
    (k_chunk, ws): (usize, *mut f32),
) {
    let t = thread_x();
    // Split-K: block z is (batch, slice), the slice's k from `k0` (a multiple of BK).
    let slices = k.div_ceil(k_chunk.max(1)).max(1);
    let (m0, n0, z) = (block_y() * BM, block_x() * MMA_TILE.1, block_z());
    let (batch, k0) = (z / slices, z % slices * k_chunk);
    let (lda, ldb) = (if TA { m } else { k }, if TB { k } else { n });
    let k_part = k_chunk.min(k - k0);
    let op_a = Operand {
        src: a.add(batch * stride_a + if TA { k0 * lda } else { k0 }),
        ld: lda,
        rows: m,
        k: k_part,
        k_contiguous: !TA,
        vector_ok: lda % 8 == 0 && stride_a % 8 == 0,
    };
    let op_b = Operand {
        src: b.add(batch * stride_b + if TB { k0 } else { k0 * ldb }),
        ld: ldb,
        rows: n,
        k: k_part,
        k_contiguous: TB,
        vector_ok: ldb % 8 == 0 && stride_b % 8 == 0,
    };
    let smem = dynamic_shared::<u16>();
    let stage_a = |s: usize| smem.add(s * 2 * MMA16_OPERAND_HALVES);
    let stage_b = |s: usize| smem.add((s * 2 + 1) * MMA16_OPERAND_HALVES);

    let (wm0, wn0) = warp_origin();
    let (g, q) = (lane() / 4, lane() % 4);
    let load = |s: usize, step: usize| {
        // SAFETY: stage `s` of the dynamic shared memory holds both operand tiles.
        unsafe {
            op_a.load(stage_a(s), m0, step * BK, t);
            op_b.load(stage_b(s), n0, step * BK, t);
        }
    };
    let compute = |s: usize, acc: &mut WarpAcc| {
        let (sa, sb) = (stage_a(s), stage_b(s));
        unroll!(ks in [0, 1] => {
            let kk = ks * 16 + 2 * q;
            let mut fa = [[0u32; 4]; 4];
            let mut fb = [[0u32; 2]; 4];
            // SAFETY: the offsets stay inside the stage's tiles (rows < 128, k < 32).
            unsafe {
                unroll!(mi in [0, 1, 2, 3] => {
                    let r = wm0 + mi * 16 + g;
                    fa[mi] = [op_a.pair(sa, r, kk), op_a.pair(sa, r + 8, kk), op_a.pair(sa, r, kk + 8), op_a.pair(sa, r + 8, kk + 8)];
                });
                unroll!(ni in [0, 1, 2, 3] => {
                    let col = wn0 + ni * 8 + g;
                    fb[ni] = [op_b.pair(sb, col, kk), op_b.pair(sb, col, kk + 8)];
                });
            }
            unroll!(mi in [0, 1, 2, 3] => {
                unroll!(ni in [0, 1, 2, 3] => {
                    H::mma_16x8x16(&mut acc[mi][ni], fa[mi], fb[ni]);
                });
            });
        });
    };
    let acc = mma_mainloop(k_part.div_ceil(BK), load, compute);
    if !ws.is_null() {
        // One slice of a split-K product: the raw sums, reduced and finished by `gemm_reduce_*`.
        let part = ws.add(z * m * n);
        // SAFETY: `idx` < m·n, checked by the caller; the workspace holds a slice per z.
        let store = |idx: usize, v: f32| unsafe { store_f32(part.add(idx), v) };
        mma_epilogue(&acc, (m0 + wm0, n0 + wn0), (m, n), (1.0, ACTIVATION_NONE), |_| 0.0, |_| 0.0, store);
        return;
    }

    let (out, c) = (out.add(batch * m * n), c.add(batch * stride_c));
    let has_c = !c.is_null() && beta != 0.0;
    mma_epilogue(
        &acc,
        (m0 + wm0, n0 + wn0),
        (m, n),
        (alpha, activation),
        // SAFETY (the three closures): `idx` < m·n and `col` < n, checked by the caller.
        |idx| if has_c { beta * H::to_f32(unsafe { load_nc_u16(c.add(idx)) }) } else { 0.0 },
        |col| if bias.is_null() { 0.0 } else { H::to_f32(unsafe { load_nc_u16(bias.add(col)) }) },
        |idx, v| unsafe { store_u16(out.add(idx), H::from_f32(v)) },
    );
}

macro_rules! half_kernels {
    ($($name:ident: $h:ty, $ta:literal, $tb:literal;)*) => {$(
        /// 16-bit tensor-core GEMM; arguments as the SIMT `gemm_f32_*` kernels, on 16-bit
        /// elements (`alpha`, `beta` in f32); with a split (`k_chunk < k`, a multiple of
        /// `MMA_BK`) the slices' raw f32 sums go to `ws[z·slices + s]` (`[M, N]` each) instead.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            a: *const u16, b: *const u16, c: *const u16, bias: *const u16, out: *mut u16,
            m: usize, n: usize, k: usize, k_chunk: usize, stride_a: usize, stride_b: usize,
            stride_c: usize, alpha: f32, beta: f32, activation: u32, ws: *mut f32,
        ) {
            gemm::<$h, $ta, $tb>(
                (a, b, c, bias, out), (m, n, k), (stride_a, stride_b, stride_c), (alpha, beta, activation),
                (k_chunk, ws),
            )
        }
    )*};
}

half_kernels! {
    gemm_f16_nn: F16, false, false;
    gemm_f16_nt: F16, false, true;
    gemm_f16_tn: F16, true, false;
    gemm_f16_tt: F16, true, true;
    gemm_bf16_nn: BF16, false, false;
    gemm_bf16_nt: BF16, false, true;
    gemm_bf16_tn: BF16, true, false;
    gemm_bf16_tt: BF16, true, true;
}
