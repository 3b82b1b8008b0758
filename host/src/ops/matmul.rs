//! Matrix multiply: `matmul`, `matmul_t`, `linear`, and the general [`Gemm`] (transposes,
//! `alpha`/`beta`, bias and activation fused in the epilogue, batched and strided-batched).
//! Kernels: `gpu-kernels/src/matmul/`.
//!
//! # Dispatch
//! `plan` picks the kernel, its tile and the split of K from the dimensions, the dtype, the
//! transposes, the batch and two device facts (SM count, whether the sm_90a module runs). The
//! first matching row wins:
//!
//! | # | when | kernel | split-K |
//! |---|------|--------|---------|
//! | 0 | f32, M ≤ 16 (M ≤ 4 only where B has at least 2^24 values), A not transposed, sm_90a, K (and N unless B is transposed) multiples of 4, 16-byte aligned operands, K > 0 (TF32 allowed or not) | `gemv_tma_f32_{nn,nt}`: exact f32 FMAs; one producer thread streams B's and A's pieces (64 columns × 64 k) through TMA into eight pieces of shared memory (stages of one piece, two for B `[N, K]`: 512 bytes of each row of B at once), eight consumer warps multiply a 4 k × 4 column block of B by A's 16 rows each | slices until the column groups fill the SMs, each ≥ 512 of k and whole 128-element stages, at most 8: one cluster per column group, the slices added in it in rank order |
//! | 1 | M ≤ 16, A not transposed, K (and N unless B is transposed) a multiple of a 16-byte vector (8 in f16/bf16, 4 in f32), 16-byte aligned operands, K > 0; f32 only with B transposed and M > 4 (TF32 allowed or not) | `gemv_mma_{f16,bf16}_{nn,nt}`, `gemv_mma_f32_nt`: `mma.m16n8k16` on `outᵀ = op(B)ᵀ·Aᵀ` (f32: 3xTF32 on `mma.m16n8k8` on `out = A·op(B)`, each step's sums added in f32), B streamed once in 16-byte vectors, 64 columns a warp, blocks of 4 warps, or of one where 4-warp blocks and their slices would fill less than half the SMs (with clusters) | slices until the grid holds 2 blocks per SM (8 warps), each ≥ 512 of k (256 for one-warp blocks), multiples of 32; up to 16 slices (compute capability ≥ 9.0) run as one cluster per column group and add their sums in it |
//! | 1b | M ≤ 16, A not transposed, otherwise (any dtype, TF32 allowed or not) | `gemv_*_{nn,nt}_r{4,16}`: B streamed once, ≤ 4 / ≤ 16 rows of A, f32 FMAs | slices until the grid is 4 blocks per SM, each ≥ 512 of k and whole 16-byte vectors per lane |
//! | 2 | f16/bf16, sm_90a, rows of A and B 16-byte multiples, pointers 16-byte aligned, K > 0 | `gemm_wgmma_*` (TMA, persistent, clusters of two when M spans two tiles, K is not split, single blocks would take more than a wave and the pairs no more waves than they; `FERROCUDA_WGMMA_CLUSTER=1`: none): 128×256, 256×128 (`_256x128`), 128×192 (`_128x192`) or 128×320 (`_128x320`, where the 128×256 tiles take at least a wave) tiles. Where the 128×256 tiles are fewer than the SMs and K ≥ 1024: the 128×256, 128×192 or 128×64 tile and the split of K that a fitted time model says finish first (`wgmma_modeled`); elsewhere the large tile that leaves the busiest SM the least work, or 128×64 (`_128x64`, no clusters) where that one's tiles are at most a quarter of the SMs (`wgmma_tile`). Past whole waves of a large tile's units (unsplit, one layer), where the part-wave left is under about half a wave, the last wave and that part run as a stream-K region on the `_sk` kernels (`stream_k_region`; `FERROCUDA_WGMMA_STREAM_K=0`: never) | the model's (slices of whole 64-element k-steps, each ≥ 512, at most two waves of blocks); outside it, when the tiles are fewer than the SMs and K ≥ 1024: one wave of slices, each ≥ 512 |
//! | 2a | row 2 with neither operand transposed, at most 128 rows or columns, where `wgmma_half_shape` gives the 128×64 tile both to the product and to its transpose and the transpose takes no more tiles and no more passes over the streamed operand (`half_swap_pays`: at most 64 rows, or 65-128 columns) | `gemm_wgmma_{f16,bf16}_nn_swapped_128x64`: Cᵀ = Bᵀ·Aᵀ on the 128×64 tile (the `tt` kernel: A read K-major as its B; 5-25% faster than unswapped where few rows stream B, `half_swap_pays`), the output written transposed from registers | as row 2 on Cᵀ |
//! | 3 | f16/bf16, sm_90a, K ≥ 256, rows or pointers TMA cannot read, and at least 24 flops a byte copied (`STAGE_FLOPS_PER_BYTE`) or the operands to copy at most as many bytes as those read in place (or 4 MiB: thin outputs, small products) | row 2's kernels after copying each such operand into a pool buffer whose rows are padded to 16-byte multiples (`pad_rows_b16`; the tensor maps keep the true row length, so the padding is never read) | as row 2 |
//! | 4 | f16/bf16 otherwise | `gemm_{f16,bf16}_*` (`mma.sync`, 128×128) | as row 2 (32-element k-steps) |
//! | 5 | f32, M·N ≤ 65,536 per batch and K ≤ 256 (TF32 allowed or not) | `gemm_f32_tiny_*`: 16×16 tiles of 64 threads, 2×2 outputs a thread, K in chunks of 32 loaded at once (latency-bound products: an MLP layer on a mini-batch) | none |
//! | 5a | exact f32 (TF32 not allowed), sm_90a, the layout of row 6a, at least 2^27 flops where the time model of `f32x3_path` gives it the shortest time (against the FMA kernels and row 5b; `FERROCUDA_MATMUL_F32X3=1`: wherever it can run) | `gemm_wgmma_f32x3_nn_128x64`: row 6a's swapped product as 3xTF32 on 128×64 tiles of Cᵀ, B's low parts made from its fragments in registers, A's by `tf32_low_f32`, every k-step's sums promoted to f32 registers | as row 2 on Cᵀ |
//! | 5b | exact f32 (TF32 not allowed), sm_90a, at least 2^27 flops where the time model of `f32x3_path` takes it (`FERROCUDA_MATMUL_F32X3=0`: never; `=1`: wherever it can run), operands that are not K-major 2-D | `gemm_wgmma_f32x3_nt` (3xTF32, 128×128 tiles, every k-step's sums promoted to f32 registers) after splitting each operand into its high and low parts: a K-major operand TMA reads in place is its own high part beside `tf32_low_f32`; any other is split (and transposed where it is not K-major) by `transpose_split_f32` / `pad_split_f32` into rows padded to 16-byte multiples | as row 2 (32-element k-steps) |
//! | 6a | f32 with TF32 allowed, sm_90a, neither operand transposed, K and N multiples of 4, both 16-byte aligned, and either operand batched (the transposes of row 6 exist for 2-D operands only) or the time model of `tf32_swap_pays` beats row 6 | `gemm_wgmma_tf32_nn` (128×192) or `_nn_128x64` (where Cᵀ is at most 64 wide or its 128×192 tiles would fill at most a quarter of the SMs): Cᵀ = Bᵀ·Aᵀ on the operands as they are (B's pieces M-major through registers, the output written transposed from registers) | as row 2 on Cᵀ (32-element k-steps) |
//! | 6 | f32 with TF32 allowed, sm_90a, K a multiple of 4, the K-major transposes possible (2-D operands, K ≤ 64·65,535) | `gemm_wgmma_tf32_nt` after transposing A `[K, M]` / B `[K, N]` | as row 2 (32-element k-steps) |
//! | 7 | f32 with TF32 allowed otherwise | `gemm_tf32_*` (`mma.sync`, 128×128) | none |
//! | 8 | f32, the 128×128 tiles fewer than the SMs, K ≥ 1024 | `gemm_f32_large_*` | one wave of slices (1 block per SM), multiples of 16, each ≥ 512 |
//! | 9 | f32 otherwise | `gemm_f32_{wide,large,medium,small}_*`: K ≥ 1024 and both grids filling the SMs: 128×256 or 128×128, whichever gives the busiest SM the least work weighted by its measured time per output; else the largest of 128×128, 128×64, 64×64 whose grid fills the SMs (`simt_tile`) | none |
//!
//! Split-K writes each slice's raw f32 sums to a workspace from the pool (`[batch][slice][M][N]`)
//! and `gemm_reduce_*` adds the slices in order and applies alpha, beta·C, bias and the activation
//! once: the same bits on every run, no atomics. Row 1's clusters add their slices through
//! shared memory in rank order instead (as deterministic, without the workspace's bytes and the
//! second launch). A stream-K region (row 2) adds the two parts of each tile split between two
//! clusters' ranges of k-steps once, in the kernel: the same bits on every run. Few rows with A transposed, and few columns
//! (N ≤ 16, the transposed case), take the tiled kernels (rows 2–9).
//!
//! Exact f32 on 3xTF32 (row 5b): each product a·b is a_hi·b_hi + a_lo·b_hi + a_hi·b_lo on TF32
//! tensor cores (the low parts' own product, below 2^-20 of it, dropped). The tensor cores
//! truncate each addition to their accumulators, an error that grows with K, so the kernel adds
//! every k-step's 32-product sums to a second set of f32 registers. Measured (H100, (256, 256,
//! 16384), norm-wise against f64): 2.1e-7 relative error, against 4.2e-7 for the FMA kernels.
use crate::kernels;
use crate::runtime::error::{DriverResultExt, Error, Result};
use crate::runtime::kernel::{ByDType, DevPtr, DevPtrMut, DeviceElement, Kernel};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::pool::DeviceBuffer;
use crate::runtime::stream::{Stream, STREAM_K_FLAGS};
use crate::shapes::{
    gemm_reduce_per_thread, gemm_shared_bytes, gemm_threads, gemv_piece, TensorMaps, ACTIVATION_GELU,
    ACTIVATION_NONE, ACTIVATION_RELU, GEMM_BK, GEMM_REDUCE_THREADS, GEMM_TILE_LARGE, GEMM_TILE_MEDIUM,
    GEMM_TILE_SMALL, GEMM_TILE_TINY, GEMM_TILE_WIDE, GEMM_TINY_MAX_K, GEMM_TINY_THREADS, GEMV_COLS_NT,
    GEMV_MMA_COLS, GEMV_MMA_THREADS, GEMV_ROWS, GEMV_ROWS_SMALL, GEMV_THREADS, GEMV_TMA_CLUSTER_MAX,
    GEMV_TMA_COLS, GEMV_TMA_SHARED_BYTES, GEMV_TMA_STAGE_K, GEMV_TMA_THREADS, MMA16_SHARED_BYTES, MMA_BK,
    MMA_SHARED_BYTES, MMA_THREADS, MMA_TILE, TENSOR_MAPS_BYTES, TENSOR_MAPS_MAX, WGMMA_CONSUMERS,
    WGMMA_MN_BOX, WGMMA_PIECE_FLOATS, WGMMA_ROW_BYTES, WGMMA_SHARED_BYTES, WGMMA_STORE_ROWS, WGMMA_THREADS,
    WGMMA_TILE, WGMMA_TILES,
};
use crate::tensor::{element_count, DType, Storage, Tensor};
use cudarc::driver::sys;
use rayon::prelude::*;
use std::sync::{Arc, PoisonError};

/// The activation a GEMM applies in its epilogue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Activation {
    #[default]
    None,
    Relu,
    /// GELU, tanh approximation.
    Gelu,
}

impl Activation {
    fn code(self) -> u32 {
        match self {
            Activation::None => ACTIVATION_NONE,
            Activation::Relu => ACTIVATION_RELU,
            Activation::Gelu => ACTIVATION_GELU,
        }
    }

    fn apply(self, v: f64) -> f64 {
        match self {
            Activation::None => v,
            Activation::Relu => v.max(0.0),
            Activation::Gelu => {
                0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044_715 * v * v * v)).tanh())
            }
        }
    }
}

/// `out = act(alpha · op(A) · op(B) + beta · C + bias)`, batched when A or B has rank 3
/// (a rank-2 operand is shared by every batch).
#[derive(Clone, Copy)]
pub struct Gemm<'a> {
    a: &'a Tensor,
    b: &'a Tensor,
    transpose_a: bool,
    transpose_b: bool,
    alpha: f32,
    beta: f32,
    c: Option<&'a Tensor>,
    bias: Option<&'a Tensor>,
    activation: Activation,
    allow_tf32: Option<bool>,
    op: &'static str,
}

/// Shapes of one GEMM after validation.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
}

impl Dims {
    /// The product transposed: Cᵀ = Bᵀ·Aᵀ, `[N, M]`, B's strides as the first operand's.
    fn swapped(&self) -> Dims {
        Dims { m: self.n, n: self.m, stride_a: self.stride_b, stride_b: self.stride_a, ..*self }
    }

    /// Output tiles of `(rows, columns)` over every matrix of the batch.
    fn tiles(&self, (bm, bn): (usize, usize)) -> usize {
        self.m.div_ceil(bm) * self.n.div_ceil(bn) * self.batch
    }

    /// N rounded up to whole tiles `bn` wide.
    fn padded_n(&self, bn: usize) -> usize {
        self.n.div_ceil(bn) * bn
    }
}

impl<'a> Gemm<'a> {
    /// `A · B` with A `[M, K]` or `[batch, M, K]`, B `[K, N]` or `[batch, K, N]`.
    pub fn new(a: &'a Tensor, b: &'a Tensor) -> Self {
        Gemm {
            a,
            b,
            transpose_a: false,
            transpose_b: false,
            alpha: 1.0,
            beta: 0.0,
            c: None,
            bias: None,
            activation: Activation::None,
            allow_tf32: None,
            op: "matmul",
        }
    }
    /// Use Aᵀ: A is stored `[K, M]` (per batch).
    pub fn transpose_a(mut self, yes: bool) -> Self {
        self.transpose_a = yes;
        self
    }
    /// Use Bᵀ: B is stored `[N, K]` (per batch).
    pub fn transpose_b(mut self, yes: bool) -> Self {
        self.transpose_b = yes;
        self
    }
    pub fn alpha(mut self, alpha: f32) -> Self {
        self.alpha = alpha;
        self
    }
    /// Add `beta · c`; `c` has the output's shape, or `[M, N]` shared by every batch.
    pub fn beta(mut self, beta: f32, c: &'a Tensor) -> Self {
        self.beta = beta;
        self.c = Some(c);
        self
    }
    /// Add `bias[n]` to every row.
    pub fn bias(mut self, bias: &'a Tensor) -> Self {
        self.bias = Some(bias);
        self
    }
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// Allow (or forbid) TF32 tensor cores for this product, whatever the context says.
    pub fn allow_tf32(mut self, allow: bool) -> Self {
        self.allow_tf32 = Some(allow);
        self
    }

    fn named(mut self, op: &'static str) -> Self {
        self.op = op;
        self
    }

    fn dims(&self) -> Result<Dims> {
        let op = self.op;
        let (a, b) = (self.a, self.b);
        a.check_peer(op, b)?;
        let mismatch = || Error::ShapeMismatch { op, lhs: a.shape().to_vec(), rhs: b.shape().to_vec() };
        let split = |t: &Tensor| -> Result<(Option<usize>, usize, usize)> {
            match *t.shape() {
                [r, c] => Ok((None, r, c)),
                [bt, r, c] => Ok((Some(bt), r, c)),
                _ => Err(Error::InvalidArgument {
                    op,
                    shape: t.shape().to_vec(),
                    reason: "expects rank 2 or 3".into(),
                }),
            }
        };
        let (ba, ar, ac) = split(a)?;
        let (bb, br, bc) = split(b)?;
        let (m, k) = if self.transpose_a { (ac, ar) } else { (ar, ac) };
        let (kb, n) = if self.transpose_b { (bc, br) } else { (br, bc) };
        if k != kb {
            return Err(mismatch());
        }
        let batch = match (ba, bb) {
            (Some(x), Some(y)) if x != y => return Err(mismatch()),
            (Some(x), _) | (_, Some(x)) => x,
            (None, None) => 1,
        };
        let stride = |bt: Option<usize>, len: usize| if bt.is_some() { len } else { 0 };
        let mut stride_c = 0;
        if let Some(c) = self.c {
            a.check_peer(op, c)?;
            let expected = self.out_shape(batch, m, n, ba.or(bb).is_some());
            if c.shape() == expected.as_slice() {
                stride_c = if ba.or(bb).is_some() { m * n } else { 0 };
            } else if c.shape() != [m, n] {
                return Err(Error::ShapeMismatch { op, lhs: c.shape().to_vec(), rhs: expected });
            }
        }
        if let Some(bias) = self.bias {
            a.check_peer(op, bias)?;
            if bias.shape() != [n] {
                return Err(Error::ShapeMismatch { op, lhs: bias.shape().to_vec(), rhs: vec![n] });
            }
        }
        Ok(Dims { batch, m, n, k, stride_a: stride(ba, m * k), stride_b: stride(bb, k * n), stride_c })
    }

    fn out_shape(&self, batch: usize, m: usize, n: usize, batched: bool) -> Vec<usize> {
        if batched {
            vec![batch, m, n]
        } else {
            vec![m, n]
        }
    }

    /// Run it.
    pub fn run(self) -> Result<Tensor> {
        let d = self.dims()?;
        let batched = self.a.rank() == 3 || self.b.rank() == 3;
        let shape = self.out_shape(d.batch, d.m, d.n, batched);
        // With K = 0 the operands are empty whatever M, N and the batch: their product may not fit.
        element_count(self.op, &shape)?;
        match self.a.storage() {
            Storage::Cpu(_) => {
                Ok(Tensor::from_cpu_as(self.a.context(), &shape, self.a.dtype(), self.cpu(d)?))
            }
            Storage::Cuda(_) => self.launch(d, &shape),
        }
    }

    fn launch(self, d: Dims, shape: &[usize]) -> Result<Tensor> {
        let op = self.op;
        let out = Tensor::uninit_as(self.a.context(), shape, self.a.dtype(), op)?;
        if out.is_empty() {
            return Ok(out);
        }
        let stream = self.a.context().stream(op)?;
        let device = DeviceFacts {
            sms: stream.device.info.sm_count as usize,
            clusters: stream.device.info.compute_capability.0 >= 9,
            sm90a: stream.device.modules.sm90a,
        };
        let aligned = |t: &Tensor| t.device_ptr() % 16 == 0;
        let operands = Operands {
            dtype: self.a.dtype(),
            transpose_a: self.transpose_a,
            transpose_b: self.transpose_b,
            batched_a: self.a.rank() == 3,
            batched_b: self.b.rank() == 3,
            aligned_a: aligned(self.a),
            aligned_b: aligned(self.b),
            tf32: self.allow_tf32.unwrap_or(self.a.context().allow_tf32()),
            f32x3: f32x3_setting(),
        };
        let plan = plan(&d, &operands, &device);
        if d.batch * plan.slices > MAX_GRID_YZ {
            return Err(Error::InvalidArgument {
                op,
                shape: shape.to_vec(),
                reason: format!("a batch of at most {MAX_GRID_YZ} per launch"),
            });
        }
        let (a, b, ta, tb) = (self.a, self.b, self.transpose_a, self.transpose_b);
        // Split-K: the slices' raw f32 sums, `[batch][slices][M][N]`, reduced by a second kernel.
        let clustered = matches!(plan.path, GemmPath::GemvMma { clustered: true, .. } | GemmPath::GemvTma);
        let workspace = if plan.slices > 1 && !clustered {
            Some(stream.device.pool.alloc(stream, d.batch * plan.slices * d.m * d.n * 4, op)?)
        } else {
            None
        };
        match plan.path {
            GemmPath::Gemv { rows } => self.launch_gemv(&d, &out, stream, &plan, rows, workspace.as_ref())?,
            GemmPath::GemvMma { .. } => self.launch_gemv_mma(&d, &out, stream, &plan, workspace.as_ref())?,
            GemmPath::GemvTma => self.launch_gemv_tma(&d, &out, stream, &plan)?,
            GemmPath::Wgmma { tile, staged } => {
                // Row 3: copies of the operands TMA cannot read, alive until after the launch
                // (the pool reuses them only after the work queued before their release).
                let lda = if ta { d.m } else { d.k };
                let ldb = if tb { d.k } else { d.n };
                let (a_op, _a_copy) = tma_operand(a, lda, d.stride_a, staged, stream, op)?;
                let (b_op, _b_copy) = tma_operand(b, ldb, d.stride_b, staged, stream, op)?;
                let split = (&plan, workspace.as_ref());
                self.launch_wgmma(d, &out, stream, ((a_op, ta), (b_op, tb)), (tile, None, false), split)?
            }
            GemmPath::Tf32Wgmma => self.launch_tf32_wgmma(d, &out, stream, (&plan, workspace.as_ref()))?,
            path @ (GemmPath::WgmmaSwapped
            | GemmPath::Tf32WgmmaSwapped { .. }
            | GemmPath::F32x3WgmmaSwapped) => {
                // Cᵀ = Bᵀ·Aᵀ: B `[K, N]` is the kernel's M-major A, A `[M, K]` its K-major B. Exact
                // f32 (3xTF32) also takes A's low part (A read in place: the plan checked); the
                // kernel makes B's in registers, so the first low part given is never read.
                let (tile, a_lo, out_t) = match path {
                    GemmPath::WgmmaSwapped => (WGMMA_SMALL_TILE, None, true),
                    GemmPath::Tf32WgmmaSwapped { tile } => (tile, None, false),
                    _ => (WGMMA_SMALL_TILE, Some(a.tf32_low(op)?), false),
                };
                let (a, b) = (TmaOperand::of(b, d.n, d.stride_b), TmaOperand::of(a, d.k, d.stride_a));
                let lows = a_lo.as_ref().map(|lo| (b, TmaOperand::of(lo, d.k, d.stride_a)));
                let split = (&plan, workspace.as_ref());
                self.launch_wgmma(
                    d.swapped(),
                    &out,
                    stream,
                    ((a, true), (b, true)),
                    (tile, lows, out_t),
                    split,
                )?
            }
            GemmPath::F32x3Wgmma => self.launch_f32x3_wgmma(d, &out, stream, (&plan, workspace.as_ref()))?,
            GemmPath::Simt { .. } | GemmPath::Tiny | GemmPath::Tf32Mma | GemmPath::HalfMma => {
                self.launch_tiled(&d, &out, stream, &plan, workspace.as_ref())?
            }
        }
        if let Some(ws) = &workspace {
            self.launch_reduce(&d, &out, stream, plan.slices, ws)?;
        }
        Ok(out)
    }

