//! Tensor-core TF32 GEMM (`mma.sync.m16n8k8`, f32 accumulate): the same contract as the SIMT
//! kernel (`out = act(alpha · op(A) · op(B) + beta · C + bias)`, batched), for f32 tensors when the
//! caller allows TF32.
//!
//! Floor: 2·M·N·K flops on the tensor cores; `mma.sync` reaches roughly half of the H100's
//! ~495 TFLOP/s dense TF32 (the full rate needs `wgmma`), so 4096³ needs ≥ ~0.55 ms; the operand
//! traffic through shared memory, not DRAM, is what limits a block.
//!
//! A 256-thread block computes a 128×128 tile of C; each of its 8 warps a 64×32 piece, as 4×4
//! MMA tiles of 16×8. K advances in steps of 32 through three shared-memory stages filled by
//! `cp.async` (16-byte copies with zero fill at the edges; 4-byte copies when rows are not
//! 16-byte multiples). An operand whose k is contiguous in memory is kept `[rows][32 + 4]`, one
//! whose rows are contiguous `[32][rows + 8]`: both paddings make the fragment reads hit 32
//! banks. The fragments go to the MMA as raw f32 bits: the tensor cores read the top 19 (the
//! low 13 mantissa bits ignored, TF32 by truncation, as `wgmma` and cuBLAS do); rounding each
//! fragment first took a conversion per element, a third of a k-step's instructions.
//! Launch: block `MMA_THREADS`, grid `(⌈N/128⌉, ⌈M/128⌉, batch)`, dynamic shared memory
//! `MMA_SHARED_BYTES`.
use super::{mma_epilogue, mma_mainloop, warp_origin, WarpAcc, WARP_M as WM, WARP_N as WN};
use crate::prelude::*;
use crate::shapes::{MMA_BK as BK, MMA_OPERAND_FLOATS, MMA_THREADS as THREADS, MMA_TILE};

const BM: usize = MMA_TILE.0;
const BN: usize = MMA_TILE.1;
/// Chunks of 16 bytes one thread copies per operand per stage.
const CHUNKS: usize = BM * BK / 4 / THREADS;

// The unroll! lists below name these counts.
const _: () = assert!(WM / 16 == 4 && WN / 8 == 4 && BK / 8 == 4 && CHUNKS == 4);

/// One operand's tile in shared memory: `k_contiguous` (A not transposed, B transposed) keeps
/// `[rows][BK + 4]`, else `[BK][rows + 8]`.
#[derive(Clone, Copy)]
pub(crate) struct Operand {
    pub(crate) src: *const f32,
    /// Elements between consecutive rows of the source (`[rows][k]` or `[k][rows]`).
    pub(crate) ld: usize,
    pub(crate) rows: usize,
    pub(crate) k: usize,
    pub(crate) k_contiguous: bool,
    pub(crate) vector_ok: bool,
}

impl Operand {
    #[inline(always)]
    pub(crate) fn offset(&self, row: usize, kk: usize) -> usize {
        if self.k_contiguous {
            row * (BK + 4) + kk
        } else {
            kk * (BM + 8) + row
        }
    }

    /// Issue this thread's copies of the tile `rows r0.., k k0..` into `tile` (a shared address).
    #[inline(always)]
    pub(crate) unsafe fn load(&self, tile: u32, r0: usize, k0: usize, t: usize) {
        unroll!(i in [0, 1, 2, 3] => {
            let c = t + i * THREADS;
            // (row, k) of the chunk's first element, and how many of its 4 elements exist.
            let (row, kk, valid) = if self.k_contiguous {
                let (row, kk) = (c / (BK / 4), c % (BK / 4) * 4);
                let valid = if r0 + row < self.rows { self.k.saturating_sub(k0 + kk).min(4) } else { 0 };
                (row, kk, valid)
            } else {
                let (kk, row) = (c / (BM / 4), c % (BM / 4) * 4);
                let valid = if k0 + kk < self.k { self.rows.saturating_sub(r0 + row).min(4) } else { 0 };
                (row, kk, valid)
            };
            let src_offset = if self.k_contiguous { (r0 + row) * self.ld + k0 + kk } else { (k0 + kk) * self.ld + r0 + row };
            let dst = tile + 4 * self.offset(row, kk) as u32;
            if self.vector_ok {
                let src = if valid > 0 { self.src.add(src_offset) } else { self.src };
                cp_async_16(dst, src, 4 * valid as u32);
            } else {
                unroll!(j in [0, 1, 2, 3] => {
                    let ok = j < valid;
                    let src = if ok { self.src.add(src_offset + j) } else { self.src };
                    cp_async_4(dst + 4 * j as u32, src, if ok { 4 } else { 0 });
                });
            }
        });
    }
}

