//! Matrix multiply: `matmul`, `matmul_t`, `linear`, and the general [`Gemm`] (transposes,
//! `alpha`/`beta`, bias and activation fused in the epilogue, batched and strided-batched).
//! Kernels: `gpu-kernels/src/matmul/`.
//!
//! Kernel choice: f16 and bf16 tensors (A, B, C and bias of one dtype) take the 16-bit
//! tensor-core kernel (f32 accumulation, output in the input dtype): on devices running the
//! sm_90a module (H100), the `wgmma` + TMA kernel whenever the operands' rows are 16-byte
//! multiples (a TMA requirement), else the `mma.sync` one. TF32 on sm_90a devices also takes a
//! `wgmma` kernel, which reads both operands K-major: a 2-D A stored `[K, M]` or B stored
//! `[K, N]` is transposed first (batched ones of those layouts stay on `mma.sync`). For f32: with TF32 allowed on the context (or by [`Gemm::allow_tf32`]), the tensor-core
//! TF32 kernel (128×128 tiles). Otherwise the exact SIMT f32 kernel with the largest tile
//! (128×128, then 128×64, then 64×64) whose grid still gives every SM at least one block; small
//! or skinny products get smaller tiles and so more blocks.
use crate::kernels;
use crate::runtime::error::{DriverResultExt, Error, Result};
use crate::runtime::kernel::{DevPtr, DevPtrMut, DeviceElement, Kernel};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::stream::Stream;
use crate::shapes::{
    gemm_shared_bytes, gemm_threads, ACTIVATION_GELU, ACTIVATION_NONE, ACTIVATION_RELU, GEMM_TILE_LARGE,
    GEMM_TILE_MEDIUM, GEMM_TILE_SMALL, MMA16_SHARED_BYTES, MMA_SHARED_BYTES, MMA_THREADS, MMA_TILE,
    WGMMA_MN_BOX, WGMMA_ROW_BYTES, WGMMA_SHARED_BYTES, WGMMA_THREADS, WGMMA_TILE,
};
use crate::tensor::{element_count, DType, Storage, Tensor};
use cudarc::driver::sys;
use rayon::prelude::*;
use std::sync::Arc;

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
        if d.batch > MAX_GRID_YZ {
            return Err(Error::InvalidArgument {
                op,
                shape: shape.to_vec(),
                reason: format!("a batch of at most {MAX_GRID_YZ} per launch"),
            });
        }
        let sms = stream.device.info.sm_count as usize;
        let blocks = |tile: (usize, usize)| d.n.div_ceil(tile.1) * d.m.div_ceil(tile.0) * d.batch;
        let (ta, tb) = (usize::from(self.transpose_a), usize::from(self.transpose_b));
        let dtype = self.a.dtype();
        let tf32 = self.allow_tf32.unwrap_or(self.a.context().allow_tf32());
        if stream.device.modules.sm90a {
            let (a, b, ta, tb) = (self.a, self.b, self.transpose_a, self.transpose_b);
            if dtype != DType::F32 && self.wgmma_fits(&d, a, b, ta, tb) {
                self.launch_wgmma(d, &out, stream, (a, ta), (b, tb))?;
                return Ok(out);
            }
            if dtype == DType::F32 && tf32 && self.launch_tf32_wgmma(d, &out, stream)? {
                return Ok(out);
            }
        }
        let (kernel, tile, threads, shared_bytes) = if dtype != DType::F32 {
            let kernel = GemmKernel::Half(HALF_KERNELS[dtype.index() - 1][ta][tb]);
            (kernel, MMA_TILE, MMA_THREADS, MMA16_SHARED_BYTES)
        } else if tf32 {
            (GemmKernel::F32(TF32_KERNELS[ta][tb]), MMA_TILE, MMA_THREADS, MMA_SHARED_BYTES)
        } else {
            let (tile, size) = [(GEMM_TILE_LARGE, 0), (GEMM_TILE_MEDIUM, 1)]
                .into_iter()
                .find(|&(t, _)| blocks(t) >= sms)
                .unwrap_or((GEMM_TILE_SMALL, 2));
            let kernel = GemmKernel::F32(SIMT_F32_KERNELS[size][ta][tb]);
            (kernel, tile, gemm_threads(tile), gemm_shared_bytes(tile))
        };
        let (grid_x, grid_y) = (d.n.div_ceil(tile.1), d.m.div_ceil(tile.0));
        if grid_y > MAX_GRID_YZ {
            return Err(Error::InvalidArgument {
                op,
                shape: shape.to_vec(),
                reason: "M is too large for one launch".into(),
            });
        }
        let cfg = LaunchConfig {
            grid: (grid_x as u32, grid_y as u32, d.batch as u32),
            block: (threads as u32, 1, 1),
            shared_bytes: shared_bytes as u32,
        };
        // SAFETY: `gemm_{f32_<tile>,tf32,f16,bf16}_<ta><tb>(a, b, c, bias, out, m, n, k,
        // stride_a, stride_b, stride_c, alpha, beta, activation)`: every pointer is a live buffer
        // of this stream whose shape `dims()` checked against m, n, k and the batch strides (c
        // and bias may be null); `out` is fresh; block, grid and dynamic shared memory are the
        // kernel's.
        unsafe {
            match kernel {
                GemmKernel::F32(k) => k.launch(stream, cfg, self.gemm_args(&d, &out)),
                GemmKernel::Half(k) => k.launch(stream, cfg, self.gemm_args(&d, &out)),
            }?
        };
        Ok(out)
    }

    /// The arguments of the mma.sync and SIMT kernels.
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

    /// Whether the TMA-fed kernel can take `a` and `b` (transposed as `ta`, `tb`): every row
    /// (and each batch) starts on a 16-byte boundary, as tensor maps require.
    fn wgmma_fits(&self, d: &Dims, a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> bool {
        let (lda, ldb) = (if ta { d.m } else { d.k }, if tb { d.k } else { d.n });
        let per_16_bytes = 16 / a.dtype().size_bytes();
        let aligned = |ptr: u64| ptr % 16 == 0;
        d.k > 0
            && lda % per_16_bytes == 0
            && ldb % per_16_bytes == 0
            && aligned(a.device_ptr())
            && aligned(b.device_ptr())
            && d.m.max(d.n).max(d.k) < 1 << 31
    }

    /// TF32 through `wgmma` where it fits: both operands K-major (a 2-D operand in the other
    /// layout is transposed first). Returns whether it launched.
    fn launch_tf32_wgmma(&self, d: Dims, out: &Tensor, stream: &Arc<Stream>) -> Result<bool> {
        let batched = |t: &Tensor| t.rank() == 3;
        if (self.transpose_a && batched(self.a)) || (!self.transpose_b && batched(self.b)) || d.k % 4 != 0 {
            return Ok(false);
        }
        // Both transposes have K rows; past the transpose's limit, `mma.sync` takes the product.
        let transposes = self.transpose_a || !self.transpose_b;
        if transposes && !Tensor::transpose_fits(d.k) {
            return Ok(false);
        }
        let a_t = if self.transpose_a { Some(self.a.transpose()?) } else { None };
        let b_t = if self.transpose_b { None } else { Some(self.b.transpose()?) };
        let (a, b) = (a_t.as_ref().unwrap_or(self.a), b_t.as_ref().unwrap_or(self.b));
        if !self.wgmma_fits(&d, a, b, false, true) {
            return Ok(false);
        }
        self.launch_wgmma(d, out, stream, (a, false), (b, true))?;
        Ok(true)
    }

    /// The `wgmma` kernel on `a` and `b` (transposed as flagged): A's and B's tensor maps go to
    /// the device, then the launch.
    fn launch_wgmma(
        &self,
        d: Dims,
        out: &Tensor,
        stream: &Arc<Stream>,
        (a, ta): (&Tensor, bool),
        (b, tb): (&Tensor, bool),
    ) -> Result<()> {
        let op = self.op;
        let dtype = a.dtype();
        // A is [M, K] (K-major) or, transposed, [K, M]; B is [K, N] or, transposed, [N, K]. A
        // K-major operand moves as one box of 128 bytes of k × its tile rows; an M/N-major one
        // as boxes of 64 rows × 128 bytes of k.
        let row = WGMMA_ROW_BYTES / dtype.size_bytes();
        let map =
            |t: &Tensor, rows_tile: usize, k_major: bool, (outer, inner): (usize, usize), stride: usize| {
                let boxed = if k_major { (row, rows_tile) } else { (WGMMA_MN_BOX, row) };
                tensor_map(dtype, t.device_ptr(), (inner, outer, d.batch), stride, boxed)
            };
        let map_a = if ta {
            map(a, WGMMA_TILE.0, false, (d.k, d.m), d.stride_a)?
        } else {
            map(a, WGMMA_TILE.0, true, (d.m, d.k), d.stride_a)?
        };
        let map_b = if tb {
            map(b, WGMMA_TILE.1, true, (d.n, d.k), d.stride_b)?
        } else {
            map(b, WGMMA_TILE.1, false, (d.k, d.n), d.stride_b)?
        };
        let maps: Vec<u64> = map_a.opaque.iter().chain(map_b.opaque.iter()).copied().collect();
        let maps_dev = stream.device.pool.alloc(stream, maps.len() * 8, op)?;
        // SAFETY: the fresh buffer of this stream holds exactly the copied words (see `copy_htod`
        // on the pageable source; u64 has no padding); the launch below is ordered after the copy on this stream.
        unsafe { stream.copy_htod_const(maps_dev.ptr(), &maps) }?;

        let tiles = d.m.div_ceil(WGMMA_TILE.0) * d.n.div_ceil(WGMMA_TILE.1);
        if tiles > i32::MAX as usize {
            return Err(Error::InvalidArgument {
                op,
                shape: vec![d.m, d.n],
                reason: "too many output tiles for one launch".into(),
            });
        }
        let cfg = LaunchConfig {
            grid: (tiles as u32, 1, d.batch as u32),
            block: (WGMMA_THREADS as u32, 1, 1),
            shared_bytes: WGMMA_SHARED_BYTES as u32,
        };
        let maps = maps_dev.dev_ptr();
        // SAFETY: `gemm_wgmma_<dtype>_<ta><tb>(maps, c, bias, out, m, n, k, stride_c, alpha, beta,
        // activation, batched_a, batched_b)`: `maps` holds A's and B's tensor maps, made above
        // for the live buffers of A and B with the shapes and strides `dims()` checked; c and bias
        // (may be null) and the fresh `out` are live buffers of this stream of the shapes checked;
        // block, grid and dynamic shared memory are the kernel's. `maps_dev` returns to the
        // stream-ordered pool after this call, so no later work reuses it before the kernel ends;
        // pool blocks are 256-byte aligned, so both maps are 64-byte aligned. The kernel fences the
        // tensor-map proxy on both maps before its first TMA copy, since the block may have held
        // an earlier launch's maps at the same address.
        unsafe {
            if dtype == DType::F32 {
                kernels::gemm_wgmma_tf32_nt.launch(stream, cfg, self.wgmma_args(maps, &d, out))
            } else {
                let kernel = WGMMA_KERNELS[dtype.index() - 1][usize::from(ta)][usize::from(tb)];
                kernel.launch(stream, cfg, self.wgmma_args(maps, &d, out))
            }
        }
    }

    /// The arguments of the `wgmma` kernels after the tensor maps `maps`.
    fn wgmma_args<E: DeviceElement>(&self, maps: DevPtr<u8>, d: &Dims, out: &Tensor) -> WgmmaArgs<E> {
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

/// An mma.sync or SIMT GEMM kernel on f32 or 16-bit buffers.
enum GemmKernel {
    F32(Kernel<GemmArgs<f32>>),
    Half(Kernel<GemmArgs<u16>>),
}

/// `[A transposed][B transposed]`.
type ByTranspose<A> = [[Kernel<A>; 2]; 2];

/// The largest grid y and z of a launch (the batch is the grid's z in every GEMM kernel).
const MAX_GRID_YZ: usize = 65_535;

/// `[tile size][A transposed][B transposed]`.
const SIMT_F32_KERNELS: [ByTranspose<GemmArgs<f32>>; 3] = [
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

/// `[f16, bf16][A transposed][B transposed]`.
const HALF_KERNELS: [ByTranspose<GemmArgs<u16>>; 2] = [
    [[kernels::gemm_f16_nn, kernels::gemm_f16_nt], [kernels::gemm_f16_tn, kernels::gemm_f16_tt]],
    [[kernels::gemm_bf16_nn, kernels::gemm_bf16_nt], [kernels::gemm_bf16_tn, kernels::gemm_bf16_tt]],
];

/// `[A transposed][B transposed]`.
const TF32_KERNELS: ByTranspose<GemmArgs<f32>> =
    [[kernels::gemm_tf32_nn, kernels::gemm_tf32_nt], [kernels::gemm_tf32_tn, kernels::gemm_tf32_tt]];

/// The `wgmma` kernels' arguments over elements `E`: the tensor maps, c, bias, out, m, n, k,
/// stride_c, alpha, beta, the activation, whether A and B are batched.
type WgmmaArgs<E> =
    (DevPtr<u8>, DevPtr<E>, DevPtr<E>, DevPtrMut<E>, usize, usize, usize, usize, f32, f32, u32, u32, u32);

/// `[f16, bf16][A transposed][B transposed]`.
const WGMMA_KERNELS: [ByTranspose<WgmmaArgs<u16>>; 2] = [
    [
        [kernels::gemm_wgmma_f16_nn, kernels::gemm_wgmma_f16_nt],
        [kernels::gemm_wgmma_f16_tn, kernels::gemm_wgmma_f16_tt],
    ],
    [
        [kernels::gemm_wgmma_bf16_nn, kernels::gemm_wgmma_bf16_nt],
        [kernels::gemm_wgmma_bf16_tn, kernels::gemm_wgmma_bf16_tt],
    ],
];

/// A 3-D TMA tensor map of a row-major operand: `dims` = (elements per row, rows, batch),
/// `batch_stride` elements between batches (0: one matrix shared by every batch), boxes of
/// `boxed` = (elements, rows), 128-byte swizzle, zero fill outside.
fn tensor_map(
    dtype: DType,
    ptr: u64,
    (inner, rows, batch): (usize, usize, usize),
    batch_stride: usize,
    boxed: (usize, usize),
) -> Result<sys::CUtensorMap> {
    let data_type = match dtype {
        DType::F32 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        DType::BF16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        _ => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    };
    let (batch, batch_stride) = if batch_stride == 0 { (1, rows * inner) } else { (batch, batch_stride) };
    let dims = [inner as u64, rows as u64, batch as u64];
    let size = dtype.size_bytes() as u64;
    let strides = [inner as u64 * size, batch_stride as u64 * size];
    let box_dims = [boxed.0 as u32, boxed.1 as u32, 1];
    let element_strides = [1u32; 3];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array has the rank's length (strides one less); `map` is written by the call.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            3,
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