    /// The SIMT and `mma.sync` kernels: `(⌈N/BN⌉, ⌈M/BM⌉, batch · slices)` blocks.
    fn launch_tiled(
        &self,
        d: &Dims,
        out: &Tensor,
        stream: &Arc<Stream>,
        plan: &GemmPlan,
        workspace: Option<&DeviceBuffer>,
    ) -> Result<()> {
        let (ta, tb) = (usize::from(self.transpose_a), usize::from(self.transpose_b));
        let (kernel, tile, threads, shared_bytes) = match plan.path {
            GemmPath::HalfMma => {
                let kernel = GemmKernel::Half(HALF_KERNELS[self.a.dtype().index() - 1][ta][tb]);
                (kernel, MMA_TILE, MMA_THREADS, MMA16_SHARED_BYTES)
            }
            GemmPath::Tf32Mma => {
                (GemmKernel::F32(TF32_KERNELS[ta][tb]), MMA_TILE, MMA_THREADS, MMA_SHARED_BYTES)
            }
            GemmPath::Simt { tile } => {
                let size = SIMT_TILES.iter().position(|&t| t == tile);
                let kernel =
                    GemmKernel::SimtF32(SIMT_F32_KERNELS[size.unwrap_or(SIMT_TILES.len() - 1)][ta][tb]);
                (kernel, tile, gemm_threads(tile), gemm_shared_bytes(tile))
            }
            GemmPath::Tiny => {
                (GemmKernel::SimtF32(TINY_F32_KERNELS[ta][tb]), GEMM_TILE_TINY, GEMM_TINY_THREADS, 0)
            }
            GemmPath::Gemv { .. }
            | GemmPath::GemvMma { .. }
            | GemmPath::GemvTma
            | GemmPath::Wgmma { .. }
            | GemmPath::WgmmaSwapped
            | GemmPath::Tf32Wgmma
            | GemmPath::Tf32WgmmaSwapped { .. }
            | GemmPath::F32x3Wgmma
            | GemmPath::F32x3WgmmaSwapped => {
                unreachable!("launch_tiled takes the tiled paths only")
            }
        };
        let (grid_x, grid_y) = (d.n.div_ceil(tile.1), d.m.div_ceil(tile.0));
        if grid_y > MAX_GRID_YZ {
            return Err(Error::InvalidArgument {
                op: self.op,
                shape: vec![d.m, d.n],
                reason: "M is too large for one launch".into(),
            });
        }
        let cfg = LaunchConfig {
            grid: (grid_x as u32, grid_y as u32, (d.batch * plan.slices) as u32),
            block: (threads as u32, 1, 1),
            shared_bytes: shared_bytes as u32,
        };
        // SAFETY: `gemm_{f32_<tile>,tf32,f16,bf16}_<ta><tb>(a, b, c, bias, out, m, n, k, [k_chunk,]
        // stride_a, stride_b, stride_c, alpha, beta, activation[, ws])`: every pointer is a live buffer
        // of this stream whose shape `dims()` checked against m, n, k and the batch strides (c
        // and bias may be null); `out` is fresh; block, grid and dynamic shared memory are the
        // kernel's. With slices (SIMT only), `out` is the workspace of batch·slices·M·N floats,
        // grid z is batch·slices and `k_chunk` a multiple of the k-step, as the kernel requires.
        unsafe {
            match kernel {
                GemmKernel::SimtF32(k) => {
                    let mut args = self.simt_args(d, out, plan.k_chunk);
                    if let Some(ws) = workspace {
                        (args.2, args.3, args.4) = (DevPtr::null(), DevPtr::null(), ws.dev_ptr_mut());
                        (args.12, args.13, args.14) = (1.0, 0.0, ACTIVATION_NONE);
                    }
                    k.launch(stream, cfg, args)
                }
                GemmKernel::F32(k) => k.launch(stream, cfg, self.gemm_args(d, out)),
                GemmKernel::Half(k) => {
                    let ws = workspace.map_or(DevPtrMut::null(), DeviceBuffer::dev_ptr_mut);
                    k.launch(stream, cfg, self.half_args(d, out, plan.k_chunk, ws))
                }
            }
        }
    }

    /// The few-row kernel: A's rows in registers, B streamed once.
    fn launch_gemv(
        &self,
        d: &Dims,
        out: &Tensor,
        stream: &Arc<Stream>,
        plan: &GemmPlan,
        rows: usize,
        workspace: Option<&DeviceBuffer>,
    ) -> Result<()> {
        let dtype = self.a.dtype();
        let table = &GEMV_KERNELS[usize::from(rows > GEMV_ROWS_SMALL)][usize::from(self.transpose_b)];
        let (_, piece_stride) = gemv_piece(d.m, plan.k_chunk, vector_elems(dtype));
        let cfg = LaunchConfig {
            grid: (gemv_blocks_x(d.n, dtype, self.transpose_b) as u32, plan.slices as u32, d.batch as u32),
            block: (GEMV_THREADS as u32, 1, 1),
            shared_bytes: (4 * d.m * piece_stride) as u32,
        };
        let ws = workspace.map_or(DevPtrMut::null(), DeviceBuffer::dev_ptr_mut);
        // SAFETY: `gemv_<dtype>_<nn|nt>_r<rows>(a, b, c, bias, out, ws, m, n, k, k_chunk, stride_a,
        // stride_b, stride_c, alpha, beta, activation)`: a, b, c, bias and the fresh `out` are live
        // buffers of this stream of the shapes `dims()` checked (c, bias may be null); A is not
        // transposed and has at most `rows` rows (the plan's condition); `ws` is null or the
        // workspace of batch·slices·M·N floats, grid y = ⌈k / k_chunk⌉ slices, `k_chunk` a
        // multiple of 32 vectors; block, grid and dynamic shared memory (A's staged piece, at most
        // 64 KiB) are the kernel's.
        unsafe {
            launch_by_dtype!(table, dtype, |k| k.launch(
                stream,
                cfg,
                self.gemv_args(d, out, ws, plan.k_chunk)
            ))
        }
    }

    /// The arguments of the few-row kernels (`gemv_*` and `gemv_mma_*` share the signature).
    fn gemv_args<E: DeviceElement>(
        &self,
        d: &Dims,
        out: &Tensor,
        ws: DevPtrMut<f32>,
        k_chunk: usize,
    ) -> GemvArgs<E> {
        let (a, b, c, bias, out, m, n, k, stride_a, stride_b, stride_c, alpha, beta, act) =
            self.gemm_args::<E>(d, out);
        (a, b, c, bias, out, ws, m, n, k, k_chunk, stride_a, stride_b, stride_c, alpha, beta, act)
    }

    /// Few rows on tensor cores (dispatch row 1).
    fn launch_gemv_mma(
        &self,
        d: &Dims,
        out: &Tensor,
        stream: &Arc<Stream>,
        plan: &GemmPlan,
        workspace: Option<&DeviceBuffer>,
    ) -> Result<()> {
        let dtype = self.a.dtype();
        let GemmPath::GemvMma { clustered, warps } = plan.path else { unreachable!("a few-row plan") };
        let blocks_x = gemv_mma_blocks_x(d.n, warps) as u32;
        let (grid, cluster) = if clustered {
            ((blocks_x * plan.slices as u32, 1, d.batch as u32), plan.slices as u32)
        } else {
            ((blocks_x, plan.slices as u32, d.batch as u32), 1)
        };
        let cfg = LaunchConfig { grid, block: (32 * warps as u32, 1, 1), shared_bytes: 0 };
        let ws = workspace.map_or(DevPtrMut::null(), DeviceBuffer::dev_ptr_mut);
        let table = &GEMV_MMA_KERNELS[usize::from(self.transpose_b)];
        // SAFETY: `gemv_mma_<dtype>_<nn|nt>(a, b, c, bias, out, ws, m, n, k, k_chunk, stride_a,
        // stride_b, stride_c, alpha, beta, activation)`: a, b, c, bias and the fresh `out` are
        // live buffers of this stream of the shapes `dims()` checked (c, bias may be null); A is
        // not transposed and has at most 16 rows, K (and N when B is not transposed) is a multiple
        // of a 16-byte vector and A and B are 16-byte aligned (the plan's conditions, so every
        // batch's rows start 16-byte aligned too); `ws` is null or the workspace of
        // batch·slices·M·N floats, ⌈k / k_chunk⌉ slices (grid y, or each cluster along x when
        // `cluster` > 1, where `ws` is null) with `k_chunk` a multiple of 32; block and grid are
        // the kernel's.
        unsafe {
            launch_by_dtype!(table, dtype, |k| k.launch_clustered(
                stream,
                cfg,
                cluster,
                self.gemv_args(d, out, ws, plan.k_chunk)
            ))
        }
    }

    /// f32 few rows fed by TMA (dispatch row 0).
    fn launch_gemv_tma(&self, d: &Dims, out: &Tensor, stream: &Arc<Stream>, plan: &GemmPlan) -> Result<()> {
        let map = |t: &Tensor, (rows, inner): (usize, usize), stride: usize, box_rows: usize| {
            tensor_map(DType::F32, t.device_ptr(), (inner, rows, d.batch), stride, (32, box_rows))
        };
        let map_a = map(self.a, (d.m, d.k), d.stride_a, GEMV_ROWS)?;
        let b_dims = if self.transpose_b { (d.n, d.k) } else { (d.k, d.n) };
        let map_b = map(self.b, b_dims, d.stride_b, GEMV_TMA_COLS)?;
        let cluster = plan.slices as u32;
        let cfg = LaunchConfig {
            grid: ((d.n.div_ceil(GEMV_TMA_COLS) * plan.slices) as u32, 1, d.batch as u32),
            block: (GEMV_TMA_THREADS as u32, 1, 1),
            shared_bytes: GEMV_TMA_SHARED_BYTES as u32,
        };
        let kernel = if self.transpose_b { kernels::gemv_tma_f32_nt } else { kernels::gemv_tma_f32_nn };
        let (_, _, c, bias, out, m, n, k, stride_a, stride_b, stride_c, alpha, beta, act) =
            self.gemm_args::<f32>(d, out);
        let maps = tensor_maps(&[map_a, map_b]);
        // SAFETY: `gemv_tma_f32_<nn|nt>(maps, c, bias, out, m, n, k, k_chunk, stride_a, stride_b,
        // stride_c, alpha, beta, activation)`: the maps (by value) describe A `[M, K]` and B
        // (`[K, N]`, or `[N, K]` when transposed) of the live buffers `dims()` checked, with the
        // kernel's boxes (32 floats × 16 rows of A, × 64 rows of B), rows and batches of
        // 16-byte multiples and 16-byte aligned starts (the plan's conditions); c, bias (may be
        // null) and the fresh `out` are live buffers of this stream of the shapes checked; A has
        // at most 16 rows; the grid's clusters along x are one column group's ⌈k / k_chunk⌉ ≤ 8
        // slices, `k_chunk` a multiple of 128; block and dynamic shared memory are the kernel's.
        unsafe {
            kernel.launch_clustered(
                stream,
                cfg,
                cluster,
                (maps, c, bias, out, m, n, k, plan.k_chunk, stride_a, stride_b, stride_c, alpha, beta, act),
            )
        }
    }

    /// Split-K's second kernel: the slices added in order, then the epilogue.
    fn launch_reduce(
        &self,
        d: &Dims,
        out: &Tensor,
        stream: &Arc<Stream>,
        slices: usize,
        ws: &DeviceBuffer,
    ) -> Result<()> {
        let per_thread = gemm_reduce_per_thread(d.m * d.n, out.device_ptr(), out.dtype().size_bytes());
        let blocks = (d.m * d.n).div_ceil(per_thread * GEMM_REDUCE_THREADS);
        let cfg = LaunchConfig {
            grid: (blocks as u32, 1, d.batch as u32),
            block: (GEMM_REDUCE_THREADS as u32, 1, 1),
            shared_bytes: 0,
        };
        if cfg.grid.0 as usize != blocks {
            return Err(Error::InvalidArgument {
                op: self.op,
                shape: vec![d.m, d.n],
                reason: "too many outputs for a split-K reduction".into(),
            });
        }
        // SAFETY: `gemm_reduce_<dtype>(ws, c, bias, out, m, n, slices, stride_c, alpha, beta,
        // activation)`: `ws` holds batch·slices·M·N floats, written by the GEMM launched before on
        // this stream; c and bias (may be null) and `out` are live buffers of the checked shapes;
        // one thread per output of each batch.
        unsafe {
            launch_by_dtype!(REDUCE_KERNELS, self.a.dtype(), |k| k.launch(
                stream,
                cfg,
                (
                    ws.dev_ptr(),
                    Tensor::ptr_or_null(self.c),
                    Tensor::ptr_or_null(self.bias),
                    out.ptr_mut(),
                    d.m,
                    d.n,
                    slices,
                    d.stride_c,
                    self.alpha,
                    self.beta,
                    self.activation.code(),
                )
            ))
        }
    }

    /// The arguments of the mma.sync kernels.
    fn gemm_args<E: DeviceElement>(&self, d: &Dims, out: &Tensor) -> GemmArgs<E> {
        (
            self.a.ptr(),
            self.b.ptr(),
            Tensor::ptr_or_null(self.c),
            Tensor::ptr_or_null(self.bias),
            out.ptr_mut(),
            d.m,
            d.n,
            d.k,
            d.stride_a,
            d.stride_b,
            d.stride_c,
            self.alpha,
            self.beta,
            self.activation.code(),
        )
    }

    /// The arguments of the 16-bit mma.sync kernels: `k_chunk` after k, the workspace last.
    fn half_args(&self, d: &Dims, out: &Tensor, k_chunk: usize, ws: DevPtrMut<f32>) -> HalfArgs {
        let (a, b, c, bias, out, m, n, k, stride_a, stride_b, stride_c, alpha, beta, act) =
            self.gemm_args::<u16>(d, out);
        (a, b, c, bias, out, m, n, k, k_chunk, stride_a, stride_b, stride_c, alpha, beta, act, ws)
    }

    /// The arguments of the SIMT kernels: the mma.sync ones with `k_chunk` after k.
    fn simt_args(&self, d: &Dims, out: &Tensor, k_chunk: usize) -> SimtArgs {
        let (a, b, c, bias, out, m, n, k, stride_a, stride_b, stride_c, alpha, beta, act) =
            self.gemm_args::<f32>(d, out);
        (a, b, c, bias, out, m, n, k, k_chunk, stride_a, stride_b, stride_c, alpha, beta, act)
    }

    /// TF32 through `wgmma`: both operands K-major (a 2-D operand in the other layout is
    /// transposed first; the plan checked that the transposes can run).
    fn launch_tf32_wgmma(
        &self,
        d: Dims,
        out: &Tensor,
        stream: &Arc<Stream>,
        split: (&GemmPlan, Option<&DeviceBuffer>),
    ) -> Result<()> {
        let a_t = if self.transpose_a { Some(self.a.transpose()?) } else { None };
        let b_t = if self.transpose_b { None } else { Some(self.b.transpose()?) };
        let (a, b) = (a_t.as_ref().unwrap_or(self.a), b_t.as_ref().unwrap_or(self.b));
        let (a, b) = (TmaOperand::of(a, d.k, d.stride_a), TmaOperand::of(b, d.k, d.stride_b));
        self.launch_wgmma(d, out, stream, ((a, false), (b, true)), (0, None, false), split)
    }

    /// Exact f32 as 3xTF32 through `wgmma`: both operands K-major with their low parts. A
    /// K-major operand whose rows TMA can read is its own high part (the tensor cores truncate
    /// it) beside `tf32_low`; another is split in one pass into its TF32 rounding and the
    /// remainder, transposed where it is not K-major, its rows padded to 16-byte multiples. The
    /// plan checked that the transposes can run.
    fn launch_f32x3_wgmma(
        &self,
        d: Dims,
        out: &Tensor,
        stream: &Arc<Stream>,
        split: (&GemmPlan, Option<&DeviceBuffer>),
    ) -> Result<()> {
        let op = self.op;
        let pitch = d.k.next_multiple_of(4);
        // `(high part, if not the operand itself; low part; their row pitch)`, K-major.
        let parts = |t: &Tensor, k_major: bool, rows: usize| -> Result<(Option<Tensor>, Tensor, usize)> {
            if !k_major {
                let (hi, lo) = t.transpose_planes_split(op, (1, d.k, rows), pitch)?;
                Ok((Some(hi), lo, pitch))
            } else if in_place_k_major(d.k, t.device_ptr() % 16 == 0) {
                Ok((None, t.tf32_low(op)?, d.k))
            } else {
                let (hi, lo) = t.pad_split(op, (t.len() / d.k, d.k), pitch)?;
                Ok((Some(hi), lo, pitch))
            }
        };
        let (a_hi, a_lo, a_pitch) = parts(self.a, !self.transpose_a, d.m)?;
        let (b_hi, b_lo, b_pitch) = parts(self.b, self.transpose_b, d.n)?;
        // Batched operands (K-major only) keep their matrices `rows · pitch` apart.
        let operand = |t: &Tensor, (pitch, rows, batched): (usize, usize, bool)| {
            TmaOperand::of(t, pitch, if batched { rows * pitch } else { 0 })
        };
        let (a_at, b_at) = ((a_pitch, d.m, d.stride_a != 0), (b_pitch, d.n, d.stride_b != 0));
        let (a, b) = (a_hi.as_ref().unwrap_or(self.a), b_hi.as_ref().unwrap_or(self.b));
        let (a, b) = (operand(a, a_at), operand(b, b_at));
        let lows = (operand(&a_lo, a_at), operand(&b_lo, b_at));
        self.launch_wgmma(d, out, stream, ((a, false), (b, true)), (F32X3_TILE, Some(lows), false), split)
    }

