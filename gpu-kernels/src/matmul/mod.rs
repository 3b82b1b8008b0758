//! Matrix multiply kernels.
pub mod gemm_f32;
#[cfg(feature = "matmul")]
pub mod gemm_half;
#[cfg(feature = "matmul")]
pub mod gemm_reduce;
pub mod gemm_tf32;
#[cfg(feature = "matmul_tiny")]
pub mod gemm_tiny;
#[cfg(feature = "matmul_sm90a")]
pub mod gemm_wgmma;
#[cfg(feature = "matmul")]
pub mod gemv;
#[cfg(feature = "matmul")]
pub mod gemv_mma;
#[cfg(feature = "matmul_sm90a")]
pub mod gemv_tma;

use crate::prelude::*;
use crate::shapes::{ACTIVATION_GELU, ACTIVATION_RELU, MMA_STAGES as STAGES, MMA_TILE};

/// The fused epilogue on one output: `alpha·acc + beta·c + bias`, then the activation.
#[inline(always)]
pub(crate) fn epilogue(acc: f32, alpha: f32, beta_c: f32, bias: f32, activation: u32) -> f32 {
    activate(alpha * acc + beta_c + bias, activation)
}

/// The epilogue's activation (`ACTIVATION_*`) on `v`.
#[inline(always)]
pub(crate) fn activate(v: f32, activation: u32) -> f32 {
    match activation {
        ACTIVATION_RELU => relu(v),
        ACTIVATION_GELU => gelu_tanh(v),
        _ => v,
    }
}

/// The few-row kernels' arguments (`gemv`, `gemv_mma`; `gemv_tma` without A's and B's pointers).
#[cfg(any(feature = "matmul", feature = "matmul_sm90a"))]
#[derive(Clone, Copy)]
struct Gemv<T> {
    a: *const T,
    b: *const T,
    c: *const T,
    bias: *const T,
    out: *mut T,
    ws: *mut f32,
    m: usize,
    n: usize,
    k: usize,
    k_chunk: usize,
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
    alpha: f32,
    beta: f32,
    activation: u32,
}

#[cfg(any(feature = "matmul", feature = "matmul_sm90a"))]
impl<T> Gemv<T> {
    /// This block's batch, slice, and its k-range.
    #[inline(always)]
    fn slice(&self) -> (usize, usize, usize, usize) {
        let (batch, slice) = (block_z(), block_y());
        let lo = slice * self.k_chunk;
        (batch, slice, lo, (lo + self.k_chunk).min(self.k))
    }

    /// Output `(row, col)` of `batch` from the sum `v` of `slice`: through the epilogue, or raw
    /// into the workspace when the launch has several slices.
    #[inline(always)]
    unsafe fn finish<E: GemmElem<Elem = T>>(
        &self,
        (batch, slice): (usize, usize),
        (row, col): (usize, usize),
        v: f32,
    ) {
        let idx = row * self.n + col;
        if self.ws.is_null() {
            let has_c = !self.c.is_null() && self.beta != 0.0;
            let beta_c =
                if has_c { self.beta * E::load(self.c.add(batch * self.stride_c + idx)) } else { 0.0 };
            let bias = if self.bias.is_null() { 0.0 } else { E::load(self.bias.add(col)) };
            E::store(
                self.out.add(batch * self.m * self.n + idx),
                epilogue(v, self.alpha, beta_c, bias, self.activation),
            );
        } else {
            store_f32(self.ws.add((batch * grid_dim_y() + slice) * self.m * self.n + idx), v);
        }
    }
}

/// f32 as a [`GemmElem`] (the 16-bit formats are the prelude's [`F16`] and [`BF16`]).
pub(crate) struct F32;

/// An element type of the few-row GEMM and the split-K reduction, read and written through f32.
pub(crate) trait GemmElem {
    type Elem: Copy;
    /// Elements in one 16-byte vector.
    const VEC: usize;
    /// The `VEC` elements at `p` (the rest of the array is zero).
    ///
    /// # Safety
    /// `p` is 16-byte aligned global memory that nothing writes during the kernel.
    unsafe fn load_vec(p: *const Self::Elem) -> [f32; 8];
    /// # Safety
    /// `p` is aligned global memory that nothing writes during the kernel.
    unsafe fn load(p: *const Self::Elem) -> f32;
    /// # Safety
    /// `p` is aligned writable global memory.
    unsafe fn store(p: *mut Self::Elem, v: f32);
    /// Four elements in one store.
    ///
    /// # Safety
    /// `p` is writable global memory aligned to four elements.
    unsafe fn store_quad(p: *mut Self::Elem, v: [f32; 4]);

    /// The first `count.min(VEC)` elements at `p`, zeros after them: one 16-byte load when all
    /// `VEC` exist and `vector` (the caller's alignment check) holds.
    ///
    /// # Safety
    /// As [`GemmElem::load`] for each element read; 16-byte aligned when `vector`.
    #[inline(always)]
    unsafe fn load_run(p: *const Self::Elem, vector: bool, count: usize) -> [f32; 8] {
        if vector && count >= Self::VEC {
            Self::load_vec(p)
        } else {
            let mut v = [0.0f32; 8];
            unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7] => {
                if j < Self::VEC && j < count {
                    v[j] = Self::load(p.add(j));
                }
            });
            v
        }
    }
}