/// One k-step of a warp's MMAs: its 64×32 piece of the tile from the operand tiles `sa` and `sb`
/// (shared memory, laid out as `op_a` and `op_b` say) into `acc`.
///
/// # Safety
/// `sa` and `sb` point at one stage's full operand tiles.
#[inline(always)]
pub(crate) unsafe fn mma_k_step(
    op_a: &Operand,
    op_b: &Operand,
    sa: *const f32,
    sb: *const f32,
    acc: &mut WarpAcc,
) {
    let (wm0, wn0) = warp_origin();
    let (g, q) = (lane() / 4, lane() % 4);
    unroll!(ks in [0, 1, 2, 3] => {
        let kk = ks * 8 + q;
        let mut fa = [[0u32; 4]; 4];
        let mut fb = [[0u32; 2]; 4];
        // The offsets stay inside the stage's tiles (rows < 128, k < 32).
        unroll!(mi in [0, 1, 2, 3] => {
            let r = wm0 + mi * 16 + g;
            fa[mi] = [
                f32::to_bits(*sa.add(op_a.offset(r, kk))),
                f32::to_bits(*sa.add(op_a.offset(r + 8, kk))),
                f32::to_bits(*sa.add(op_a.offset(r, kk + 4))),
                f32::to_bits(*sa.add(op_a.offset(r + 8, kk + 4))),
            ];
        });
        unroll!(ni in [0, 1, 2, 3] => {
            let col = wn0 + ni * 8 + g;
            fb[ni] = [
                f32::to_bits(*sb.add(op_b.offset(col, kk))),
                f32::to_bits(*sb.add(op_b.offset(col, kk + 4))),
            ];
        });
        unroll!(mi in [0, 1, 2, 3] => {
            unroll!(ni in [0, 1, 2, 3] => {
                mma_tf32_16x8x8(&mut acc[mi][ni], fa[mi], fb[ni]);
            });
        });
    });
}

#[inline(always)]
unsafe fn gemm<const TA: bool, const TB: bool>(
    a: *const f32,
    b: *const f32,
    c: *const f32,
    bias: *const f32,
    out: *mut f32,
    (m, n, k): (usize, usize, usize),
    (stride_a, stride_b, stride_c): (usize, usize, usize),
    (alpha, beta, activation): (f32, f32, u32),
) {
    let t = thread_x();
    let (m0, n0, batch) = (block_y() * BM, block_x() * BN, block_z());
    let (lda, ldb) = (if TA { m } else { k }, if TB { k } else { n });
    let op_a = Operand {
        src: a.add(batch * stride_a),
        ld: lda,
        rows: m,
        k,
        k_contiguous: !TA,
        vector_ok: lda % 4 == 0 && stride_a % 4 == 0,
    };
    let op_b = Operand {
        src: b.add(batch * stride_b),
        ld: ldb,
        rows: n,
        k,
        k_contiguous: TB,
        vector_ok: ldb % 4 == 0 && stride_b % 4 == 0,
    };
    let smem = dynamic_shared::<f32>();
    let stage_a = |s: usize| smem.add(s * 2 * MMA_OPERAND_FLOATS);
    let stage_b = |s: usize| smem.add((s * 2 + 1) * MMA_OPERAND_FLOATS);

    let (wm0, wn0) = warp_origin();
    let load = |s: usize, step: usize| {
        // SAFETY: stage `s` of the dynamic shared memory holds both operand tiles.
        unsafe {
            op_a.load(shared_addr(stage_a(s)), m0, step * BK, t);
            op_b.load(shared_addr(stage_b(s)), n0, step * BK, t);
        }
    };
    // A warp whose piece lies wholly outside C only loads (`warp_origin`).
    let inside = m0 + wm0 < m && n0 + wn0 < n;
    let compute = |s: usize, acc: &mut WarpAcc| {
        if inside {
            // SAFETY: stage `s` of the dynamic shared memory holds both operand tiles.
            unsafe { mma_k_step(&op_a, &op_b, stage_a(s), stage_b(s), acc) }
        }
    };
    let acc = mma_mainloop(k.div_ceil(BK), load, compute);

    let (out, c) = (out.add(batch * m * n), c.add(batch * stride_c));
    let has_c = !c.is_null() && beta != 0.0;
    mma_epilogue(
        &acc,
        (m0 + wm0, n0 + wn0),
        (m, n),
        (alpha, activation),
        // SAFETY (the three closures): `idx` < m·n and `col` < n, checked by the caller.
        |idx| if has_c { beta * unsafe { load_nc_f32(c.add(idx)) } } else { 0.0 },
        |col| if bias.is_null() { 0.0 } else { unsafe { load_nc_f32(bias.add(col)) } },
        |idx, v| unsafe { store_f32(out.add(idx), v) },
    );
}

macro_rules! tf32_kernels {
    ($($name:ident: $ta:literal, $tb:literal;)*) => {$(
        /// Tensor-core TF32 GEMM; arguments as the SIMT `gemm_f32_*` kernels.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            a: *const f32, b: *const f32, c: *const f32, bias: *const f32, out: *mut f32,
            m: usize, n: usize, k: usize, stride_a: usize, stride_b: usize, stride_c: usize,
            alpha: f32, beta: f32, activation: u32,
        ) {
            gemm::<$ta, $tb>(a, b, c, bias, out, (m, n, k), (stride_a, stride_b, stride_c), (alpha, beta, activation))
        }
    )*};
}

#[cfg(feature = "matmul")]
tf32_kernels! {
    gemm_tf32_nn: false, false;
    gemm_tf32_nt: false, true;
    gemm_tf32_tn: true, false;
    gemm_tf32_tt: true, true;
}