    /// The `wgmma` kernel on `a` and `b` (transposed as flagged) with tile `kind` of
    /// `WGMMA_TILES`: A's, B's and the output's tensor maps (with `lows`, the
    /// 3xTF32 kernel: then A's and B's low parts' too), then the launch. `out_t`: the 16-bit
    /// swapped product (`GemmPath::WgmmaSwapped`: `d` and the operands already swapped, both
    /// transposed, the 128×64 tile).
    fn launch_wgmma(
        &self,
        d: Dims,
        out: &Tensor,
        stream: &Arc<Stream>,
        ((a, ta), (b, tb)): ((TmaOperand, bool), (TmaOperand, bool)),
        (kind, lows, out_t): (usize, Option<(TmaOperand, TmaOperand)>, bool),
        (plan, workspace): (&GemmPlan, Option<&DeviceBuffer>),
    ) -> Result<()> {
        let op = self.op;
        let dtype = self.a.dtype();
        let tile = WGMMA_TILES[kind];
        // A is [M, K] (K-major) or, transposed, [K, M]; B is [K, N] or, transposed, [N, K]. A
        // K-major operand moves as one box of 128 bytes of k × its tile rows; an M/N-major one
        // as boxes of 128 bytes of rows × one k-step (16-bit: 64 × 64, f32: 32 × 32).
        let row = WGMMA_ROW_BYTES / dtype.size_bytes();
        let map = |t: TmaOperand, rows_tile: usize, k_major: bool, (outer, inner): (usize, usize)| {
            let boxed = if k_major { (row, rows_tile) } else { (row, row) };
            tensor_map_pitched(dtype, t.ptr, (inner, outer, d.batch), (t.pitch, t.batch_stride), boxed)
        };
        let map_a = if ta { map(a, tile.0, false, (d.k, d.m))? } else { map(a, tile.0, true, (d.m, d.k))? };
        // f32 with an M-major A: the swapped product (`d` and the operands already swapped).
        let swapped = dtype == DType::F32 && ta;
        let kernel = if lows.is_some() && swapped {
            WgmmaKernel::Tf32(kernels::gemm_wgmma_f32x3_nn_128x64)
        } else if lows.is_some() {
            WgmmaKernel::Tf32(kernels::gemm_wgmma_f32x3_nt)
        } else if swapped && kind == WGMMA_SMALL_TILE {
            WgmmaKernel::Tf32(kernels::gemm_wgmma_tf32_nn_128x64)
        } else if swapped {
            WgmmaKernel::Tf32(kernels::gemm_wgmma_tf32_nn)
        } else if dtype == DType::F32 {
            WgmmaKernel::Tf32(kernels::gemm_wgmma_tf32_nt)
        } else if out_t {
            WgmmaKernel::Half(WGMMA_SWAPPED_KERNELS[dtype.index() - 1])
        } else if kind == WGMMA_WIDE_TILE {
            WgmmaKernel::Half(WGMMA_WIDE_KERNELS[dtype.index() - 1][usize::from(ta)][usize::from(tb)])
        } else {
            WgmmaKernel::Half(WGMMA_KERNELS[kind][dtype.index() - 1][usize::from(ta)][usize::from(tb)])
        };
        // The grid is set below; the occupancy query wants one of whole clusters.
        let mut cfg = LaunchConfig {
            grid: (2, 1, 1),
            block: (WGMMA_THREADS as u32, 1, 1),
            shared_bytes: WGMMA_SHARED_BYTES as u32,
        };
        // Clusters of two blocks on vertically adjacent tiles, each loading half of B's piece
        // for both (TMA multicast), when there are two rows of tiles to pair, B's piece is more
        // than one box (not the 128×64 tile), no split of K
        // (split-K sizes its slices to the SMs, and fewer blocks run in clusters), the device
        // runs such clusters, single blocks would take more than one wave, and the pairs no more
        // waves than they: fewer pairs than blocks run at once (clusters need both SMs in one
        // GPC), and an odd last row of tiles pairs with an empty one. Where the pairs took a
        // wave more they ran 1.07-2.07× slower (bf16 (1152, 8192, 8192) on 128×192: 0.294 ms
        // paired, 0.222 single; (320, 8192, 8192) 0.162 against 0.078); in one wave either way,
        // 3-18% slower (12 of 12 products); in as many waves beyond one, within 5% either way, or
        // up to 17% faster paired (tall products, (8192, 640, 8192)) (perf-notes, thirtieth
        // session).
        let (rows, cols) = (d.m.div_ceil(tile.0), d.n.div_ceil(tile.1) * d.batch);
        let sms = stream.device.info.sm_count as usize;
        let pairable =
            wgmma_cluster() && d.m > tile.0 && plan.slices == 1 && tile.1 > WGMMA_MN_BOX && rows * cols > sms;
        let clusters = if pairable { resident_clusters(stream, kernel, cfg) } else { 0 };
        let pair =
            clusters > 0 && (rows.div_ceil(2) * cols).div_ceil(clusters) <= (rows * cols).div_ceil(sms);
        let cluster = if pair { 2 } else { 1 };
        let map_b_of = |b| {
            if tb {
                // The 128×320 tile's B rows in boxes of half the tile (a box spans at most 256).
                let rows = if kind == WGMMA_WIDE_TILE { tile.1 / 2 } else { tile.1 / cluster };
                map(b, rows, true, (d.n, d.k))
            } else {
                map(b, tile.1, false, (d.k, d.n))
            }
        };
        let map_b = map_b_of(b)?;
        // The output through shared memory and TMA stores: whole slices only (no split), rows
        // that start on 16-byte boundaries, not transposed.
        let tma_store = plan.slices == 1 && rows_are_vectors(d.n, dtype) && !swapped && !out_t;
        let map_out = if tma_store {
            let stride = if d.batch > 1 { d.m * d.n } else { 0 };
            tensor_map(dtype, out.device_ptr(), (d.n, d.m, d.batch), stride, (row, WGMMA_STORE_ROWS))?
        } else {
            sys::CUtensorMap { opaque: [0; 16] }
        };
        let mut maps = vec![map_a, map_b, map_out];
        if let Some((a_lo, b_lo)) = lows {
            // Only the 3xTF32 kernels take low parts: K-major, with the high parts' boxes (the
            // swapped one makes A's itself: no map).
            if swapped {
                maps.push(sys::CUtensorMap { opaque: [0; 16] });
            } else {
                maps.push(map(a_lo, tile.0, true, (d.m, d.k))?);
            }
            maps.push(map_b_of(b_lo)?);
        }

        let layers = d.batch * plan.slices;
        let units = d.m.div_ceil(tile.0).div_ceil(cluster) * d.n.div_ceil(tile.1) * layers;
        // Persistent blocks, as many as run at once (one per SM: the shared memory allows no
        // second; clusters need both blocks' SMs in one GPC, so fewer may fit), each walking the
        // units `blockIdx.x / cluster + i·gridDim.x / cluster`.
        let resident = if cluster > 1 { clusters } else { sms };
        let k_steps = plan.k_chunk.div_ceil(WGMMA_ROW_BYTES / dtype.size_bytes());
        // A stream-K region for the plain 16-bit kernels of the large tiles, one unsplit layer,
        // on kernels of their own.
        let plain_half = matches!(kernel, WgmmaKernel::Half(_)) && !out_t && kind < WGMMA_SMALL_TILE;
        let sk_units = if plain_half && layers == 1 && wgmma_stream_k() {
            stream_k_region(units, resident, k_steps, cluster)
        } else {
            0
        };
        // The region's kernel, the workspace of its split tiles' sums and this stream's flags.
        let (kernel, segments, flags) = if sk_units > 0 {
            let floats = sk_units * cluster * WGMMA_CONSUMERS * WGMMA_PIECE_FLOATS;
            (
                WgmmaKernel::Half(
                    WGMMA_SK_KERNELS[kind][dtype.index() - 1][usize::from(ta)][usize::from(tb)],
                ),
                Some(stream.device.pool.alloc(stream, floats * 4, op)?),
                DevPtrMut::new(stream.stream_k_flags()?),
            )
        } else {
            (kernel, None, DevPtrMut::null())
        };
        if units > i32::MAX as usize {
            return Err(Error::InvalidArgument {
                op,
                shape: vec![d.m, d.n],
                reason: "too many output tiles for one launch".into(),
            });
        }
        cfg.grid.0 = (units.min(resident).max(1) * cluster) as u32;
        let maps = tensor_maps(&maps);
        let ws = segments.as_ref().or(workspace).map_or(DevPtrMut::null(), DeviceBuffer::dev_ptr_mut);
        let launch = (k_steps, ws, layers, u32::from(tma_store), cluster as u32);
        let stream_k = (sk_units as u32, flags);
        // SAFETY: `gemm_wgmma_<dtype>_<ta><tb>[_<tile>][_sk](maps, c, bias, out, m, n, k, stride_c,
        // alpha, beta, activation, batched_a, batched_b, k_steps, ws, layers, tma_store, cluster,
        // sk_units, sk_flags)`: `ws` is null or
        // the workspace of batch·slices·M·N floats with layers = batch·slices, slices = ⌈k-steps /
        // k_steps⌉; `maps` holds A's, B's and (with `tma_store`) the output's tensor maps, and
        // for `gemm_wgmma_f32x3_nt` (taken exactly when `lows` is given) A's and B's low parts'
        // after them (`gemm_wgmma_tf32_nn`, taken for f32 with `ta`: `d` is the swapped product's,
        // A's map is the caller's B `[K, N]` with 32 × 32 boxes, B's the caller's A `[M, K]`, and
        // the kernel writes the caller's `[M, N]` output or workspace transposed, so `out`, c and
        // `ws` keep the caller's shapes; `gemm_wgmma_f32x3_nn_128x64`, taken for f32 with `ta` and
        // `lows`, likewise, its fourth map zeroed and never read; `gemm_wgmma_<f16|bf16>_nn_swapped_128x64`,
        // taken exactly with `out_t`, likewise with 16-bit boxes and no TMA store), made above
        // for the live buffers of A, B (or their staged, transposed or split copies, which the
        // caller keeps until after this launch) and `out` with the shapes and strides `dims()`
        // checked and the boxes of the kernel's tile; c and bias (may be null) and the fresh
        // `out` are live buffers of this stream of the shapes checked; with a stream-K region
        // (`sk_units` > 0: plain 16-bit kernels, one layer, no split), `ws` is `segments`, room
        // for sk_units · cluster · consumers pieces of `WGMMA_PIECE_FLOATS`, and `flags` this
        // stream's `STREAM_K_FLAGS` zeroed flags (`stream_k_region` keeps the region's within
        // them), which no other launch uses while this one runs (the stream runs its launches in
        // order, and a capture makes this launch a barrier); the grid is the clusters that run at
        // once, `resident` (the region needs more units than that), as the merge's wait needs;
        // block, grid and dynamic shared memory are the kernel's. The maps travel by value in the
        // launch's parameters.
        unsafe {
            match kernel {
                WgmmaKernel::Tf32(k) => k.launch_clustered(
                    stream,
                    cfg,
                    cluster as u32,
                    self.wgmma_args(maps, &d, out, launch, stream_k),
                ),
                WgmmaKernel::Half(k) => k.launch_clustered(
                    stream,
                    cfg,
                    cluster as u32,
                    self.wgmma_args(maps, &d, out, launch, stream_k),
                ),
            }
        }
    }

    /// The arguments of the `wgmma` kernels after the tensor maps `maps`.
    fn wgmma_args<E: DeviceElement>(
        &self,
        maps: TensorMaps,
        d: &Dims,
        out: &Tensor,
        (k_steps, ws, layers, tma_store, cluster): (usize, DevPtrMut<f32>, usize, u32, u32),
        (sk_units, sk_flags): (u32, DevPtrMut<u32>),
    ) -> WgmmaArgs<E> {
        (
            maps,
            Tensor::ptr_or_null(self.c),
            Tensor::ptr_or_null(self.bias),
            out.ptr_mut(),
            d.m,
            d.n,
            d.k,
            d.stride_c,
            self.alpha,
            self.beta,
            self.activation.code(),
            u32::from(d.stride_a != 0),
            u32::from(d.stride_b != 0),
            k_steps,
            ws,
            layers,
            tma_store,
            cluster,
            sk_units,
            sk_flags,
        )
    }

    /// The CPU twin: f64 accumulation, the same epilogue.
    fn cpu(&self, d: Dims) -> Result<Vec<f32>> {
        let host = |t: &Tensor| t.to_vec();
        let (a, b) = (host(self.a)?, host(self.b)?);
        let c = self.c.map(host).transpose()?;
        let bias = self.bias.map(host).transpose()?;
        let (ta, tb) = (self.transpose_a, self.transpose_b);
        let dtype = self.a.dtype();
        let mut out = vec![0.0f32; d.batch * d.m * d.n];
        if d.n == 0 {
            return Ok(out);
        }
        out.par_chunks_mut(d.n).enumerate().for_each(|(row_index, row)| {
            let (z, i) = (row_index / d.m, row_index % d.m);
            let (a, b) = (&a[z * d.stride_a..], &b[z * d.stride_b..]);
            let mut acc = vec![0.0f64; d.n];
            for p in 0..d.k {
                let x = if ta { a[p * d.m + i] } else { a[i * d.k + p] } as f64;
                for (j, s) in acc.iter_mut().enumerate() {
                    *s += x * if tb { b[j * d.k + p] } else { b[p * d.n + j] } as f64;
                }
            }
            for (j, o) in row.iter_mut().enumerate() {
                let mut v = self.alpha as f64 * acc[j];
                if let Some(c) = &c {
                    v += self.beta as f64 * c[z * d.stride_c + i * d.n + j] as f64;
                }
                if let Some(bias) = &bias {
                    v += bias[j] as f64;
                }
                *o = dtype.round(self.activation.apply(v));
            }
        });
        Ok(out)
    }
}

/// What the planner needs to know of the device.
#[derive(Clone, Copy, Debug)]
struct DeviceFacts {
    sms: usize,
    /// Thread-block clusters (compute capability 9.0 and later).
    clusters: bool,
    /// The sm_90a module (wgmma, TMA) runs.
    sm90a: bool,
}

/// What the planner needs to know of the operands beside their dimensions.
#[derive(Clone, Copy, Debug)]
struct Operands {
    dtype: DType,
    transpose_a: bool,
    transpose_b: bool,
    batched_a: bool,
    batched_b: bool,
    /// The operand's first element is 16-byte aligned (TMA and vector loads).
    aligned_a: bool,
    aligned_b: bool,
    /// f32 may use TF32 tensor cores.
    tf32: bool,
    /// Exact f32 as 3xTF32: `None` where it pays (`f32x3_path`), `Some` forced on or off.
    f32x3: Option<bool>,
}

/// The kernel family a GEMM runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GemmPath {
    /// `gemv_*`: A has at most `rows` (4 or 16) rows.
    Gemv { rows: usize },
    /// `gemv_mma_*`: at most 16 rows of A, on tensor cores, in blocks of `warps` warps;
    /// `clustered`: a column group's slices of K run as one cluster and add their sums in it (no
    /// workspace, no `gemm_reduce_*`).
    GemvMma { clustered: bool, warps: usize },
    /// `gemv_tma_f32_*`: f32, at most 16 rows of A, B streamed by TMA into shared memory; the
    /// slices of K (at most 8) run as one cluster per column group.
    GemvTma,
    /// SIMT f32 with this tile.
    Simt { tile: (usize, usize) },
    /// The tiny SIMT f32 GEMM (`gemm_f32_tiny_*`: 16×16 tiles, whole chunks of K per load).
    Tiny,
    /// TF32 `mma.sync`.
    Tf32Mma,
    /// f16/bf16 `mma.sync`.
    HalfMma,
    /// f16/bf16 `wgmma` + TMA (sm_90a) with tile `tile` of `WGMMA_TILES` (128×256, 256×128,
    /// 128×192); `staged`: the operands TMA cannot read are copied first (dispatch row 3).
    Wgmma { tile: usize, staged: bool },
    /// f16/bf16 `wgmma` + TMA (sm_90a) on A `[M, K]` and B `[K, N]` as they are, computing
    /// Cᵀ = Bᵀ·Aᵀ on the 128×64 tile (`gemm_wgmma_{f16,bf16}_nn_swapped_128x64`: the `tt` kernel
    /// reading the caller's A K-major, its output written transposed from registers).
    WgmmaSwapped,
    /// TF32 `wgmma` + TMA (sm_90a), after transposing the operands to K-major.
    Tf32Wgmma,
    /// TF32 `wgmma` + TMA (sm_90a) on A `[M, K]` and B `[K, N]` as they are, computing Cᵀ = Bᵀ·Aᵀ
    /// (`gemm_wgmma_tf32_nn[_128x64]`: B's pieces through registers, the output written
    /// transposed) with tile `tile` of `WGMMA_TILES` on Cᵀ (128×192 or 128×64).
    Tf32WgmmaSwapped { tile: usize },
    /// Exact f32 as 3xTF32 on `wgmma` + TMA (sm_90a): the operands K-major with their low parts.
    F32x3Wgmma,
    /// Exact f32 as 3xTF32 on A `[M, K]` and B `[K, N]` as they are, computing Cᵀ = Bᵀ·Aᵀ
    /// (`gemm_wgmma_f32x3_nn_128x64`: B's low parts made in registers, A's beside it).
    F32x3WgmmaSwapped,
}

/// A GEMM's kernel and its split of K: `slices` blocks along k per output tile, each over
/// `k_chunk` elements (`slices == 1`: no split, `k_chunk == max(K, 1)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GemmPlan {
    path: GemmPath,
    slices: usize,
    k_chunk: usize,
}

/// f32 products up to this many outputs (per batch) and K up to `GEMM_TINY_MAX_K` take the tiny
/// SIMT GEMM: at most 256 of its 16×16 tiles, each one round trip per chunk of 32 k (an MLP layer
/// on a mini-batch). Larger
/// ones fill the SMs with the tiled kernels, and a longer K is better split. Exact f32 there also
/// when TF32 is allowed: TF32 gains nothing at a latency-bound size.
const TINY_MAX_OUTPUTS: usize = 1 << 16;

/// Blocks of `gemv_mma_*` the split of K aims for per SM. Three fit (128 threads of 166–168
/// registers), but two, with fewer and longer slices, measured faster: bf16 (16, 8192, 8192)
/// 0.072 → 0.068 ms (8 slices instead of 12), (16, 4096, 16384) 0.072 → 0.069 ms, the others
/// unchanged within noise (ninth session, same call); with the slices added in clusters, three
/// and four an SM were slower again (nineteenth session: 0.0675 and 0.062 against 0.0576 ms at
/// bf16 nn (16, 8192, 8192)).
const GEMV_MMA_BLOCKS_PER_SM: usize = 2;
/// The most slices of `gemv_mma_*` that add their sums in a cluster (the H100's largest cluster,
/// non-portable past 8).
const GEMV_MMA_CLUSTER_MAX: usize = 16;
/// The shortest K-slice of one-warp few-row blocks (slices added in a cluster cost no workspace).
/// GPT-2-sized decode products (nineteenth session, call I, bf16): (1, 3072, 768) 0.016-0.017 →
/// 0.012 ms (48 one-warp column groups × 3 slices instead of 12 blocks), (16, 3072, 768) 0.020 →
/// 0.0135, (1, 768, 3072) 0.0144-0.015 → 0.0115-0.0123; cuBLAS 0.015-0.020 there.
const GEMV_MMA_CLUSTER_MIN_K: usize = 256;
/// The fewest elements of B for which 1-4 rows take `gemv_tma_f32_*` rather than the register-fed
/// `gemv_f32_*_r4`, whose time grows with the rows where the TMA kernel's does not (H100, same
/// call, ms, r4 against TMA): (1, 8192, 8192) 0.100-0.104 against 0.096-0.100, (4, 8192, 8192)
/// 0.106-0.118 against 0.097-0.100, (1, 4096, 4096) 0.034-0.036 both, (4, 4096, 4096) A·Bᵀ 0.042
/// against 0.035, but (1, 3072, 768) A·Bᵀ 0.010-0.012 against 0.015-0.016 (the TMA kernel's
/// longer start). From 5 rows it runs whatever the size.
const GEMV_TMA_MIN_B: usize = 1 << 24;
/// Blocks the few-row kernel aims for per SM (two resident, two waves: enough bytes in flight).
const GEMV_BLOCKS_PER_SM: usize = 4;
/// Split-K slices are at least this long, so that each block's mainloop outlasts its prologue and
/// the workspace stays small beside the operands.
const SPLIT_MIN_K: usize = 512;
const MAX_SLICES: usize = 32;
/// The shortest K, and the least flops a byte copied or the most bytes copied (at most those read
/// in place, or this many), for which copying unaligned 16-bit operands into TMA-readable
/// buffers beats the `mma.sync` kernels (dispatch row 3).
const STAGE_MIN_K: usize = 256;
const STAGE_FLOPS_PER_BYTE: usize = 24;
const STAGE_COPY_BYTES: usize = 4 << 20;
/// 16-bit `mma.sync` blocks resident on one SM (256 threads × 165 registers).
const MMA_HALF_PER_SM: usize = 1;
/// SIMT f32 blocks of the large tile resident on one SM (256 threads × 135–155 registers).
const SIMT_LARGE_PER_SM: usize = 1;
/// The shortest K that runs on the wide SIMT tile.
const SIMT_WIDE_MIN_K: usize = 1024;
/// Relative time per output element of the SIMT tiles, as `SIMT_TILES`: wide against large (one
/// block of 256 threads per SM each) 40.4–42.1 against 38.2–38.8 TFLOP/s at 4096–8192; medium
/// and small against large 1.12 and 1.20 on a short-K product (ResNet stem's `Wᵀ · dy`, K = 64:
/// 0.603 and 0.481 ms on 2× and 3.0× the large tile's busiest-SM work of 0.536 ms; perf-notes).
const SIMT_COST: [usize; 4] = [100, 107, 120, 128];