impl GemmElem for F32 {
    type Elem = f32;
    const VEC: usize = 4;
    #[inline(always)]
    unsafe fn load_vec(p: *const f32) -> [f32; 8] {
        let [a, b, c, d] = load_nc_f32x4(p).0;
        [a, b, c, d, 0.0, 0.0, 0.0, 0.0]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> f32 {
        load_nc_f32(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: f32) {
        store_f32(p, v)
    }
    #[inline(always)]
    unsafe fn store_quad(p: *mut f32, v: [f32; 4]) {
        store_f32x4(p, F32x4(v))
    }
}

macro_rules! gemm_elem_16bit {
    ($($ty:ty),*) => {$(
        impl GemmElem for $ty {
            type Elem = u16;
            const VEC: usize = 8;
            #[inline(always)]
            unsafe fn load_vec(p: *const u16) -> [f32; 8] {
                load_nc_u16x8(p).0.map(<$ty as HalfFloat>::to_f32)
            }
            #[inline(always)]
            unsafe fn load(p: *const u16) -> f32 {
                <$ty as HalfFloat>::to_f32(load_nc_u16(p))
            }
            #[inline(always)]
            unsafe fn store(p: *mut u16, v: f32) {
                store_u16(p, <$ty as HalfFloat>::from_f32(v))
            }
            #[inline(always)]
            unsafe fn store_quad(p: *mut u16, v: [f32; 4]) {
                store_u16x4(p, v.map(<$ty as HalfFloat>::from_f32))
            }
        }
    )*};
}
gemm_elem_16bit!(F16, BF16);

/// One warp's piece of C in a tensor-core block (8 warps: 2 along M × 4 along N).
pub(crate) const WARP_M: usize = 64;
pub(crate) const WARP_N: usize = 32;

/// A warp's accumulators for its 64×32 piece of C: 4×4 MMA tiles of 16×8, 4 floats per lane each
/// (rows g and g+8, columns 2t and 2t+1 of the tile, lane = 4g + t).
pub(crate) type WarpAcc = [[[f32; 4]; 4]; 4];

/// The `cp.async` pipeline of the tensor-core kernels over `steps` k-steps and `MMA_STAGES`
/// shared-memory stages: `load(stage, step)` issues this thread's copies of k-step `step` into
/// `stage`; `compute(stage, acc)` runs the warp's MMAs of the k-step held in `stage`.
#[inline(always)]
pub(crate) fn mma_mainloop(
    steps: usize,
    load: impl Fn(usize, usize),
    mut compute: impl FnMut(usize, &mut WarpAcc),
) -> WarpAcc {
    for s in 0..STAGES - 1 {
        if s < steps {
            load(s, s);
        }
        cp_async_commit();
    }
    let mut acc = [[[0.0f32; 4]; 4]; 4];
    for step in 0..steps {
        cp_async_wait::<{ (STAGES - 2) as u32 }>();
        // Every thread's copies of this step have landed, and every warp is done with the stage
        // the next load overwrites.
        sync_threads();
        let ahead = step + STAGES - 1;
        if ahead < steps {
            load(ahead % STAGES, ahead);
        }
        cp_async_commit();
        compute(step % STAGES, &mut acc);
    }
    cp_async_wait::<0>();
    acc
}

/// The warp's origin `(row, column)` in the block's tile: warps `w` and `w + 4` share a
/// scheduler, so the second row of warps is rotated by half the row. Then the warps of the top
/// half of the tile, and those of its left half, each sit on all four schedulers: an output
/// only half as tall or as wide as the tile (K = 64 filters, C = 64 channels) still has every
/// scheduler's MMAs, where the warps outside skip theirs.
#[inline(always)]
pub(crate) fn warp_origin() -> (usize, usize) {
    const WARPS_N: usize = MMA_TILE.1 / WARP_N;
    let warp = thread_x() / 32;
    let wm = warp / WARPS_N;
    (wm * WARP_M, (warp + wm * WARPS_N / 2) % WARPS_N * WARP_N)
}

/// Write a warp's accumulators through the fused epilogue: element `(row, col)` of the `[m, n]`
/// output, `origin` the warp's first element, becomes `epilogue(acc, alpha, c(idx), bias(col),
/// activation)` and is written by `store(idx)`, `idx = row·n + col`.
#[inline(always)]
pub(crate) fn mma_epilogue(
    acc: &WarpAcc,
    origin: (usize, usize),
    (m, n): (usize, usize),
    (alpha, activation): (f32, u32),
    beta_c: impl Fn(usize) -> f32,
    bias: impl Fn(usize) -> f32,
    store: impl Fn(usize, f32),
) {
    let (g, q) = (lane() / 4, lane() % 4);
    unroll!(mi in [0, 1, 2, 3] => {
        unroll!(ni in [0, 1, 2, 3] => {
            unroll!(e in [0, 1, 2, 3] => {
                let row = origin.0 + mi * 16 + g + e / 2 * 8;
                let col = origin.1 + ni * 8 + 2 * q + e % 2;
                if row < m && col < n {
                    let idx = row * n + col;
                    store(idx, epilogue(acc[mi][ni][e], alpha, beta_c(idx), bias(col), activation));
                }
            });
        });
    });
}