/// Elements of one 16-byte vector of `dtype`.
fn vector_elems(dtype: DType) -> usize {
    16 / dtype.size_bytes()
}

/// Whether rows of `len` elements of `dtype` are whole 16-byte vectors (what TMA needs of a
/// row's length, in a store as in a load).
fn rows_are_vectors(len: usize, dtype: DType) -> bool {
    len % vector_elems(dtype) == 0
}

/// Blocks of a few-row launch along N.
fn gemv_blocks_x(n: usize, dtype: DType, transpose_b: bool) -> usize {
    if transpose_b {
        n.div_ceil(GEMV_THREADS / 32 * GEMV_COLS_NT)
    } else {
        n.div_ceil(32 * vector_elems(dtype))
    }
}

/// Blocks of a few-row launch on tensor cores along N, in blocks of `warps` warps.
fn gemv_mma_blocks_x(n: usize, warps: usize) -> usize {
    n.div_ceil(warps * GEMV_MMA_COLS)
}

/// Split `k` into slices of a multiple of `align` elements so that `blocks` blocks per slice
/// times the slices stay within `target` (one wave), each slice at least `min_chunk` long:
/// `(slices, k_chunk)`.
fn split_k(k: usize, blocks: usize, target: usize, (align, min_chunk): (usize, usize)) -> (usize, usize) {
    let wanted = (target / blocks.max(1)).min(k / min_chunk).clamp(1, MAX_SLICES);
    if wanted == 1 {
        return (1, k.max(1));
    }
    let k_chunk = k.div_ceil(wanted).next_multiple_of(align);
    (k.div_ceil(k_chunk), k_chunk)
}

/// The small `wgmma` tile, 128×64 (index into `WGMMA_TILES`).
const WGMMA_SMALL_TILE: usize = 3;
/// The 128×192 `wgmma` tile (index into `WGMMA_TILES`).
const WGMMA_N192_TILE: usize = 2;
/// The 3xTF32 kernel's tile, 128×128 (index into `WGMMA_TILES`).
const F32X3_TILE: usize = 4;
/// The 128×320 `wgmma` tile (index into `WGMMA_TILES`): 16-bit, unsplit.
const WGMMA_WIDE_TILE: usize = 5;
/// `wgmma_tile`'s weight per element of the 128×320 tile (the others' 100): at the same waves it
/// ran 4-5% slower than 128×256 (H100, thirty-third session, call A: bf16 8192³ 1.47 against
/// 1.385 ms, 16.25 against 16 tile-times of 128×256; 6144³ 0.690 against 0.593, 10 against 9).
const WGMMA_WIDE_WEIGHT: u128 = 105;
/// Exact f32 products take 3xTF32 on `wgmma` from this many flops, where the time model of
/// `f32x3_path` says it wins.
const F32X3_MIN_FLOPS: f64 = (1u64 << 27) as f64;
/// The time model's rates (H100, sixteenth session): the FMA kernels' f32 flops at 4096–8192,
/// the 3xTF32 kernel's (its f32 flops, 110–123 TFLOP/s measured), a copy's bytes (read + write),
/// and the split's fixed cost (two more launches, the tensor maps).
const FMA_FLOPS_PER_S: f64 = 40e12;
const F32X3_FLOPS_PER_S: f64 = 115e12;
const COPY_BYTES_PER_S: f64 = 2.9e12;
const F32X3_FIXED_S: f64 = 8e-6;
/// The swapped 3xTF32 kernel's f32 flops (128×64 tiles, a k-step's twelve `wgmma` waited for
/// before the next one's fragments load): 76–86 TFLOP/s measured from 2048³ to 8192³ and at
/// (128, 8192, 8192) (eighteenth session, call F).
const F32X3_SWAPPED_FLOPS_PER_S: f64 = 80e12;
/// The TF32 layout model's rates (H100, eighteenth session): the K-major `wgmma` kernel's flops
/// per SM (~395 TFLOP/s over 132 SMs at 6144–8192), the swapped kernel's share of that rate
/// on its k-steps (its warpgroups cannot overlap consecutive k-steps), and the bytes a second its
/// transposed stores from registers write (8192×8192×128: 0.23 ms against the TMA stores' 0.13).
const TF32_SM_FLOPS_PER_S: f64 = 3.0e12;
const TF32_SWAPPED_EFFICIENCY: f64 = 0.88;
const TF32_SWAPPED_STORE_BYTES_PER_S: f64 = 1.2e12;

/// The split regime's time model (H100, thirtieth session: 90 bf16 products of 128-8192 rows and
/// 256-8192 columns, K of 1024-65536, each timed on every tile and slice count).
/// A launch takes `waves · (fill + k-steps · step)` on its tile, waves of blocks over the SMs
/// (the clusters of two that share B run only past one wave and where they take no more waves:
/// `launch_wgmma`; the fit counted them in half the SMs' slots), plus, split, the reduction's
/// fixed cost and the slices' f32 sums written and read again. `(tile, fill s, k-step s)`: the
/// 128×256 tile runs its k-steps at ~7.3 TFLOP/s an SM, the 128×192 at ~7.1, the 128×64 at ~4.0
/// (twice the operand bytes a flop) but fills and drains in a third of the time. The 256×128
/// tile is left out: it was never the fastest in the sweep.
/// On 49 shapes held out of the fit, its picks ran within 0.5% of the fastest configuration on
/// geometric mean (7.8% at worst); timed against the rules before it in the same call (with the
/// pairs' rule of `launch_wgmma`), 1.09× faster on geometric mean (1.68× at most, none slower
/// beyond the run-to-run spread), 0.89× cuBLAS where those reached 0.82× (perf-notes, thirtieth
/// session; the sweep in docs/wgmma-sweep-h100.csv, refitted by scripts/wgmma_model_fit.py).
const WGMMA_MODEL: [(usize, f64, f64); 3] =
    [(0, 13.9e-6, 578e-9), (WGMMA_N192_TILE, 11.45e-6, 442e-9), (WGMMA_SMALL_TILE, 4.84e-6, 265e-9)];
const WGMMA_SPLIT_FIXED_S: f64 = 8.0e-6;
const WGMMA_SPLIT_BYTES_PER_S: f64 = 2.8e12;

/// The 16-bit `wgmma` tile and split of K where the 128×256 tiles are fewer than the SMs and
/// K ≥ 1024: `(tile, (slices, k_chunk))` of the least time by `WGMMA_MODEL`, among unsplit launches
/// and splits into slices of at least 512 of k with at most two waves of blocks (the sweep timed
/// slices down to 256; none that short was the fastest). The 128×192 tile is left out where it
/// pads N by a tenth more than 256-wide tiles would (N = 256: a second column of tiles
/// two-thirds empty, 0.107 ms at (8192, 256, 8192) against 0.089-0.090 on the other tiles).
/// Elsewhere `None`.
fn wgmma_modeled(d: &Dims, dev: &DeviceFacts) -> Option<(usize, (usize, usize))> {
    if d.tiles(WGMMA_TILE) >= dev.sms || d.k < 2 * SPLIT_MIN_K {
        return None;
    }
    let bk = WGMMA_ROW_BYTES / 2;
    let mut best: Option<(f64, usize, (usize, usize))> = None;
    for (kind, fill, step) in WGMMA_MODEL {
        let (_, bn) = WGMMA_TILES[kind];
        if bn == WGMMA_TILES[WGMMA_N192_TILE].1 && 10 * d.padded_n(bn) > 11 * d.padded_n(WGMMA_TILE.1) {
            continue;
        }
        let tiles = d.tiles(WGMMA_TILES[kind]);
        for wanted in 1..=MAX_SLICES {
            let k_chunk = d.k.div_ceil(wanted).next_multiple_of(bk);
            let (slices, k_chunk) = if wanted == 1 { (1, d.k) } else { (d.k.div_ceil(k_chunk), k_chunk) };
            if slices > 1 && (k_chunk < SPLIT_MIN_K || tiles * slices > 2 * dev.sms) {
                break;
            }
            let waves = (tiles * slices).div_ceil(dev.sms);
            let mut time = waves as f64 * (fill + k_chunk.div_ceil(bk) as f64 * step);
            if slices > 1 {
                let bytes = (slices * 4 * 2 + 2) * d.m * d.n * d.batch;
                time += WGMMA_SPLIT_FIXED_S + bytes as f64 / WGMMA_SPLIT_BYTES_PER_S;
            }
            if best.is_none_or(|(least, ..)| time < least) {
                best = Some((time, kind, (slices, k_chunk)));
            }
        }
    }
    best.map(|(_, kind, split)| (kind, split))
}

/// The 16-bit `wgmma` tile and split of K, `(tile, (slices, k_chunk))`: `wgmma_modeled` where it
/// applies, else `wgmma_tile` and one wave of slices (`wgmma_split`).
fn wgmma_half_shape(d: &Dims, dev: &DeviceFacts) -> (usize, (usize, usize)) {
    wgmma_modeled(d, dev).unwrap_or_else(|| {
        let tile = wgmma_tile(d, dev);
        (tile, wgmma_split(d, d.tiles(WGMMA_TILES[tile]), WGMMA_ROW_BYTES / 2, dev))
    })
}

/// The `wgmma` tile (index into `WGMMA_TILES`) where `wgmma_modeled` does not apply (16-bit
/// products with at least a wave of 128×256 tiles, or K < 1024). Among the large ones, the one
/// that gives the SMs the least work: with at least a wave of tiles (or K too short to split),
/// the most any SM computes, ⌈tiles / SMs⌉ tiles; with fewer (split-K spreads them), the padded
/// output's area per SM. The 128×192 tile counts 8% more per element (it reads more operand bytes
/// per flop), 15% less where the output is stored from registers (`WGMMA_N192_WEIGHT_REGISTER_STORE`);
/// ties go to the smaller padded output, then to the earlier tile. Split, where another large
/// tile pads the output exactly as much, the 128×192 tile counts the same, and the one with fewer
/// slices goes first: each slice's f32 sums cross memory twice and each block's pipeline fill and
/// epilogue spread over a longer slice of K (H100, twenty-ninth session's call F, bf16 ms,
/// 128×192 in 5 slices against 128×256 or 256×128 in 7: Aᵀ·B (384, 1536, 16384) 0.058-0.059
/// against 0.064-0.065, (1536, 384, 16384) 0.058 against 0.066-0.067, A·B (768, 768, 32768)
/// 0.081-0.082 against 0.085-0.088). N = 384 fills two 192-wide tiles, where
/// 256-wide ones pad a third and 128-wide ones leave the second wave half empty. Where even that
/// one has tiles for at most a quarter of the SMs, the 128×64 tile if its blocks (slices
/// included) fill the SMs' waves at least as well: four times the tiles without splitting K (or
/// with fewer slices), so no f32 slices go through memory and no second kernel adds them (H100,
/// bf16 (128, 8192, 8192): 0.084 ms in 4 slices of 32 128×256 tiles, 0.068 ms in 128×64 tiles).
/// Not above a quarter: each block reads (128 + 64) rows of operands for 128×64 outputs, twice the
/// bytes per flop of the large tiles, and at (256, 8192, 8192) the 256 small tiles' L2 traffic
/// cost more than the 2 slices saved (0.090 → 0.123 ms). Not where the small tiles would fill
/// fewer SMs: the GPT's weight gradients, (384, 1536, 16384), are 72 small tiles (one block each)
/// against 18 large ones in 7 slices (126 blocks), and the GPT step took 8.94 ms against 8.1
/// (perf-notes). With at least a wave of 128×256 tiles, the 128×320 tile where `wide_pays`.
fn wgmma_tile(d: &Dims, dev: &DeviceFacts) -> usize {
    let tiles = |kind: usize| d.tiles(WGMMA_TILES[kind]);
    // Blocks of the plan `wgmma_plan` makes with tile `kind` (16-bit k-steps).
    let blocks = |kind: usize| tiles(kind) * wgmma_split(d, tiles(kind), WGMMA_ROW_BYTES / 2, dev).0;
    let padded = |kind: usize| tiles(kind) * WGMMA_TILES[kind].0 * WGMMA_TILES[kind].1;
    let cost = |kind: usize| {
        let (bm, bn) = WGMMA_TILES[kind];
        let tiles = tiles(kind);
        if tiles >= dev.sms || d.k < 2 * SPLIT_MIN_K {
            let weight = wave_weight(d, bn);
            (tiles.div_ceil(dev.sms) as u128 * (bm * bn * dev.sms) as u128 * weight, padded(kind))
        } else {
            let tie = (0..WGMMA_SMALL_TILE).any(|other| other != kind && padded(other) == padded(kind));
            let weight = if bn == 192 && !tie { 108 } else { 100 };
            (padded(kind) as u128 * weight, blocks(kind) / tiles)
        }
    };
    let large = (0..WGMMA_SMALL_TILE).min_by_key(|&kind| cost(kind)).unwrap_or(0);
    if tiles(0) >= dev.sms && wide_pays(d, large, dev) {
        return WGMMA_WIDE_TILE;
    }
    let (small_blocks, large_blocks) = (blocks(WGMMA_SMALL_TILE), blocks(large));
    // Busy fractions of the waves: blocks / (waves · SMs), compared without dividing.
    let fills_as_well =
        small_blocks * large_blocks.div_ceil(dev.sms) >= large_blocks * small_blocks.div_ceil(dev.sms);
    if 4 * tiles(large) <= dev.sms && fills_as_well {
        WGMMA_SMALL_TILE
    } else {
        large
    }
}

/// `wgmma_tile`'s weight per output element of a large 16-bit tile `bn` wide, where it runs whole
/// waves: the 128×192 tile reads more operand bytes per flop (108), less where the output is
/// stored from registers (`WGMMA_N192_WEIGHT_REGISTER_STORE`); the others 100.
fn wave_weight(d: &Dims, bn: usize) -> u128 {
    match bn {
        192 if !rows_are_vectors(d.n, DType::BF16) => WGMMA_N192_WEIGHT_REGISTER_STORE,
        192 => 108,
        _ => 100,
    }
}

/// Whether the 128×320 tile (unsplit, one `m64n256` and one `m64n64` a consumer) finishes before
/// the large tile `large` that `wgmma_tile` picked: each takes its waves of tiles, 1.25 tile-times
/// of 128×256 a tile for the wide one at `WGMMA_WIDE_WEIGHT`, the 128×192 tile at its weight, and
/// `large` only the last whole wave and its part-wave as a stream-K region where
/// `stream_k_region` runs one (pairs of blocks, half the SMs' worth at once). It takes the
/// products whose last wave of large tiles is part-full where its own waves end fuller (H100,
/// thirty-third session, call A, bf16 against the plan before: (3136, 3200, 8064) 0.90×,
/// (1152, 4096, 8192) 0.89×, (640, 8192, 8192) 0.82× the time, the model's 0.875 / 0.81 / 0.81;
/// on 16 other products it leaves to the plan, it was 1.00-1.34× slower, the model 1.00-1.31×).
fn wide_pays(d: &Dims, large: usize, dev: &DeviceFacts) -> bool {
    let (bm, bn) = WGMMA_TILES[large];
    let weight = wave_weight(d, bn);
    // Tile-times of the large tile: its waves, or the whole ones before a region and the region.
    let resident = (dev.sms / 2).max(1);
    let units = d.m.div_ceil(bm).div_ceil(2) * d.n.div_ceil(bn);
    let steps = d.k.div_ceil(WGMMA_ROW_BYTES / 2);
    let region = if d.batch == 1 { stream_k_region(units, resident, steps, 2) } else { 0 };
    let large_time = if region > 0 {
        let spread = stream_k_spread(region, resident, steps);
        ((units - region) / resident * steps + spread) as u128 * (bm * bn) as u128 * weight
    } else {
        d.tiles((bm, bn)).div_ceil(dev.sms) as u128 * steps as u128 * (bm * bn) as u128 * weight
    };
    let (wm, wn) = WGMMA_TILES[WGMMA_WIDE_TILE];
    let wide_waves = d.tiles((wm, wn)).div_ceil(dev.sms) as u128;
    wide_waves * steps as u128 * (wm * wn) as u128 * WGMMA_WIDE_WEIGHT < large_time
}

/// A stream-K region's k-steps run ~1.3× as long as a whole wave's (not measured why; likely its
/// clusters, no longer sweeping K in step, share fewer of the operands' bytes in L2, and its
/// kernels spill more registers than the plain ones), plus a fixed overhead in
/// k-steps of its tile (a split tile's f32 sums stored, waited for and added; extra fills). Fitted
/// on 30 bf16 products of 44-128 k-steps (H100, thirty-first session: overhead 0.29 × the region's
/// steps + 5, rms 13 steps).
const STREAM_K_SLOWDOWN: (usize, usize) = (13, 10);
const STREAM_K_OVERHEAD_STEPS: usize = 5;

/// The k-steps a stream-K region of `region` units of `steps` k-steps takes spread over `resident`
/// clusters: its share at the region's slower rate, plus its overhead.
fn stream_k_spread(region: usize, resident: usize, steps: usize) -> usize {
    let (slower, base) = STREAM_K_SLOWDOWN;
    (slower * region * steps).div_ceil(base * resident) + STREAM_K_OVERHEAD_STEPS
}

/// The stream-K region of a `wgmma` launch of `units` work units of `steps` k-steps each on
/// `resident` persistent clusters of `cluster` blocks: its units (the last wave and the part-wave
/// after it), or 0. Beyond whole waves, a part-wave of units keeps a few clusters busy while the
/// rest idle; spread with the wave before it evenly over every cluster, k-step by k-step, it takes
/// (resident + part) / resident units' time at the region's slower rate and its overhead, against
/// two whole units': it pays where the part-wave is under about half a wave (measured: part-waves
/// of 0.06-0.52 waves 1.03-1.10× faster, 0.55-0.82 waves 0.86-0.98×, where the rate's loss
/// outweighs the idle SMs' gain).
fn stream_k_region(units: usize, resident: usize, steps: usize, cluster: usize) -> usize {
    let (waves, part) = (units / resident.max(1), units % resident.max(1));
    let region = resident + part;
    if waves == 0 || part == 0 || region * cluster * WGMMA_CONSUMERS > STREAM_K_FLAGS {
        return 0;
    }
    if stream_k_spread(region, resident, steps) < 2 * steps {
        region
    } else {
        0
    }
}

/// 16-bit outputs whose rows are not 16-byte multiples (N not a multiple of 8) are stored from
/// registers, not through TMA (`launch_wgmma`'s `tma_store`); there the 128×192 tile counts 85 per element against the large
/// tiles' 100 (its register epilogue holds 96 sums a thread against 128): on 20 such products with
/// at least a wave of tiles (H100, thirty-first session, call H, every tile forced, best of two
/// runs), 128×192 ran 4-22% faster than the 128×256 or 256×128 tile the 108 weight took on 12 of
/// the 13 it changes, 8% slower on (8026, 5058, 3635); 1.07× on geometric mean.
const WGMMA_N192_WEIGHT_REGISTER_STORE: u128 = 85;

/// A `wgmma` plan: split K when the tiles leave SMs idle (one block per SM fits).
fn wgmma_plan(d: &Dims, path: GemmPath, dtype: DType, dev: &DeviceFacts) -> GemmPlan {
    let tile = match path {
        GemmPath::Wgmma { tile, .. } => WGMMA_TILES[tile],
        GemmPath::F32x3Wgmma => WGMMA_TILES[F32X3_TILE],
        GemmPath::F32x3WgmmaSwapped | GemmPath::WgmmaSwapped => WGMMA_TILES[WGMMA_SMALL_TILE],
        GemmPath::Tf32WgmmaSwapped { tile } => WGMMA_TILES[tile],
        _ => WGMMA_TILE,
    };
    let (slices, k_chunk) = wgmma_split(d, d.tiles(tile), WGMMA_ROW_BYTES / dtype.size_bytes(), dev);
    GemmPlan { path, slices, k_chunk }
}

/// A `wgmma` plan's split of K over `tiles` output tiles in k-steps of `bk`: `(slices, k_chunk)`.
fn wgmma_split(d: &Dims, tiles: usize, bk: usize, dev: &DeviceFacts) -> (usize, usize) {
    if tiles < dev.sms && d.k >= 2 * SPLIT_MIN_K {
        split_k(d.k, tiles, dev.sms, (bk, SPLIT_MIN_K))
    } else {
        (1, d.k.max(1))
    }
}

/// Pick the kernel, tile and split-K factor of a GEMM; the rules are the module documentation's
/// table, in its order.
fn plan(d: &Dims, o: &Operands, dev: &DeviceFacts) -> GemmPlan {
    let whole = |path| GemmPlan { path, slices: 1, k_chunk: d.k.max(1) };
    let small_dims = d.m.max(d.n).max(d.k) < 1 << 31;
    // Whole 16-byte vectors of both operands: rows 0 and 1 (TMA's 16-byte rows, and batches,
    // whose strides M·K and K·N are then whole vectors too).
    let vec = vector_elems(o.dtype);
    let vectors = |len| rows_are_vectors(len, o.dtype);
    let mma_fits = vectors(d.k) && (o.transpose_b || vectors(d.n)) && o.aligned_a && o.aligned_b;
    // Row 0: f32 few rows fed by TMA.
    let tma_pays = d.m > GEMV_ROWS_SMALL || d.k.saturating_mul(d.n) >= GEMV_TMA_MIN_B;
    if o.dtype == DType::F32
        && tma_pays
        && d.m <= GEMV_ROWS
        && !o.transpose_a
        && mma_fits
        && dev.sm90a
        && d.k > 0
        && small_dims
    {
        let strips = d.n.div_ceil(GEMV_TMA_COLS) * d.batch;
        let wanted = (dev.sms / strips).min(d.k / SPLIT_MIN_K).clamp(1, GEMV_TMA_CLUSTER_MAX);
        let k_chunk = d.k.div_ceil(wanted).next_multiple_of(GEMV_TMA_STAGE_K);
        return GemmPlan { path: GemmPath::GemvTma, slices: d.k.div_ceil(k_chunk), k_chunk };
    }
    // Row 1, on tensor cores. f32 (3xTF32) only where it measured faster than the f32-pipe
    // kernels: B [N, K] and more than 4 rows (perf-notes).
    let mma_pays = o.dtype != DType::F32 || (o.transpose_b && d.m > GEMV_ROWS_SMALL);
    if d.m <= GEMV_ROWS && !o.transpose_a && mma_fits && mma_pays && d.k > 0 {
        let mut warps = GEMV_MMA_THREADS / 32;
        let blocks = gemv_mma_blocks_x(d.n, warps) * d.batch;
        let (mut slices, mut k_chunk) =
            split_k(d.k, blocks, GEMV_MMA_BLOCKS_PER_SM * dev.sms, (32, SPLIT_MIN_K));
        if blocks * slices < dev.sms / 2 && dev.clusters {
            // Too small to fill the SMs: one-warp blocks and shorter slices in clusters.
            let blocks = gemv_mma_blocks_x(d.n, 1) * d.batch;
            let target = GEMV_MMA_BLOCKS_PER_SM * warps * dev.sms;
            let small = split_k(d.k, blocks, target, (32, GEMV_MMA_CLUSTER_MIN_K));
            if small.0 <= GEMV_MMA_CLUSTER_MAX {
                (warps, slices, k_chunk) = (1, small.0, small.1);
            }
        }
        let clustered = slices > 1 && slices <= GEMV_MMA_CLUSTER_MAX && dev.clusters;
        return GemmPlan { path: GemmPath::GemvMma { clustered, warps }, slices, k_chunk };
    }
    if d.m <= GEMV_ROWS && !o.transpose_a {
        let rows = if d.m <= GEMV_ROWS_SMALL { GEMV_ROWS_SMALL } else { GEMV_ROWS };
        let blocks = gemv_blocks_x(d.n, o.dtype, o.transpose_b) * d.batch;
        let (slices, k_chunk) =
            split_k(d.k, blocks, GEMV_BLOCKS_PER_SM * dev.sms, (32 * vec, SPLIT_MIN_K.max(32 * vec)));
        return GemmPlan { path: GemmPath::Gemv { rows }, slices, k_chunk };
    }
    if o.dtype != DType::F32 {
        // TMA: rows and batches start on 16-byte boundaries.
        let (lda, ldb) = (if o.transpose_a { d.m } else { d.k }, if o.transpose_b { d.k } else { d.n });
        let (a_tma, b_tma) = (vectors(lda) && o.aligned_a, vectors(ldb) && o.aligned_b);
        let tma = d.k > 0 && a_tma && b_tma && small_dims;
        // Staging copies each unaligned operand once more (`pad_rows_b16`); wgmma then runs at 4-5×
        // the `mma.sync` kernels' rate on such shapes (bf16 (3001, 2999, 3003): 0.19 ms staged,
        // 1.12 ms on `mma.sync`). The copies grow with the bytes copied and the saving with the
        // flops: staging pays from 24 flops a byte copied (ms on `mma.sync` -> staged, bf16 unless
        // named: (1000, 1001, 4096) at 1000 a byte 0.120 -> 0.047, (128, 3001, 3003) at 122 0.065
        // -> 0.048, (64, 3001, 3003) at 63 0.053 -> 0.042, (75, 75, 65535) at 37 0.129 -> 0.046,
        // (32, 3001, 3003) at 32 0.047 -> 0.039, f16 (24, 8001, 8001) at 24 0.265 -> 0.170; (96,
        // 96, 30001) at 48 level; (40, 40, 32001) at 20 and (32, 32, 65535) at 16 3-6% slower;
        // twenty-seventh session). Thin outputs and small products stage too as long as they copy
        // no more than the product reads in place (or a few MB), as measured with the driver's
        // slower 2-D copy: bf16 (73, 384, 16384) with A transposed 0.037 -> 0.033 ms, (257, 384,
        // 16384) 0.075 -> 0.047, (8191, 75, 1024) 0.042 -> 0.026, 300³ 0.034 -> 0.026, (73, 384,
        // 2048) level (perf-notes, twenty-sixth session). K must be long enough for the two
        // launches.
        let operand_bytes = |rows: usize, batched: bool| {
            rows * d.k * o.dtype.size_bytes() * if batched { d.batch } else { 1 }
        };
        let (a_bytes, b_bytes) = (operand_bytes(d.m, o.batched_a), operand_bytes(d.n, o.batched_b));
        let copied = if a_tma { 0 } else { a_bytes } + if b_tma { 0 } else { b_bytes };
        let in_place = a_bytes + b_bytes - copied;
        let flops = 2 * (d.m * d.n) as u128 * (d.k * d.batch) as u128;
        let stage = d.k >= STAGE_MIN_K
            && (flops >= (STAGE_FLOPS_PER_BYTE * copied) as u128 || copied <= STAGE_COPY_BYTES.max(in_place));
        if dev.sm90a && d.k > 0 && small_dims && (tma || stage) {
            let (tile, (slices, k_chunk)) = wgmma_half_shape(d, dev);
            if tma && half_swap_pays(d, o, tile, dev) {
                return wgmma_plan(&d.swapped(), GemmPath::WgmmaSwapped, o.dtype, dev);
            }
            return GemmPlan { path: GemmPath::Wgmma { tile, staged: !tma }, slices, k_chunk };
        }
        let tiles = d.tiles(MMA_TILE);
        if tiles < MMA_HALF_PER_SM * dev.sms && d.k >= 2 * SPLIT_MIN_K {
            let (slices, k_chunk) = split_k(d.k, tiles, MMA_HALF_PER_SM * dev.sms, (MMA_BK, SPLIT_MIN_K));
            return GemmPlan { path: GemmPath::HalfMma, slices, k_chunk };
        }
        return whole(GemmPath::HalfMma);
    }
    if d.m * d.n <= TINY_MAX_OUTPUTS && d.k <= GEMM_TINY_MAX_K {
        return whole(GemmPath::Tiny);
    }
    if !o.tf32 && dev.sm90a {
        match f32x3_path(d, o, dev) {
            Some(GemmPath::F32x3WgmmaSwapped) => {
                return wgmma_plan(&d.swapped(), GemmPath::F32x3WgmmaSwapped, o.dtype, dev)
            }
            Some(path) => return wgmma_plan(d, path, o.dtype, dev),
            None => {}
        }
    }
    if o.tf32 {
        if dev.sm90a && tf32_swapped_fits(d, o, dev) {
            let swapped = d.swapped();
            let path = GemmPath::Tf32WgmmaSwapped { tile: tf32_swapped_tile(&swapped, dev) };
            return wgmma_plan(&swapped, path, o.dtype, dev);
        }
        return if dev.sm90a && k_major_fits(d, o) {
            wgmma_plan(d, GemmPath::Tf32Wgmma, o.dtype, dev)
        } else {
            whole(GemmPath::Tf32Mma)
        };
    }
    let large = d.tiles(GEMM_TILE_LARGE);
    if large < dev.sms && d.k >= 2 * SPLIT_MIN_K {
        let (slices, k_chunk) = split_k(d.k, large, SIMT_LARGE_PER_SM * dev.sms, (GEMM_BK, SPLIT_MIN_K));
        if slices > 1 {
            return GemmPlan { path: GemmPath::Simt { tile: GEMM_TILE_LARGE }, slices, k_chunk };
        }
    }
    whole(GemmPath::Simt { tile: simt_tile(d, dev) })
}

/// Whether the swapped TF32 kernel reads A `[M, K]` and B `[K, N]` in place (rows of 16-byte
/// multiples from aligned starts; batched or not: the maps are 3-D) and pays: batched operands
/// always (the transposes exist for 2-D operands only), else where `tf32_swap_pays`.
fn tf32_swapped_fits(d: &Dims, o: &Operands, dev: &DeviceFacts) -> bool {
    swapped_layout(d, o) && (o.batched_a || o.batched_b || tf32_swap_pays(d, dev))
}

/// Whether the swapped kernels read A `[M, K]` and B `[K, N]` in place: neither transposed, rows
/// of 16-byte multiples from aligned starts (batched or not: the maps are 3-D).
fn swapped_layout(d: &Dims, o: &Operands) -> bool {
    !o.transpose_a
        && !o.transpose_b
        && d.k > 0
        && d.k % 4 == 0
        && d.n % 4 == 0
        && o.aligned_a
        && o.aligned_b
        && d.m.max(d.n).max(d.k) < 1 << 31
}

/// Whether C = A·B (neither transposed, 2-D) runs faster swapped than as the K-major kernel on a
/// transposed copy of B, by a model of both: each kernel's waves of tiles (split-K: the product
/// spread over the SMs) at `TF32_SM_FLOPS_PER_S` (the swapped one at
/// `TF32_SWAPPED_EFFICIENCY` of it), its output's bytes (TMA stores at copy speed, the swapped
/// kernel's at `TF32_SWAPPED_STORE_BYTES_PER_S`), and for the other B's transposed copy (8 bytes a
/// value at copy speed). Measured beside it (H100, TF32 nn, ms, swapped / transposed): 1024³
/// 0.030 / 0.040; 2048³ 0.095 / 0.067 (Cᵀ's 176 tiles of 128×192 take two waves, the 128 of
/// 128×256 one); 3000³ 0.207 / 0.232; 4096³ 0.463 / 0.400; 8192³ 3.09 / 3.20; (128, 8192, 8192)
/// 0.114 / 0.131 before its copy; (8192, 8192, 128) 0.230 / 0.130.
fn tf32_swap_pays(d: &Dims, dev: &DeviceFacts) -> bool {
    let product = |d: &Dims, tile: (usize, usize)| {
        let tiles = d.m.div_ceil(tile.0) * d.n.div_ceil(tile.1);
        let (slices, _) = wgmma_split(d, tiles, WGMMA_ROW_BYTES / 4, dev);
        let waves = (tiles * slices).div_ceil(dev.sms) as f64;
        waves * 2.0 * (tile.0 * tile.1) as f64 * d.k.div_ceil(slices) as f64 / TF32_SM_FLOPS_PER_S
    };
    let out_bytes = 4.0 * (d.m * d.n) as f64;
    let transposed = product(d, WGMMA_TILE) + (8.0 * (d.k * d.n) as f64 + out_bytes) / COPY_BYTES_PER_S;
    let swapped_dims = d.swapped();
    let tile = WGMMA_TILES[tf32_swapped_tile(&swapped_dims, dev)];
    let swapped =
        product(&swapped_dims, tile) / TF32_SWAPPED_EFFICIENCY + out_bytes / TF32_SWAPPED_STORE_BYTES_PER_S;
    swapped < transposed
}

/// Whether 16-bit A·B that TMA reads in place (tile `tile` of `WGMMA_TILES`) runs swapped
/// (dispatch row 2a): neither operand transposed, one operand streamed past at most 128 rows or
/// columns of the other on the 128×64 tile. Cᵀ = Bᵀ·Aᵀ then runs on the kernel that reads A
/// K-major as its B, where the swapped product takes that tile too, with no more tiles and no
/// more passes over the streamed operand (each tile of the other's dimension is one pass). Ms,
/// bf16 unless named, swapped against not, twenty-ninth session's call D (after the producer's
/// path was cut, which took most of what the twenty-eighth session measured as the cost of an
/// N-major B): (32, 8192, 8192) 0.061-0.062 against 0.069-0.071, (64, 8192, 8192) 0.063 against
/// 0.065-0.068, (64, 4096, 4096) 0.023 against 0.029, (4096, 96, 4096) 0.030 against 0.031-0.033;
/// level at (8192, 128, 8192) (0.062-0.063 against 0.060-0.069, f16 the same) and (8296, 128,
/// 1032); not swapped: (128, 8192, 8192), B twice (0.058-0.071 in the twenty-eighth session
/// against 0.056-0.057 now unswapped), and (8192, 64, 8192), twice the tiles.
fn half_swap_pays(d: &Dims, o: &Operands, tile: usize, dev: &DeviceFacts) -> bool {
    let (bm, bn) = WGMMA_TILES[WGMMA_SMALL_TILE];
    let tiles = |d: &Dims| d.m.div_ceil(bm) * d.n.div_ceil(bn);
    let passes = |d: &Dims| if d.m >= d.n { d.n.div_ceil(bn) } else { d.m.div_ceil(bm) };
    let swapped = d.swapped();
    d.m.min(d.n) <= bm
        && !o.transpose_a
        && !o.transpose_b
        && tile == WGMMA_SMALL_TILE
        && wgmma_half_shape(&swapped, dev).0 == tile
        && tiles(&swapped) <= tiles(d)
        && passes(&swapped) <= passes(d)
}

/// The swapped TF32 kernel's tile on Cᵀ (`d` swapped): 128×64 where 192-wide tiles would pad
/// Cᵀ's width by a quarter more than 64-wide ones (Cᵀ at most 64 wide, or 129-256: a caller's A
/// of a few hundred rows), or where the 128×192 tiles would occupy at most a quarter of the SMs
/// and K is too short to split; else 128×192 (its 96 accumulators leave room for two k-steps of A
/// fragments in flight; 128×256's do not). H100, thirtieth session's call J, TF32 A·B, ms, the
/// rule before (128×192 unless Cᵀ is at most 64 wide or its tiles a quarter of the SMs, whatever
/// K) against this one, alternated: (128, 8192, 8192) 0.115 → 0.104, (256, 8192, 8192) 0.218 →
/// 0.193, (256, 4096, 4096) 0.062 → 0.057, split on 128×192 (1152, 384, 16384) 0.105 → 0.066 and
/// (768, 768, 32768) 0.205 → 0.127; level at (200, 8192, 4096) and, on 128×192 both ways, (512,
/// 8192, 8192) (0.370 on 128×64 in call I) and the squares.
fn tf32_swapped_tile(d: &Dims, dev: &DeviceFacts) -> usize {
    let padded = |kind: usize| d.padded_n(WGMMA_TILES[kind].1);
    let few = 4 * d.tiles(WGMMA_TILES[WGMMA_N192_TILE]) <= dev.sms && d.k < 2 * SPLIT_MIN_K;
    if 4 * padded(WGMMA_N192_TILE) > 5 * padded(WGMMA_SMALL_TILE) || few {
        WGMMA_SMALL_TILE
    } else {
        WGMMA_N192_TILE
    }
}

/// Whether both operands can be made K-major for the `wgmma` TF32 kernel (rows of 16-byte
/// multiples, first elements aligned): the transposes exist for 2-D operands only.
fn k_major_fits(d: &Dims, o: &Operands) -> bool {
    f32x3_fits(d, o) && d.k % 4 == 0 && (o.transpose_a || o.aligned_a) && (!o.transpose_b || o.aligned_b)
}

/// Whether the 3xTF32 kernel can run: the operands that are not K-major are 2-D (the
/// transposes exist for those only); rows TMA cannot read are copied with padding.
fn f32x3_fits(d: &Dims, o: &Operands) -> bool {
    let transposes = o.transpose_a || !o.transpose_b;
    let batched_transpose = (o.transpose_a && o.batched_a) || (!o.transpose_b && o.batched_b);
    !batched_transpose
        && d.k > 0
        && (!transposes || Tensor::transpose_fits(d.k))
        && d.m.max(d.n).max(d.k) < 1 << 31
}

/// A K-major f32 operand TMA reads in place: rows of 16-byte multiples from an aligned start.
/// The plan's cost model and the launch ask the same question (`aligned`: the first element's
/// address is a multiple of 16).
fn in_place_k_major(k: usize, aligned: bool) -> bool {
    k % 4 == 0 && aligned
}

/// Exact f32 on 3xTF32 `wgmma`, if at all: forced on (`FERROCUDA_MATMUL_F32X3=1`), the swapped
/// kernel where the layout lets it run, else the K-major one where it fits; by size, from
/// `F32X3_MIN_FLOPS`, whichever of the FMA kernels, the K-major and the swapped kernel the model
/// gives the shortest time. The FMA kernels run at `FMA_FLOPS_PER_S` where their 128×128 tiles
/// fill the SMs or K splits (as `plan` does from 2·`SPLIT_MIN_K`), else at the share of the SMs
/// the tiles fill (512³: 16 tiles, 0.050 ms measured, the model 0.055). The K-major kernel: the
/// splits' bytes (a K-major operand read in place: read, low part written, 8 bytes a value;
/// another: read, high and low parts written, 12) at copy speed, then the product at the slower
/// of its flop rate and reading both parts of both operands once. Measured beside it (H100,
/// same call): (8192, 8192, 128) 0.397 ms on 3xTF32 against 0.471 on FMA, the model 0.39 /
/// 0.43; (128, 8192, 8192) with B to transpose 0.502 against 0.465, the model 0.48 / 0.43; 1024³
/// 0.051 against 0.072, the model 0.034 / 0.054; 512³ 0.039 against 0.050, the model 0.012 /
/// 0.055 (twentieth session: the FMA kernels' time also counts their tiles' padding and the
/// output's bytes; the stem's col2im product (147, 12544, 64) × 32 images: 0.362 ms on the
/// swapped kernel against 0.494 on FMA, the model 0.30 / 0.41). The swapped kernel splits only
/// A (8 bytes a value) and reads B once, its product at `F32X3_SWAPPED_FLOPS_PER_S` (128×64
/// tiles, k-steps not overlapped), its output's bytes at `TF32_SWAPPED_STORE_BYTES_PER_S`.
fn f32x3_path(d: &Dims, o: &Operands, dev: &DeviceFacts) -> Option<GemmPath> {
    let (swapped, k_major) = (swapped_layout(d, o), f32x3_fits(d, o));
    match o.f32x3 {
        Some(false) => return None,
        Some(true) if swapped => return Some(GemmPath::F32x3WgmmaSwapped),
        Some(true) => return k_major.then_some(GemmPath::F32x3Wgmma),
        None => {}
    }
    let flops = 2.0 * (d.batch * d.m * d.n) as f64 * d.k as f64;
    if flops < F32X3_MIN_FLOPS || !(swapped || k_major) {
        return None;
    }
    let per_value = |in_place: bool| if in_place { 8.0 } else { 12.0 };
    let batches = |batched: bool| if batched { d.batch } else { 1 } as f64;
    let (a_values, b_values) =
        ((d.m * d.k) as f64 * batches(o.batched_a), (d.k * d.n) as f64 * batches(o.batched_b));
    let split_bytes = per_value(!o.transpose_a && in_place_k_major(d.k, o.aligned_a)) * a_values
        + per_value(o.transpose_b && in_place_k_major(d.k, o.aligned_b)) * b_values;
    let product = (flops / F32X3_FLOPS_PER_S).max(8.0 * (a_values + b_values) / COPY_BYTES_PER_S);
    let k_major_s = F32X3_FIXED_S + split_bytes / COPY_BYTES_PER_S + product;
    let swapped_product =
        (flops / F32X3_SWAPPED_FLOPS_PER_S).max(4.0 * (2.0 * a_values + b_values) / COPY_BYTES_PER_S);
    let swapped_s = F32X3_FIXED_S
        + 8.0 * a_values / COPY_BYTES_PER_S
        + swapped_product
        + 4.0 * flops / (2.0 * d.k as f64) / TF32_SWAPPED_STORE_BYTES_PER_S;
    let tiles = d.m.div_ceil(GEMM_TILE_LARGE.0) * d.n.div_ceil(GEMM_TILE_LARGE.1) * d.batch;
    let fill = if d.k >= 2 * SPLIT_MIN_K { 1.0 } else { (tiles as f64 / dev.sms as f64).min(1.0) };
    // The FMA kernels compute whole tiles and write their output besides: at K = 64 and M = 147
    // (a convolution stem's columns, 32 images) 0.494 ms measured against 0.19 from the flops.
    let tiled = (tiles * GEMM_TILE_LARGE.0 * GEMM_TILE_LARGE.1) as f64 / (d.batch * d.m * d.n) as f64;
    let fma_s =
        flops * tiled / (FMA_FLOPS_PER_S * fill) + 4.0 * (d.batch * d.m * d.n) as f64 / COPY_BYTES_PER_S;
    let candidates =
        [(swapped, swapped_s, GemmPath::F32x3WgmmaSwapped), (k_major, k_major_s, GemmPath::F32x3Wgmma)];
    candidates
        .into_iter()
        .filter(|&(fits, time, _)| fits && time < fma_s)
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .map(|(_, _, path)| path)
}

/// `FERROCUDA_MATMUL_F32X3`: `0` keeps exact f32 on the FMA kernels, `1` takes 3xTF32 at any
/// size where it can run (tests); otherwise by size. Read at each call, so that a test may
/// switch it.
fn f32x3_setting() -> Option<bool> {
    match std::env::var("FERROCUDA_MATMUL_F32X3").as_deref() {
        Ok("0") => Some(false),
        Ok("1") => Some(true),
        _ => None,
    }
}

/// The SIMT tile: of the tiles whose grids give every SM a block, the one whose busiest SM has
/// the least work (⌈tiles / SMs⌉ tiles, weighted by the tile's measured time per output,
/// `SIMT_COST`: the wide tile's last wave can cost more than its faster mainloop saves, and a
/// smaller tile's padding less than its slower mainloop costs), among the wide and large tiles
/// with K ≥ 1024 and the large, medium and small ones with K shorter (the wide tile's epilogue,
/// not overlapped, halves its rate at K = 256); where no grid fills the SMs, the medium tile if
/// its grid does, else the small one.
fn simt_tile(d: &Dims, dev: &DeviceFacts) -> (usize, usize) {
    let cost =
        |(tile, weight): ((usize, usize), usize)| d.tiles(tile).div_ceil(dev.sms) * tile.0 * tile.1 * weight;
    let candidates = if d.k < SIMT_WIDE_MIN_K { 1..4 } else { 0..2 };
    SIMT_TILES[candidates.clone()]
        .iter()
        .copied()
        .zip(SIMT_COST[candidates].iter().copied())
        .filter(|&(tile, _)| d.tiles(tile) >= dev.sms)
        .min_by_key(|&c| cost(c))
        .map(|(tile, _)| tile)
        .unwrap_or(if d.tiles(GEMM_TILE_MEDIUM) >= dev.sms { GEMM_TILE_MEDIUM } else { GEMM_TILE_SMALL })
}

/// The arguments of the mma.sync and SIMT GEMMs over elements `E`: a, b, c, bias, out, m, n, k,
/// the three batch strides, alpha, beta, the activation.
type GemmArgs<E> = (
    DevPtr<E>,
    DevPtr<E>,
    DevPtr<E>,
    DevPtr<E>,
    DevPtrMut<E>,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    f32,
    f32,
    u32,
);

/// The SIMT GEMMs' arguments: [`GemmArgs`] with `k_chunk` after k.
type SimtArgs = (
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    f32,
    f32,
    u32,
);

/// The 16-bit mma.sync GEMMs' arguments: [`GemmArgs`] with `k_chunk` after k and the split-K
/// workspace (null: none) last.
type HalfArgs = (
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtrMut<u16>,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    f32,
    f32,
    u32,
    DevPtrMut<f32>,
);

/// An mma.sync or SIMT GEMM kernel on f32 or 16-bit buffers.
enum GemmKernel {
    SimtF32(Kernel<SimtArgs>),
    F32(Kernel<GemmArgs<f32>>),
    Half(Kernel<HalfArgs>),
}

/// `[A transposed][B transposed]`.
type ByTranspose<A> = [[Kernel<A>; 2]; 2];

/// The largest grid y and z of a launch (the batch is the grid's z in every GEMM kernel).
const MAX_GRID_YZ: usize = 65_535;

/// `[A transposed][B transposed]`.
const TINY_F32_KERNELS: ByTranspose<SimtArgs> = [
    [kernels::gemm_f32_tiny_nn, kernels::gemm_f32_tiny_nt],
    [kernels::gemm_f32_tiny_tn, kernels::gemm_f32_tiny_tt],
];

/// The SIMT tiles, largest first.
const SIMT_TILES: [(usize, usize); 4] = [GEMM_TILE_WIDE, GEMM_TILE_LARGE, GEMM_TILE_MEDIUM, GEMM_TILE_SMALL];

/// `[tile size (as SIMT_TILES)][A transposed][B transposed]`.
const SIMT_F32_KERNELS: [ByTranspose<SimtArgs>; 4] = [
    [
        [kernels::gemm_f32_wide_nn, kernels::gemm_f32_wide_nt],
        [kernels::gemm_f32_wide_tn, kernels::gemm_f32_wide_tt],
    ],
    [
        [kernels::gemm_f32_large_nn, kernels::gemm_f32_large_nt],
        [kernels::gemm_f32_large_tn, kernels::gemm_f32_large_tt],
    ],
    [
        [kernels::gemm_f32_medium_nn, kernels::gemm_f32_medium_nt],
        [kernels::gemm_f32_medium_tn, kernels::gemm_f32_medium_tt],
    ],
    [
        [kernels::gemm_f32_small_nn, kernels::gemm_f32_small_nt],
        [kernels::gemm_f32_small_tn, kernels::gemm_f32_small_tt],
    ],
];

/// The few-row kernels' arguments over elements `E`: a, b, c, bias, out, the workspace, m, n,
/// k, k_chunk, the three batch strides, alpha, beta, the activation.
type GemvArgs<E> = (
    DevPtr<E>,
    DevPtr<E>,
    DevPtr<E>,
    DevPtr<E>,
    DevPtrMut<E>,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    f32,
    f32,
    u32,
);

/// `gemv_mma_*` by `transpose_b` (f32 with B `[K, N]` is never launched: the plan keeps it on
/// `gemv_*`).
const GEMV_MMA_KERNELS: [ByDType<GemvArgs<f32>, GemvArgs<u16>>; 2] = [
    ByDType { f32: kernels::gemv_f32_nn_r16, f16: kernels::gemv_mma_f16_nn, bf16: kernels::gemv_mma_bf16_nn },
    ByDType { f32: kernels::gemv_mma_f32_nt, f16: kernels::gemv_mma_f16_nt, bf16: kernels::gemv_mma_bf16_nt },
];

/// `[up to 16 rows][B transposed]`.
const GEMV_KERNELS: [[ByDType<GemvArgs<f32>, GemvArgs<u16>>; 2]; 2] = [
    [
        ByDType {
            f32: kernels::gemv_f32_nn_r4,
            f16: kernels::gemv_f16_nn_r4,
            bf16: kernels::gemv_bf16_nn_r4,
        },
        ByDType {
            f32: kernels::gemv_f32_nt_r4,
            f16: kernels::gemv_f16_nt_r4,
            bf16: kernels::gemv_bf16_nt_r4,
        },
    ],
    [
        ByDType {
            f32: kernels::gemv_f32_nn_r16,
            f16: kernels::gemv_f16_nn_r16,
            bf16: kernels::gemv_bf16_nn_r16,
        },
        ByDType {
            f32: kernels::gemv_f32_nt_r16,
            f16: kernels::gemv_f16_nt_r16,
            bf16: kernels::gemv_bf16_nt_r16,
        },
    ],
];

/// The split-K reduction's arguments over elements `E`: the workspace, c, bias, out, m, n,
/// slices, stride_c, alpha, beta, the activation.
type ReduceArgs<E> =
    (DevPtr<f32>, DevPtr<E>, DevPtr<E>, DevPtrMut<E>, usize, usize, usize, usize, f32, f32, u32);

const REDUCE_KERNELS: ByDType<ReduceArgs<f32>, ReduceArgs<u16>> =
    ByDType { f32: kernels::gemm_reduce_f32, f16: kernels::gemm_reduce_f16, bf16: kernels::gemm_reduce_bf16 };

/// `[f16, bf16][A transposed][B transposed]`.
const HALF_KERNELS: [ByTranspose<HalfArgs>; 2] = [
    [[kernels::gemm_f16_nn, kernels::gemm_f16_nt], [kernels::gemm_f16_tn, kernels::gemm_f16_tt]],
    [[kernels::gemm_bf16_nn, kernels::gemm_bf16_nt], [kernels::gemm_bf16_tn, kernels::gemm_bf16_tt]],
];

/// `[A transposed][B transposed]`.
const TF32_KERNELS: ByTranspose<GemmArgs<f32>> =
    [[kernels::gemm_tf32_nn, kernels::gemm_tf32_nt], [kernels::gemm_tf32_tn, kernels::gemm_tf32_tt]];

/// The `wgmma` kernels' arguments over elements `E`: the tensor maps, c, bias, out, m, n, k,
/// stride_c, alpha, beta, the activation, whether A and B are batched, k-steps per slice, the
/// split-K workspace (null: none), batch × slices, whether the output goes by TMA store, the
/// cluster size, the stream-K region's units and its flags.
type WgmmaArgs<E> = (
    TensorMaps,
    DevPtr<E>,
    DevPtr<E>,
    DevPtrMut<E>,
    usize,
    usize,
    usize,
    usize,
    f32,
    f32,
    u32,
    u32,
    u32,
    usize,
    DevPtrMut<f32>,
    usize,
    u32,
    u32,
    u32,
    DevPtrMut<u32>,
);

/// A `wgmma` kernel of either element width.
#[derive(Clone, Copy)]
enum WgmmaKernel {
    Tf32(Kernel<WgmmaArgs<f32>>),
    Half(Kernel<WgmmaArgs<u16>>),
}

/// Clusters of two blocks of `kernel` (launch shape `cfg`, the same for every `wgmma` kernel)
/// the device runs at once, asked of the driver once per kernel and device (the answer depends
/// on the kernel's registers); 0 where it runs none or the query fails (the kernel then runs
/// without clusters).
fn resident_clusters(stream: &Stream, kernel: WgmmaKernel, cfg: LaunchConfig) -> usize {
    let index = match kernel {
        WgmmaKernel::Tf32(k) => k.info.index,
        WgmmaKernel::Half(k) => k.info.index,
    };
    let mut known = stream.device.wgmma_clusters.lock().unwrap_or_else(PoisonError::into_inner);
    *known.entry(index).or_insert_with(|| {
        let clusters = match kernel {
            WgmmaKernel::Tf32(k) => k.max_active_clusters(stream, cfg, 2),
            WgmmaKernel::Half(k) => k.max_active_clusters(stream, cfg, 2),
        };
        clusters.unwrap_or(0)
    })
}

/// Whether the `wgmma` GEMM may run in clusters of two (`FERROCUDA_WGMMA_CLUSTER=1` turns them
/// off, for measuring the difference).
fn wgmma_cluster() -> bool {
    static CLUSTER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CLUSTER.get_or_init(|| std::env::var("FERROCUDA_WGMMA_CLUSTER").map_or(true, |v| v != "1"))
}

/// Whether the 16-bit `wgmma` GEMM may share its last waves' k-steps out as stream-K
/// (`FERROCUDA_WGMMA_STREAM_K=0` turns it off, for measuring the difference).
fn wgmma_stream_k() -> bool {
    static STREAM_K: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STREAM_K.get_or_init(|| std::env::var("FERROCUDA_WGMMA_STREAM_K").map_or(true, |v| v != "0"))
}

/// The 16-bit swapped products (`GemmPath::WgmmaSwapped`): `[f16, bf16]`.
const WGMMA_SWAPPED_KERNELS: [Kernel<WgmmaArgs<u16>>; 2] =
    [kernels::gemm_wgmma_f16_nn_swapped_128x64, kernels::gemm_wgmma_bf16_nn_swapped_128x64];

/// `[tile of WGMMA_TILES][f16, bf16][A transposed][B transposed]`.
const WGMMA_KERNELS: [[ByTranspose<WgmmaArgs<u16>>; 2]; 4] = [
    [
        [
            [kernels::gemm_wgmma_f16_nn, kernels::gemm_wgmma_f16_nt],
            [kernels::gemm_wgmma_f16_tn, kernels::gemm_wgmma_f16_tt],
        ],
        [
            [kernels::gemm_wgmma_bf16_nn, kernels::gemm_wgmma_bf16_nt],
            [kernels::gemm_wgmma_bf16_tn, kernels::gemm_wgmma_bf16_tt],
        ],
    ],
    [
        [
            [kernels::gemm_wgmma_f16_nn_256x128, kernels::gemm_wgmma_f16_nt_256x128],
            [kernels::gemm_wgmma_f16_tn_256x128, kernels::gemm_wgmma_f16_tt_256x128],
        ],
        [
            [kernels::gemm_wgmma_bf16_nn_256x128, kernels::gemm_wgmma_bf16_nt_256x128],
            [kernels::gemm_wgmma_bf16_tn_256x128, kernels::gemm_wgmma_bf16_tt_256x128],
        ],
    ],
    [
        [
            [kernels::gemm_wgmma_f16_nn_128x192, kernels::gemm_wgmma_f16_nt_128x192],
            [kernels::gemm_wgmma_f16_tn_128x192, kernels::gemm_wgmma_f16_tt_128x192],
        ],
        [
            [kernels::gemm_wgmma_bf16_nn_128x192, kernels::gemm_wgmma_bf16_nt_128x192],
            [kernels::gemm_wgmma_bf16_tn_128x192, kernels::gemm_wgmma_bf16_tt_128x192],
        ],
    ],
    [
        [
            [kernels::gemm_wgmma_f16_nn_128x64, kernels::gemm_wgmma_f16_nt_128x64],
            [kernels::gemm_wgmma_f16_tn_128x64, kernels::gemm_wgmma_f16_tt_128x64],
        ],
        [
            [kernels::gemm_wgmma_bf16_nn_128x64, kernels::gemm_wgmma_bf16_nt_128x64],
            [kernels::gemm_wgmma_bf16_tn_128x64, kernels::gemm_wgmma_bf16_tt_128x64],
        ],
    ],
];

/// The 128×320 tile's kernels: `[f16, bf16][A transposed][B transposed]`.
const WGMMA_WIDE_KERNELS: [ByTranspose<WgmmaArgs<u16>>; 2] = [
    [
        [kernels::gemm_wgmma_f16_nn_128x320, kernels::gemm_wgmma_f16_nt_128x320],
        [kernels::gemm_wgmma_f16_tn_128x320, kernels::gemm_wgmma_f16_tt_128x320],
    ],
    [
        [kernels::gemm_wgmma_bf16_nn_128x320, kernels::gemm_wgmma_bf16_nt_128x320],
        [kernels::gemm_wgmma_bf16_tn_128x320, kernels::gemm_wgmma_bf16_tt_128x320],
    ],
];

/// `WGMMA_KERNELS` of the large tiles with a stream-K region (`stream_k_region`).
const WGMMA_SK_KERNELS: [[ByTranspose<WgmmaArgs<u16>>; 2]; 3] = [
    [
        [
            [kernels::gemm_wgmma_f16_nn_sk, kernels::gemm_wgmma_f16_nt_sk],
            [kernels::gemm_wgmma_f16_tn_sk, kernels::gemm_wgmma_f16_tt_sk],
        ],
        [
            [kernels::gemm_wgmma_bf16_nn_sk, kernels::gemm_wgmma_bf16_nt_sk],
            [kernels::gemm_wgmma_bf16_tn_sk, kernels::gemm_wgmma_bf16_tt_sk],
        ],
    ],
    [
        [
            [kernels::gemm_wgmma_f16_nn_256x128_sk, kernels::gemm_wgmma_f16_nt_256x128_sk],
            [kernels::gemm_wgmma_f16_tn_256x128_sk, kernels::gemm_wgmma_f16_tt_256x128_sk],
        ],
        [
            [kernels::gemm_wgmma_bf16_nn_256x128_sk, kernels::gemm_wgmma_bf16_nt_256x128_sk],
            [kernels::gemm_wgmma_bf16_tn_256x128_sk, kernels::gemm_wgmma_bf16_tt_256x128_sk],
        ],
    ],
    [
        [
            [kernels::gemm_wgmma_f16_nn_128x192_sk, kernels::gemm_wgmma_f16_nt_128x192_sk],
            [kernels::gemm_wgmma_f16_tn_128x192_sk, kernels::gemm_wgmma_f16_tt_128x192_sk],
        ],
        [
            [kernels::gemm_wgmma_bf16_nn_128x192_sk, kernels::gemm_wgmma_bf16_nt_128x192_sk],
            [kernels::gemm_wgmma_bf16_tn_128x192_sk, kernels::gemm_wgmma_bf16_tt_128x192_sk],
        ],
    ],
];

/// An operand as TMA reads it: its first element, `pitch` elements from one row to the next,
/// `batch_stride` from one batch to the next (0: one matrix shared by every batch).
#[derive(Clone, Copy)]
struct TmaOperand {
    ptr: u64,
    pitch: usize,
    batch_stride: usize,
}

impl TmaOperand {
    /// `t` in place: rows of `row_len` elements.
    fn of(t: &Tensor, row_len: usize, batch_stride: usize) -> Self {
        TmaOperand { ptr: t.device_ptr(), pitch: row_len, batch_stride }
    }
}

/// Operand `t` (rows of `row_len` elements, `batch_stride` apart) for the `wgmma` kernels: in
/// place when TMA can read it (or `stage` is off), else copied into a pool buffer whose rows are
/// padded to 16-byte multiples; the copy is returned to be kept until after the launch.
fn tma_operand(
    t: &Tensor,
    row_len: usize,
    batch_stride: usize,
    stage: bool,
    stream: &Arc<Stream>,
    op: &'static str,
) -> Result<(TmaOperand, Option<DeviceBuffer>)> {
    let size = t.dtype().size_bytes();
    if !stage || (rows_are_vectors(row_len, t.dtype()) && t.device_ptr() % 16 == 0) {
        return Ok((TmaOperand::of(t, row_len, batch_stride), None));
    }
    if size != 2 {
        return Err(Error::InvalidArgument {
            op,
            shape: t.shape().to_vec(),
            reason: "only 16-bit operands are staged into padded rows".into(),
        });
    }
    let pitch = row_len.next_multiple_of(16 / size);
    let rows = t.len() / row_len.max(1);
    let copy = stream.device.pool.alloc(stream, rows * pitch * size, op)?;
    // SAFETY: `t` is a live buffer of this stream of `rows` rows of `row_len` 16-bit elements
    // (staging is 16-bit only: dispatch row 3); `copy` is a fresh pool block (16-byte aligned)
    // of `rows` rows of `pitch` ≥ `row_len` elements, a multiple of 8, used by no other stream.
    unsafe {
        super::layout::pad_rows_b16(
            stream,
            DevPtr::new(t.device_ptr()),
            (rows, row_len, pitch),
            DevPtrMut::new(copy.ptr()),
        )?
    };
    let batch_stride = if batch_stride == 0 { 0 } else { batch_stride / row_len * pitch };
    Ok((TmaOperand { ptr: copy.ptr(), pitch, batch_stride }, Some(copy)))
}

/// A 3-D TMA tensor map of a row-major operand: `dims` = (elements per row, rows, batch),
/// `batch_stride` elements between batches (0: one matrix shared by every batch), boxes of
/// `boxed` = (elements, rows), 128-byte swizzle, zero fill outside. Also the attention kernels'.
pub(crate) fn tensor_map(
    dtype: DType,
    ptr: u64,
    (inner, rows, batch): (usize, usize, usize),
    batch_stride: usize,
    boxed: (usize, usize),
) -> Result<sys::CUtensorMap> {
    tensor_map_pitched(dtype, ptr, (inner, rows, batch), (inner, batch_stride), boxed)
}

/// [`tensor_map`] with rows `pitch` elements apart (at least `inner`; 16-byte multiples).
fn tensor_map_pitched(
    dtype: DType,
    ptr: u64,
    (inner, rows, batch): (usize, usize, usize),
    (pitch, batch_stride): (usize, usize),
    boxed: (usize, usize),
) -> Result<sys::CUtensorMap> {
    let (batch, batch_stride) = if batch_stride == 0 { (1, rows * pitch) } else { (batch, batch_stride) };
    let size = dtype.size_bytes() as u64;
    tensor_map_tiled(
        dtype,
        ptr,
        &[inner as u64, rows as u64, batch as u64],
        &[pitch as u64 * size, batch_stride as u64 * size],
        &[boxed.0 as u32, boxed.1 as u32, 1],
    )
}

/// `maps` in order, 128 bytes apart, as the by-value parameter of a kernel that reads them in
/// place; the rest of the parameter is zero.
pub(crate) fn tensor_maps(maps: &[sys::CUtensorMap]) -> TensorMaps {
    assert!(maps.len() <= TENSOR_MAPS_MAX, "at most {TENSOR_MAPS_MAX} tensor maps a launch");
    let mut words = TensorMaps([0; TENSOR_MAPS_BYTES / 8]);
    for (slot, map) in words.0.chunks_exact_mut(16).zip(maps) {
        slot.copy_from_slice(&map.opaque);
    }
    words
}

/// A tiled TMA tensor map of rank `dims.len()` (at most 5): `dims` innermost first, `strides` in
/// bytes between consecutive entries of each outer dimension (16-byte multiples), boxes of
/// `box_dims`, 128-byte swizzle, zero fill outside the tensor.
pub(crate) fn tensor_map_tiled(
    dtype: DType,
    ptr: u64,
    dims: &[u64],
    strides: &[u64],
    box_dims: &[u32],
) -> Result<sys::CUtensorMap> {
    let data_type = match dtype {
        DType::F32 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        DType::BF16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        _ => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    };
    assert!(
        dims.len() <= 5 && strides.len() + 1 == dims.len() && box_dims.len() == dims.len(),
        "a tensor map's rank"
    );
    let element_strides = [1u32; 5];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: `dims`, `box_dims` and `element_strides` hold the rank's entries (checked above),
    // `strides` one less; `map` is written by the call.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            dims.len() as u32,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            box_dims.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .call("cuTensorMapEncodeTiled")?;
    Ok(map)
}

impl Tensor {
    /// `self · other`: `[M, K] · [K, N]`, batched when either has rank 3.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        Gemm::new(self, other).run()
    }

    /// `self · otherᵀ`: `[M, K] · [N, K]ᵀ` (the layout of a linear layer's weight).
    pub fn matmul_t(&self, other: &Tensor) -> Result<Tensor> {
        Gemm::new(self, other).transpose_b(true).named("matmul_t").run()
    }
}

/// A linear layer in one launch: `act(x · wᵀ + bias)` with `x` `[.., in]` and `w` `[out, in]`;
/// the result is `[.., out]`.
pub fn linear(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, activation: Activation) -> Result<Tensor> {
    const OP: &str = "linear";
    let Some((&features, lead)) = x.shape().split_last() else {
        return Err(Error::InvalidArgument {
            op: OP, shape: vec![], reason: "x must have rank ≥ 1".into()
        });
    };
    let &[out_features, in_features] = w.shape() else {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: w.shape().to_vec(),
            reason: "w must be [out, in]".into(),
        });
    };
    if features != in_features {
        return Err(Error::ShapeMismatch { op: OP, lhs: x.shape().to_vec(), rhs: w.shape().to_vec() });
    }
    let rows: usize = lead.iter().product();
    let x2 = x.reshape(&[rows, features])?;
    let mut gemm = Gemm::new(&x2, w).transpose_b(true).activation(activation).named(OP);
    if let Some(bias) = bias {
        gemm = gemm.bias(bias);
    }
    let y = gemm.run()?;
    let mut shape = lead.to_vec();
    shape.push(out_features);
    y.reshape(&shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: DeviceFacts = DeviceFacts { sms: 132, clusters: true, sm90a: true };
    const OLDER: DeviceFacts = DeviceFacts { sms: 108, clusters: false, sm90a: false };

    fn dims(m: usize, n: usize, k: usize) -> Dims {
        Dims { batch: 1, m, n, k, stride_a: 0, stride_b: 0, stride_c: 0 }
    }

    fn operands(dtype: DType, transpose_a: bool, transpose_b: bool) -> Operands {
        Operands {
            dtype,
            transpose_a,
            transpose_b,
            batched_a: false,
            batched_b: false,
            aligned_a: true,
            aligned_b: true,
            tf32: false,
            f32x3: Some(false),
        }
    }

    fn path(d: Dims, o: Operands, dev: DeviceFacts) -> GemmPath {
        plan(&d, &o, &dev).path
    }

    #[test]
    fn register_stored_outputs_prefer_the_192_wide_tile() {
        // N = 8192: TMA stores, 128×256 (8 waves against 10 of 128×192 at 108); N = 8185: the
        // output stored from registers, where 128×192 counts 85 (call H: 0.494 against 0.604 ms).
        let tile = |n| match plan(&dims(3794, n, 2828), &operands(DType::BF16, true, false), &H100).path {
            GemmPath::Wgmma { tile, .. } => tile,
            p => panic!("{p:?}"),
        };
        assert_eq!(tile(8192), 0);
        assert_eq!(tile(8185), WGMMA_N192_TILE);
    }

    #[test]
    fn part_waves_take_the_320_wide_tile() {
        let tile = |(m, n, k): (usize, usize, usize), ta, tb| match plan(
            &dims(m, n, k),
            &operands(DType::BF16, ta, tb),
            &H100,
        )
        .path
        {
            GemmPath::Wgmma { tile, .. } => tile,
            p => panic!("{m}x{n}x{k} {ta} {tb}: {p:?}"),
        };
        // Two waves of 128×320 against three of 128×256 (a part-full last one), one against two
        // (N = 4096: 128×192 would take 1.5 tile-times), and the GPU test's products
        // (`half_precision_wide_tile`; (3001, 3096, 264) stages A where it is transposed).
        let wide = [(3136, 3200, 8064), (3200, 3200, 8192), (1152, 4096, 8192), (640, 8192, 8192)];
        for shape in wide.into_iter().chain([(1104, 3992, 72), (3001, 3096, 264)]) {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                assert_eq!(tile(shape, ta, tb), WGMMA_WIDE_TILE, "{shape:?} {ta} {tb}");
            }
        }
        // Two layers of (600, 3992, 72): one wave of 130 tiles against two of 160 128×256 ones.
        let batched = Dims { batch: 2, ..dims(600, 3992, 72) };
        assert!(matches!(
            plan(&batched, &operands(DType::F16, false, true), &H100).path,
            GemmPath::Wgmma { tile: WGMMA_WIDE_TILE, .. }
        ));
        // Rows off the 16-byte vectors: the 128×192 tile's register stores count 85, which the
        // wide tile never beats.
        assert_eq!(tile((1100, 4003, 264), false, false), WGMMA_N192_TILE);
        // Whole waves of 128×256 (its 1.25× tile-time loses), and as many waves either way.
        for shape in [
            (8192, 8192, 8192),
            (4096, 4096, 4096),
            (6144, 6144, 6144),
            (2304, 7424, 2304),
            (1000, 8200, 4096),
        ] {
            assert_ne!(tile(shape, false, false), WGMMA_WIDE_TILE, "{shape:?}");
        }
    }

    #[test]
    fn stream_k_regions() {
        // The GPU test's products (`half_precision_stream_k`) on the H100 (66 pairs of blocks at
        // once): pairs of 128×192 or 256×128 tiles past a wave, the last wave and the part-wave
        // after it spread over every pair, after whole units in the last two.
        let products = [
            ((1597, 1776, 1536), WGMMA_N192_TILE, 70, 70),
            ((2001, 2103, 1505), WGMMA_N192_TILE, 88, 88),
            ((2179, 3408, 1536), 1, 135, 69),
            ((2577, 3503, 1537), WGMMA_N192_TILE, 209, 77),
        ];
        for ((m, n, k), tile, units, region) in products {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let plan = plan(&dims(m, n, k), &operands(DType::BF16, ta, tb), &H100);
                assert!(matches!(plan.path, GemmPath::Wgmma { tile: t, .. } if t == tile), "{m}x{n}x{k}");
                assert_eq!(plan.slices, 1);
            }
            let (bm, bn) = WGMMA_TILES[tile];
            assert_eq!(m.div_ceil(bm).div_ceil(2) * n.div_ceil(bn), units);
            assert_eq!(stream_k_region(units, 66, k.div_ceil(64), 2), region, "{m}x{n}x{k}");
        }
        // Whole waves, one wave or less: no region.
        assert_eq!(stream_k_region(264, 132, 128, 1), 0);
        assert_eq!(stream_k_region(132, 132, 128, 1), 0);
        assert_eq!(stream_k_region(60, 132, 128, 1), 0);
        // Past whole waves, the last one and the part after it.
        assert_eq!(stream_k_region(133, 132, 128, 1), 133);
        assert_eq!(stream_k_region(400, 132, 64, 1), 136);
        // Short K: the overhead would cost more than the part-wave.
        assert_eq!(stream_k_region(140, 132, 8, 1), 0);
        // A part-wave over about half a wave: the region's slower rate costs more than it saves
        // ((1152, 4096, 8192): 110 pairs, 0.145 against 0.133 ms whole).
        assert_eq!(stream_k_region(110, 66, 128, 2), 0);
        assert_eq!(stream_k_region(99, 66, 128, 2), 99);
        // The flags of a region: one per tile and consumer, at most `STREAM_K_FLAGS`.
        assert_eq!(stream_k_region(2 * 600 - 1, 600, 128, 1), 0);
    }

    #[test]
    fn few_rows_take_the_gemv_kernel() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for tb in [false, true] {
                let o = operands(dtype, false, tb);
                // Whole 16-byte vectors: tensor cores, or for f32 more than 4 rows TMA (both
                // layouts, sm_90a); else the f32-pipe kernels.
                let mma = GemmPath::GemvMma { clustered: false, warps: 4 };
                let vectors = |rows| {
                    if dtype == DType::F32 && rows == 16 {
                        GemmPath::GemvTma
                    } else if dtype == DType::F32 {
                        GemmPath::Gemv { rows }
                    } else {
                        mma
                    }
                };
                // Whether the slices run in clusters: `few_rows_on_tensor_cores_add_slices_in_clusters`.
                let path = |d, o, dev| match path(d, o, dev) {
                    GemmPath::GemvMma { .. } => GemmPath::GemvMma { clustered: false, warps: 4 },
                    p => p,
                };
                // f32 takes TMA for 1-4 rows too where B holds at least 2^24 values.
                let large_b = if dtype == DType::F32 { GemmPath::GemvTma } else { vectors(4) };
                assert_eq!(path(dims(1, 8192, 8192), o, H100), large_b);
                assert_eq!(path(dims(4, 4096, 4096), o, H100), large_b);
                assert_eq!(path(dims(4, 3072, 768), o, H100), vectors(4));
                assert_eq!(path(dims(4, 3, 1), o, OLDER), GemmPath::Gemv { rows: 4 });
                assert_eq!(path(dims(5, 8192, 8192), o, H100), vectors(16));
                assert_eq!(path(dims(16, 1, 1), o, H100), GemmPath::Gemv { rows: 16 });
                // N not a multiple of a vector: B's rows only allow vectors when B is transposed.
                let odd_n = path(dims(16, 8191, 8192), o, H100);
                assert_eq!(odd_n, if tb { vectors(16) } else { GemmPath::Gemv { rows: 16 } });
                // K not a multiple of a vector, or an operand off a 16-byte boundary: no vectors.
                assert_eq!(path(dims(16, 8192, 8190), o, H100), GemmPath::Gemv { rows: 16 });
                let unaligned = Operands { aligned_b: false, ..o };
                assert_eq!(path(dims(16, 8192, 8192), unaligned, H100), GemmPath::Gemv { rows: 16 });
                // TF32 allowed or not: the few-row kernel is exact and bound by B anyway.
                assert_eq!(path(dims(16, 96, 96), Operands { tf32: true, ..o }, H100), vectors(16));
                assert!(!matches!(
                    path(dims(17, 8192, 8192), o, H100),
                    GemmPath::Gemv { .. } | GemmPath::GemvMma { .. } | GemmPath::GemvTma
                ));
                // A stored [K, M] strides its rows: the tiled kernels take it.
                assert!(!matches!(
                    path(dims(16, 8192, 8192), operands(dtype, true, tb), H100),
                    GemmPath::Gemv { .. } | GemmPath::GemvMma { .. } | GemmPath::GemvTma
                ));
            }
        }
    }

    #[test]
    fn f32_few_rows_split_k_in_clusters_of_whole_stages() {
        for tb in [false, true] {
            let o = operands(DType::F32, false, tb);
            // 128 column groups of 64: one slice; 64: two; 16: eight (at most a cluster of 8).
            let p = plan(&dims(16, 8192, 8192), &o, &H100);
            assert_eq!((p.path, p.slices, p.k_chunk), (GemmPath::GemvTma, 1, 8192));
            let p = plan(&dims(8, 4096, 4096), &o, &H100);
            assert_eq!((p.path, p.slices, p.k_chunk), (GemmPath::GemvTma, 2, 2048));
            let p = plan(&dims(16, 1024, 65536), &o, &H100);
            assert_eq!((p.path, p.slices, p.k_chunk), (GemmPath::GemvTma, 8, 8192));
            // Slices stay at least 512 long and whole stages of 64: K = 1000 is one slice.
            let p = plan(&dims(16, 1024, 1000), &o, &H100);
            assert_eq!((p.path, p.slices), (GemmPath::GemvTma, 1));
            let p = plan(&dims(5, 256, 1500), &o, &H100);
            assert_eq!((p.path, p.slices, p.k_chunk), (GemmPath::GemvTma, 2, 768));
            let p = plan(&dims(5, 256, 1100), &o, &H100);
            assert_eq!((p.path, p.slices, p.k_chunk), (GemmPath::GemvTma, 2, 640));
            // Without the sm_90a module: the register-fed kernels.
            assert_ne!(path(dims(16, 8192, 8192), o, OLDER), GemmPath::GemvTma);
        }
    }

    #[test]
    fn few_rows_on_tensor_cores_add_slices_in_clusters() {
        let o = operands(DType::BF16, false, true);
        // 8 slices: one cluster per column group where the device has clusters.
        let p = plan(&dims(16, 8192, 8192), &o, &H100);
        assert_eq!((p.path, p.slices), (GemmPath::GemvMma { clustered: true, warps: 4 }, 8));
        let p = plan(&dims(16, 8192, 8192), &o, &OLDER);
        assert_eq!(p.path, GemmPath::GemvMma { clustered: false, warps: 4 });
        assert!(p.slices > 1);
        // Past the portable 8: 15 slices of 17 column groups, one cluster each.
        let p = plan(&dims(1, 4099, 8200), &o, &H100);
        assert_eq!((p.path, p.slices), (GemmPath::GemvMma { clustered: true, warps: 4 }, 15));
        // More slices than a cluster holds (one column group, K = 2^16): the workspace.
        let p = plan(&dims(16, 256, 1 << 16), &o, &H100);
        assert_eq!((p.path, p.slices), (GemmPath::GemvMma { clustered: false, warps: 4 }, MAX_SLICES));
        // Too few blocks of four warps for half the SMs: one-warp blocks, slices of 256 in clusters
        // (GPT-2's (1, 3072, 768): 48 columns groups × 3 slices instead of 12 blocks), or one slice.
        let p = plan(&dims(1, 3072, 768), &o, &H100);
        assert_eq!((p.path, p.slices, p.k_chunk), (GemmPath::GemvMma { clustered: true, warps: 1 }, 3, 256));
        let p = plan(&dims(16, 8192, 256), &o, &H100);
        assert_eq!((p.path, p.slices), (GemmPath::GemvMma { clustered: false, warps: 1 }, 1));
    }

    #[test]
    fn few_rows_split_k_until_the_sms_are_busy() {
        // The f32-pipe kernels (B off a 16-byte boundary): B [N, K] f32, 8192 wide: 256 blocks of
        // 32 columns, 2 slices fill 4 blocks per SM.
        let vectorless = Operands { aligned_b: false, ..operands(DType::F32, false, true) };
        let p = plan(&dims(1, 8192, 8192), &vectorless, &H100);
        assert_eq!((p.slices, p.k_chunk), (2, 4096));
        // On tensor cores, either layout: 32 blocks of 256 columns; 8 slices of 1024 (2 blocks on
        // each of 132 SMs at most). f32 takes TMA there (`f32_few_rows_split_k_in_clusters_of_whole_stages`).
        for (dtype, tb) in [(DType::BF16, false), (DType::BF16, true)] {
            let p = plan(&dims(16, 8192, 8192), &operands(dtype, false, tb), &H100);
            assert_eq!(
                (p.path, p.slices, p.k_chunk),
                (GemmPath::GemvMma { clustered: true, warps: 4 }, 8, 1024)
            );
        }
        // Slices of the tensor-core kernel are whole steps of 32 k.
        let p = plan(&dims(3, 256, 2008), &operands(DType::F16, false, true), &H100);
        assert!(matches!(p.path, GemmPath::GemvMma { .. }) && p.slices > 1 && p.k_chunk % 32 == 0);
        // Slices are whole vectors per lane (32 · 4 f32) and at least SPLIT_MIN_K long.
        let p = plan(&dims(1, 64, 3000), &vectorless, &H100);
        assert_eq!(p.k_chunk % 128, 0);
        assert!(p.k_chunk >= SPLIT_MIN_K && p.slices == 3000usize.div_ceil(p.k_chunk) && p.slices > 1);
        // Short K or enough columns: one slice, the epilogue in the kernel.
        let p = plan(&dims(1, 8192, 700), &vectorless, &H100);
        assert_eq!((p.slices, p.k_chunk), (1, 700));
        let p = plan(&dims(1, 1 << 20, 8192), &operands(DType::F32, false, true), &H100);
        assert_eq!(p.slices, 1);
        // K = 0: one slice of length 1 (no division by zero in the kernel).
        let p = plan(&dims(1, 10, 0), &operands(DType::F32, false, true), &H100);
        assert_eq!((p.slices, p.k_chunk), (1, 1));
    }

    #[test]
    fn sixteen_bit_takes_wgmma_where_tma_can_read_it() {
        let o = operands(DType::BF16, false, false);
        const WIDE: GemmPath = GemmPath::Wgmma { tile: 0, staged: false };
        const TALL: GemmPath = GemmPath::Wgmma { tile: 1, staged: false };
        const N192: GemmPath = GemmPath::Wgmma { tile: 2, staged: false };
        const N192_STAGED: GemmPath = GemmPath::Wgmma { tile: 2, staged: true };
        const SMALL: GemmPath = GemmPath::Wgmma { tile: 3, staged: false };
        const SMALL_STAGED: GemmPath = GemmPath::Wgmma { tile: 3, staged: true };
        assert_eq!(path(dims(6144, 6144, 6144), o, H100), WIDE);
        assert_eq!(path(dims(6144, 6144, 6144), o, OLDER), GemmPath::HalfMma);
        // Rows not 16-byte multiples (K = 2999, N = 3003) or an unaligned start: products with
        // enough flops a byte copied copy those operands into padded buffers, and so do thin or
        // small ones that copy no more than they read in place (or 4 MiB); short K, or copies
        // that outweigh the product (under 24 flops a byte copied), take mma.sync.
        assert_eq!(path(dims(3001, 3003, 2999), o, H100), N192_STAGED);
        assert_eq!(path(dims(3000, 3003, 3000), o, H100), N192_STAGED);
        assert_eq!(path(dims(3001, 3000, 3000), o, H100), N192);
        assert_eq!(path(dims(3001, 3003, 2999), o, OLDER), GemmPath::HalfMma);
        assert_eq!(path(dims(3001, 3003, 255), o, H100), GemmPath::HalfMma);
        assert_eq!(path(dims(1023, 1025, 1000), o, H100), N192_STAGED);
        assert_eq!(path(dims(1024, 1025, 1000), o, H100), N192_STAGED);
        // Or whose flops a byte copied reach `STAGE_FLOPS_PER_BYTE`: B [4096, 1001] copied (8.2
        // MB, 1000 flops a byte) beside A's 8.19 MB read in place; both operands of (75, 75,
        // 65535) copied at 37 flops a byte; not (17, 33, 45001), 11 a byte.
        let staged = |d| matches!(path(d, o, H100), GemmPath::Wgmma { staged: true, .. });
        assert!(staged(dims(1000, 1001, 4096)) && staged(dims(75, 75, 65535)));
        assert_eq!(path(dims(17, 33, 45001), o, H100), GemmPath::HalfMma);
        // The GPT's tied head (73 characters): dW = dYᵀ·X copies dY (2.4 MB), reads X in place.
        assert_eq!(path(dims(73, 384, 16384), operands(DType::BF16, true, false), H100), SMALL_STAGED);
        let unaligned = Operands { aligned_b: false, ..o };
        assert_eq!(path(dims(300, 300, 300), unaligned, H100), SMALL_STAGED);
        assert_eq!(path(dims(2048, 2048, 2048), unaligned, H100), GemmPath::Wgmma { tile: 0, staged: true });
        assert_eq!(path(dims(300, 300, 0), o, H100), GemmPath::HalfMma);
        // The tile that leaves the SMs the least work: 128×256 for the squares; 128×192 where
        // N = 384 or 1152 (2 or 6 tiles of 192, full waves); 256×128 for N = 128 with split K.
        assert_eq!(path(dims(4096, 4096, 4096), o, H100), WIDE);
        assert_eq!(path(dims(8192, 8192, 8192), o, H100), WIDE);
        assert_eq!(path(dims(16384, 384, 1152), o, H100), N192);
        assert_eq!(path(dims(16384, 1152, 384), o, H100), N192);
        assert_eq!(path(dims(16384, 1536, 384), o, H100), WIDE);
        // The large tiles filling at most a quarter of the SMs: 128×64 (a few rows, a thin
        // output, small squares: the time model's pick where K ≥ 1024, `wgmma_tile`'s below). A·B
        // with at most 128 rows or columns runs swapped there (B transposed: not swapped).
        let nt = operands(DType::BF16, false, true);
        assert_eq!(path(dims(100, 384, 384), o, H100), SMALL);
        assert_eq!(path(dims(8192, 128, 8192), o, H100), GemmPath::WgmmaSwapped);
        assert_eq!(path(dims(64, 8192, 8192), o, H100), GemmPath::WgmmaSwapped);
        assert_eq!(path(dims(128, 8192, 8192), o, H100), SMALL);
        assert_eq!(path(dims(128, 8192, 8192), nt, H100), SMALL);
        assert_eq!(path(dims(8192, 128, 8192), nt, H100), SMALL);
        // Not where Cᵀ would take more tiles (64 columns are half a 128-row tile of Cᵀ), nor
        // more passes over the streamed operand (above: 128 rows are two 64-column tiles of Cᵀ).
        assert_eq!(path(dims(8192, 64, 8192), o, H100), SMALL);
        assert_eq!(path(dims(32, 8192, 8192), o, H100), GemmPath::WgmmaSwapped);
        assert_eq!(path(dims(1024, 1024, 1024), o, H100), SMALL);
        assert_eq!(path(dims(2048, 2048, 2048), o, H100), WIDE);
        // The time model (`wgmma_modeled`): (256, 8192, 8192) unsplit on 128×192 (86 tiles, one
        // wave) rather than 128×256 in two slices; the GPT's weight gradients (K = 16384
        // tokens) in 5 or 7 slices on 128×192, where 128×64 tiles would run K whole in two waves
        // and 128×256 tiles would pad the output more.
        assert_eq!(path(dims(256, 8192, 8192), o, H100), N192);
        assert_eq!(path(dims(384, 1536, 16384), o, H100), N192);
        assert_eq!(path(dims(1536, 384, 16384), o, H100), N192);
        assert_eq!(path(dims(384, 1152, 16384), o, H100), N192);
        assert_eq!(path(dims(768, 768, 32768), o, H100), N192);
        assert_eq!(path(dims(4096, 8192, 128), o, H100), WIDE);
        // The shapes of tests/matmul.rs's `half_precision_tma_shapes`, one per tile.
        assert_eq!(path(dims(12000, 376, 40), o, H100), N192);
        assert_eq!(path(dims(11200, 760, 40), o, H100), WIDE);
        assert_eq!(path(dims(8600, 640, 40), o, H100), TALL);
        assert_eq!(path(dims(136, 264, 200), o, H100), SMALL);
        assert_eq!(path(dims(1000, 376, 328), o, H100), SMALL);
        // The shapes of tests/matmul.rs's `half_precision_swapped_shapes`: few rows, few columns,
        // tiles partly outside, split K ((40, 520, 16384): 9 tiles of Cᵀ).
        for shape in
            [(8296, 128, 1032), (48, 6000, 1032), (8200, 104, 1032), (24, 3000, 1000), (40, 1000, 200)]
        {
            assert_eq!(path(dims(shape.0, shape.1, shape.2), o, H100), GemmPath::WgmmaSwapped, "{shape:?}");
        }
        let batched = Operands { batched_a: true, batched_b: true, ..o };
        let shared_b = Operands { batched_a: true, ..o };
        assert_eq!(path(Dims { batch: 3, ..dims(40, 264, 1104) }, batched, H100), GemmPath::WgmmaSwapped);
        assert_eq!(path(Dims { batch: 3, ..dims(256, 104, 1104) }, shared_b, H100), GemmPath::WgmmaSwapped);
        let p = plan(&dims(40, 520, 16384), &o, &H100);
        assert_eq!(p.path, GemmPath::WgmmaSwapped);
        assert!(p.slices > 1, "{} slices", p.slices);
        // Few tiles: split K (one block per SM fits), in whole k-steps of 64.
        let split = |m, n, k| {
            let p = plan(&dims(m, n, k), &o, &H100);
            assert!(matches!(p.path, GemmPath::Wgmma { .. } | GemmPath::WgmmaSwapped));
            assert!(p.slices == 1 || p.k_chunk % 64 == 0);
            (p.slices, p.k_chunk)
        };
        // 128 tiles of 128×64: no split; 16 of them (1024 × 128) still split.
        assert_eq!(split(128, 8192, 8192), (1, 8192));
        assert_eq!(split(8192, 128, 8192), (1, 8192));
        assert_eq!(split(1024, 128, 8192), (8, 1024));
        assert_eq!(split(16384, 16384, 256), (1, 256));
        assert_eq!(split(128, 8192, 1000), (1, 1000));
        // K = 1096 is too short for the split's fixed cost and second pass through memory.
        assert_eq!(split(520, 776, 1096), (1, 1096));
        assert_eq!(split(384, 1152, 16384), (7, 2368));
        assert_eq!(split(256, 8192, 8192), (1, 8192));
        assert_eq!(split(264, 200, 4104), (9, 512));
        // A 73-row weight gradient (dY copied): the 128×64 tiles split K.
        let p = plan(&dims(73, 384, 16384), &operands(DType::BF16, true, false), &H100);
        assert_eq!((p.path, p.slices, p.k_chunk), (SMALL_STAGED, 22, 768));
        // mma.sync splits K as well when its 128×128 tiles are few: both operands unaligned, 11
        // flops a byte copied.
        let p = plan(&dims(17, 33, 45001), &operands(DType::BF16, true, false), &H100);
        assert_eq!((p.path, p.slices, p.k_chunk), (GemmPath::HalfMma, 32, 1408));
        let p = plan(&dims(3001, 3003, 2999), &o, &H100);
        assert_eq!((p.path, p.slices), (N192_STAGED, 1));
        // Staged operands split K as the others do: (1030, 1027, 8190) is 45 to 54 tiles.
        let p = plan(&dims(1030, 1027, 8190), &o, &H100);
        assert!(
            matches!(p.path, GemmPath::Wgmma { staged: true, .. }) && p.slices > 1 && p.k_chunk % 64 == 0
        );
        // Transposed A [K, M]: M is the row length.
        let ta = operands(DType::F16, true, false);
        assert_eq!(path(dims(3001, 3000, 3000), ta, H100), N192_STAGED);
        assert_eq!(path(dims(301, 3000, 3000), ta, H100), N192_STAGED);
    }

    #[test]
    fn tf32_takes_wgmma_when_the_transposes_can_run() {
        let o = Operands { tf32: true, ..operands(DType::F32, false, false) };
        // Neither transposed, rows of 16-byte multiples: the swapped kernel where the model says
        // it pays (the measured winners: 1024³ and 3000³ swapped, 2048³, 4096³ and 8192³ on a
        // transposed B; a weight matrix streamed by 128 rows swapped, a short K transposed),
        // batched always; the tiles counted on Cᵀ ((128, 8192, 8192): Cᵀ `[8192, 128]` is 128
        // tiles of 128×64, where 128×192 would pad it half again; (1152, 384, 16384): Cᵀ
        // `[384, 1152]` is 18 tiles of 128×192 in seven slices of K).
        let swapped = |tile| GemmPath::Tf32WgmmaSwapped { tile };
        for size in [1024, 3000] {
            assert_eq!(path(dims(size, size, size), o, H100), swapped(2));
        }
        for size in [2048, 4096, 8192] {
            assert_eq!(path(dims(size, size, size), o, H100), GemmPath::Tf32Wgmma);
        }
        let p = plan(&dims(128, 8192, 8192), &o, &H100);
        assert_eq!((p.path, p.slices), (swapped(3), 1));
        let p = plan(&dims(1152, 384, 16384), &o, &H100);
        assert_eq!((p.path, p.slices), (swapped(2), 7));
        assert_eq!(path(dims(256, 8192, 8192), o, H100), swapped(3));
        assert_eq!(path(dims(512, 8192, 8192), o, H100), swapped(2));
        assert_eq!(path(dims(64, 8192, 8192), o, H100), swapped(3));
        assert_eq!(path(dims(8192, 8192, 128), o, H100), GemmPath::Tf32Wgmma);
        let batched = Operands { batched_a: true, batched_b: true, ..o };
        assert_eq!(path(Dims { batch: 3, ..dims(17, 36, 4096) }, batched, H100), swapped(3));
        let shared_a = Operands { batched_b: true, ..o };
        assert_eq!(path(Dims { batch: 32, ..dims(64, 3136, 256) }, shared_a, H100), swapped(3));
        assert_eq!(path(dims(4096, 4098, 4096), o, H100), GemmPath::Tf32Wgmma);
        assert_eq!(
            path(dims(1024, 1024, 1024), Operands { aligned_b: false, ..o }, H100),
            GemmPath::Tf32Wgmma
        );
        assert_eq!(path(dims(4096, 4096, 4096), o, OLDER), GemmPath::Tf32Mma);
        assert_eq!(path(dims(4096, 4096, 4098), o, H100), GemmPath::Tf32Mma);
        assert_eq!(path(dims(17, 3, 65_535 * 64 + 4), o, H100), GemmPath::Tf32Mma);
        assert_eq!(path(dims(17, 3, 4096), Operands { batched_b: true, ..o }, H100), GemmPath::Tf32Mma);
        let nt = Operands { transpose_b: true, batched_b: true, ..o };
        assert_eq!(path(dims(17, 3, 4096), nt, H100), GemmPath::Tf32Wgmma);
        assert_eq!(path(dims(17, 3, 4096), Operands { aligned_a: false, ..nt }, H100), GemmPath::Tf32Mma);
    }

    #[test]
    fn exact_f32_takes_3xtf32_where_it_pays() {
        let by_size = |ta, tb| Operands { f32x3: None, ..operands(DType::F32, ta, tb) };
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            assert_eq!(path(dims(4096, 4096, 4096), by_size(ta, tb), H100), GemmPath::F32x3Wgmma);
            assert_eq!(path(dims(16384, 16384, 256), by_size(ta, tb), H100), GemmPath::F32x3Wgmma);
            assert_eq!(
                path(dims(4096, 4096, 4096), by_size(ta, tb), OLDER),
                GemmPath::Simt { tile: (128, 256) }
            );
        }
        // Below 2^27 flops, or too few flops per byte the splits move (a weight matrix read once
        // by 128 rows); a thin output over a long K pays, and a linear layer of 805 MFLOP.
        assert!(matches!(path(dims(256, 256, 1024), by_size(false, false), H100), GemmPath::Simt { .. }));
        assert_eq!(path(dims(512, 512, 512), by_size(false, false), H100), GemmPath::F32x3Wgmma);
        assert_eq!(path(dims(8192, 128, 8192), by_size(false, false), H100), GemmPath::F32x3Wgmma);
        assert_eq!(path(dims(1024, 768, 512), by_size(false, true), H100), GemmPath::F32x3Wgmma);
        // A weight matrix streamed by 128 or 300 rows: swapped (B read once, only A split; call F:
        // 0.221 and 0.594 ms against 0.397 and 0.722 on the K-major kernel).
        for rows in [128, 300] {
            assert_eq!(
                path(dims(rows, 8192, 8192), by_size(false, false), H100),
                GemmPath::F32x3WgmmaSwapped
            );
        }
        // Forced on at any size it can run (tests), off whatever the size; TF32 allowed wins.
        let forced = Operands { f32x3: Some(true), ..operands(DType::F32, false, false) };
        assert_eq!(path(dims(130, 129, 300), forced, H100), GemmPath::F32x3Wgmma);
        assert_eq!(path(dims(130, 129, 302), forced, H100), GemmPath::F32x3Wgmma);
        assert_eq!(path(dims(3001, 3003, 2999), by_size(false, false), H100), GemmPath::F32x3Wgmma);
        assert_eq!(
            path(dims(4096, 4096, 4096), Operands { tf32: true, ..forced }, H100),
            GemmPath::Tf32Wgmma
        );
        let off = Operands { f32x3: Some(false), ..forced };
        assert!(matches!(path(dims(4096, 4096, 4096), off, H100), GemmPath::Simt { .. }));
        // Batched operands where neither needs its transpose, or swapped; otherwise on the FMA
        // kernels.
        let batched = Operands { batched_b: true, ..by_size(false, true) };
        assert_eq!(path(Dims { batch: 8, ..dims(2048, 2048, 2048) }, batched, H100), GemmPath::F32x3Wgmma);
        let batched = Operands { batched_b: true, ..by_size(false, false) };
        let p = plan(&Dims { batch: 8, ..dims(2048, 2048, 2048) }, &batched, &H100);
        assert_eq!(p.path, GemmPath::F32x3WgmmaSwapped);
        let batched = Operands { batched_b: true, ..by_size(true, false) };
        assert!(matches!(
            path(Dims { batch: 8, ..dims(2048, 2048, 2048) }, batched, H100),
            GemmPath::Simt { .. }
        ));
    }

    #[test]
    fn simt_splits_k_when_the_large_tiles_leave_sms_idle() {
        let o = operands(DType::F32, false, false);
        let simt = |tile| GemmPath::Simt { tile };
        // (128, 8192, 8192): 64 large tiles; 2 slices of 4096 fill 128 of 132 SMs.
        let p = plan(&dims(128, 8192, 8192), &o, &H100);
        assert_eq!(p, GemmPlan { path: simt(GEMM_TILE_LARGE), slices: 2, k_chunk: 4096 });
        // N = 128, K = 8192: the same grid transposed.
        assert_eq!(plan(&dims(8192, 128, 8192), &o, &H100).slices, 2);
        // 17 × 64 outputs, K = 8200: one tile, 16 slices of 528 (a multiple of the k-step).
        let p = plan(&dims(17, 64, 8200), &o, &H100);
        assert_eq!((p.slices, p.k_chunk), (16, 528));
        assert_eq!(p.k_chunk % GEMM_BK, 0);
        // A batch counts as tiles.
        let batched = |batch| Dims { batch, ..dims(128, 128, 8192) };
        assert_eq!(plan(&batched(64), &o, &H100).slices, 2);
        assert_eq!(plan(&batched(132), &o, &H100).slices, 1);
    }

    #[test]
    fn simt_tile_by_waves() {
        let o = operands(DType::F32, false, false);
        let whole = |tile, k: usize| GemmPlan { path: GemmPath::Simt { tile }, slices: 1, k_chunk: k };
        // Wide tiles in nearly whole waves: 512 = 3.9 waves at 4096², 1152 = 8.7 at 6144².
        assert_eq!(plan(&dims(4096, 4096, 4096), &o, &H100), whole(GEMM_TILE_WIDE, 4096));
        assert_eq!(plan(&dims(6144, 6144, 6144), &o, &H100), whole(GEMM_TILE_WIDE, 6144));
        assert_eq!(plan(&dims(2000, 4000, 1024), &o, &H100), whole(GEMM_TILE_WIDE, 1024));
        // 3001 × 3003: 288 wide tiles need a third wave for 24 of them, the 576 large ones fill
        // 4.4 waves: the large tile's busiest SM has less work.
        assert_eq!(plan(&dims(3001, 3003, 2999), &o, &H100), whole(GEMM_TILE_LARGE, 2999));
        // Short K: the large tile.
        assert_eq!(plan(&dims(16384, 16384, 256), &o, &H100), whole(GEMM_TILE_LARGE, 256));
        assert_eq!(plan(&dims(2000, 4000, 1023), &o, &H100), whole(GEMM_TILE_LARGE, 1023));
        // 2048²: 128 wide tiles leave SMs idle, 256 large ones do not.
        assert_eq!(plan(&dims(2048, 2048, 2048), &o, &H100), whole(GEMM_TILE_LARGE, 2048));
        let batched = Dims { batch: 132, ..dims(128, 128, 8192) };
        assert_eq!(plan(&batched, &o, &H100), whole(GEMM_TILE_LARGE, 8192));
        // Short K, M = 147: the small tile pads M to 192 rows where the others pad it to 256
        // (ResNet stem's `Wᵀ · dy` per image, 32 images).
        let stem = Dims { batch: 32, ..dims(147, 12544, 64) };
        assert_eq!(plan(&stem, &o, &H100), whole(GEMM_TILE_SMALL, 64));
        // Few tiles and short K: smaller tiles instead of a split.
        assert_eq!(plan(&dims(1000, 1000, 1000), &o, &H100), whole(GEMM_TILE_SMALL, 1000));
        assert_eq!(plan(&dims(1024, 2048, 1000), &o, &H100), whole(GEMM_TILE_MEDIUM, 1000));
    }

    #[test]
    fn tiny_products_take_the_tiny_kernel() {
        let o = operands(DType::F32, false, false);
        let tiny = GemmPlan { path: GemmPath::Tiny, slices: 1, k_chunk: 64 };
        assert_eq!(plan(&dims(64, 128, 64), &o, &H100), tiny);
        assert_eq!(plan(&dims(64, 128, 64), &Operands { tf32: true, ..o }, &H100), tiny);
        assert_eq!(plan(&dims(64, 128, 64), &operands(DType::F32, true, true), &H100), tiny);
        assert_eq!(path(dims(256, 256, 256), o, H100), GemmPath::Tiny);
        assert_ne!(path(dims(256, 257, 256), o, H100), GemmPath::Tiny);
        assert_ne!(path(dims(64, 128, 257), o, H100), GemmPath::Tiny);
        assert_ne!(path(dims(64, 128, 64), operands(DType::BF16, false, false), H100), GemmPath::Tiny);
    }

    #[test]
    fn split_k_reduction_takes_quads_only_when_they_fill_the_device() {
        // The tests' quad case (130 × 4100) and the GPT head's weight gradient (73 × 384).
        assert_eq!(gemm_reduce_per_thread(130 * 4100, 256, 2), 4);
        assert_eq!(gemm_reduce_per_thread(73 * 384, 256, 2), 1);
        // Outputs that do not split into aligned quads.
        assert_eq!(gemm_reduce_per_thread((1 << 19) + 2, 256, 4), 1);
        assert_eq!(gemm_reduce_per_thread(1 << 20, 256 + 8, 4), 1);
        assert_eq!(gemm_reduce_per_thread(1 << 20, 256 + 8, 2), 4);
    }

    #[test]
    fn split_k_rounds_to_the_alignment_and_caps_the_slices() {
        assert_eq!(split_k(8192, 64, 132, (16, 512)), (2, 4096));
        assert_eq!(split_k(8192, 1, 132, (16, 512)), (16, 512));
        assert_eq!(split_k(1 << 20, 1, 132, (16, 512)), (MAX_SLICES, 1 << 15));
        assert_eq!(split_k(1000, 1, 132, (16, 512)), (1, 1000));
        assert_eq!(split_k(0, 1, 132, (16, 512)), (1, 1));
        let (slices, chunk) = split_k(10_001, 3, 132, (256, 512));
        assert!(chunk % 256 == 0 && slices == 10_001usize.div_ceil(chunk) && slices <= MAX_SLICES);
    }
}
