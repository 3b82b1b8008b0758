//! 2-D convolution, NCHW, f32: [`conv2d`] (bias fused, but for the pointwise TF32 forward below,
//! which adds it in a second pass), [`conv2d_backward_data`], [`conv2d_backward_weight`],
//! [`conv2d_backward_bias`]. Kernels: `gpu-kernels/src/conv/`.
//!
//! Forward and both backward products are implicit GEMMs (the im2col gather happens in the tile
//! loaders), but for the forward of a pointwise convolution under TF32 (a 1×1 filter at stride
//! 1 without padding, planes of at least `POINTWISE_MIN_PLANE` pixels): a plain GEMM batched over
//! the images with W shared (`[K, C] · [C, H·W]` per image) on matmul's TF32 tensor-core kernels
//! (on Hopper the swapped `wgmma` one, which reads each image's planes as they are).
//! In exact f32 the implicit GEMM's SIMT tiles, whose M is N·P·Q rather than K, are faster there.
//! Precision as in matmul: f32 by default, TF32 tensor cores when the context allows TF32
//! ([`Context::set_allow_tf32`](crate::Context::set_allow_tf32)).
//! The data gradient of a stride-1 convolution is the forward of dy with the filter bank
//! transposed and flipped (`conv2d_flip_weights_f32`), and runs on the forward's kernels.
//! Each implicit GEMM takes the tile and the split of its reduction whose busiest SM has the
//! least work (`conv_plan`); split partials are added in a fixed order, so every op here is
//! deterministic.
//! On Hopper, stride-1 convolutions of at least `WGMMA_MIN_FLOPS` run on the `wgmma` kernels
//! instead: `WgmmaForward` (x transposed to NHWC and w to `[K, R·S, C]` first, C a multiple of 4,
//! not the pointwise layers; in f32 as 3xTF32 from `F32X3_MIN_FLOPS`, every k-step's sums
//! promoted to f32 registers: 2.5e-7 relative error over 4608 products, against 2.3e-7 on the FMA
//! kernels), `WgmmaWeight` (W and Q multiples of 4, split over the SMs; in f32 as 3xTF32 with
//! promoted sums too, the low parts made in shared memory), the data gradient through the
//! flipped forward; each with its tile and split chosen the same way. `FERROCUDA_CONV_WGMMA=0`
//! keeps every convolution on the FMA and `mma.sync` kernels, `=1` takes the `wgmma` ones at any
//! size (tests).
use crate::kernels;
use crate::ops::matmul::Gemm;
use crate::ops::matmul::{tensor_map_tiled, tensor_maps};
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{DevPtr, DevPtrMut, Kernel};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::pool::DeviceBuffer;
use crate::shapes::{
    gemm_reduce_per_thread, gemm_shared_bytes, gemm_threads, TensorMaps, ACTIVATION_NONE, CONV_BIAS_BLOCK,
    CONV_COL2IM_BLOCK, CONV_MEDIUM_BLOCKS_PER_SM, CONV_SPLIT_ALIGN, ELEMENTWISE_BLOCK, GEMM_REDUCE_THREADS,
    GEMM_TILE_LARGE, GEMM_TILE_MEDIUM, GEMM_TILE_SMALL, MMA_SHARED_BYTES, MMA_THREADS, MMA_TILE,
    WGMMA_ROW_BYTES, WGMMA_SHARED_BYTES, WGMMA_THREADS, WGMMA_TILES,
};
use crate::tensor::{Storage, Tensor};
use crate::DType;
use rayon::prelude::*;

/// Stride, padding and dilation of a 2-D convolution, as `(height, width)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dParams {
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub dilation: (usize, usize),
}

impl Default for Conv2dParams {
    /// Stride 1, no padding, dilation 1.
    fn default() -> Self {
        Conv2dParams { stride: (1, 1), padding: (0, 0), dilation: (1, 1) }
    }
}

impl Conv2dParams {
    pub fn new() -> Self {
        Self::default()
    }
    /// The same stride along both axes.
    pub fn stride(self, s: usize) -> Self {
        Conv2dParams { stride: (s, s), ..self }
    }
    /// The same zero padding on every side.
    pub fn padding(self, p: usize) -> Self {
        Conv2dParams { padding: (p, p), ..self }
    }
    /// The same dilation along both axes.
    pub fn dilation(self, d: usize) -> Self {
        Conv2dParams { dilation: (d, d), ..self }
    }

    /// The output's `(P, Q)` for an input of `(h, w)` and a kernel of `(r, s)`; `None` when the
    /// (dilated) kernel does not fit the padded input or a stride or dilation is 0.
    pub fn output_hw(&self, (h, w): (usize, usize), (r, s): (usize, usize)) -> Option<(usize, usize)> {
        let axis = |len: usize, k: usize, stride: usize, pad: usize, dilation: usize| {
            if stride == 0 || dilation == 0 || k == 0 {
                return None;
            }
            let span = dilation.checked_mul(k - 1)?.checked_add(1)?;
            let padded = len.checked_add(pad.checked_mul(2)?)?;
            padded.checked_sub(span).map(|room| room / stride + 1)
        };
        Some((
            axis(h, r, self.stride.0, self.padding.0, self.dilation.0)?,
            axis(w, s, self.stride.1, self.padding.1, self.dilation.1)?,
        ))
    }
}

/// A validated convolution: x `[n, c, h, w]`, w `[k, c, r, s]`, y `[n, k, p, q]`.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    r: usize,
    s: usize,
    p: usize,
    q: usize,
    params: Conv2dParams,
}

/// Elements a tensor of the convolution may have: the kernels index in 32 bits.
const MAX_ELEMENTS: usize = (1 << 31) - 1;

/// The smallest plane (P·Q pixels) a pointwise convolution runs as per-image GEMMs: each image's
/// product is then at least two 256-wide (or four 128-wide) tiles across; narrower planes (a
/// ResNet's 7×7 stages) leave the GEMMs' tiles mostly empty, where the implicit GEMM's
/// N·P·Q-long side fills them.
const POINTWISE_MIN_PLANE: usize = 512;
/// The most images a pointwise convolution batches into one GEMM (its grid's z extent).
const POINTWISE_MAX_IMAGES: usize = 65_535;

impl Geometry {
    fn check(op: &'static str, x: &[usize], w: &[usize], params: Conv2dParams) -> Result<Geometry> {
        let invalid =
            |shape: &[usize], reason: String| Error::InvalidArgument { op, shape: shape.to_vec(), reason };
        let &[n, c, h, wd] = x else {
            return Err(invalid(x, "x must be [N, C, H, W]".into()));
        };
        let &[k, wc, r, s] = w else {
            return Err(invalid(w, "w must be [K, C, R, S]".into()));
        };
        let Conv2dParams { stride, padding, dilation } = params;
        if stride.0 == 0 || stride.1 == 0 || dilation.0 == 0 || dilation.1 == 0 {
            return Err(invalid(
                w,
                format!("stride {stride:?} and dilation {dilation:?} must be at least 1"),
            ));
        }
        if x.contains(&0) {
            return Err(invalid(x, "x has a zero-size axis".into()));
        }
        if w.contains(&0) {
            return Err(invalid(w, "w has a zero-size axis".into()));
        }
        if c != wc {
            return Err(Error::ShapeMismatch { op, lhs: x.to_vec(), rhs: w.to_vec() });
        }
        let Some((p, q)) = params.output_hw((h, wd), (r, s)) else {
            return Err(invalid(
                w,
                format!(
                    "the kernel {r}×{s} at dilation {dilation:?} is larger than the padded input {}×{}",
                    h + 2 * padding.0,
                    wd + 2 * padding.1
                ),
            ));
        };
        let g = Geometry { n, c, h, w: wd, k, r, s, p, q, params };
        let elements = |dims: [usize; 4]| dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let sizes = [elements(g.x_shape()), elements(g.w_shape()), elements(g.y_shape())];
        // The padded extents bound every coordinate the kernels form (in 32 bits); `output_hw`
        // computed them without overflow.
        let padded = [h + 2 * padding.0, wd + 2 * padding.1];
        if sizes.iter().any(|s| s.is_none_or(|s| s > MAX_ELEMENTS))
            || padded.iter().any(|&v| v > MAX_ELEMENTS)
        {
            return Err(invalid(
                x,
                format!("a tensor of this convolution (w {w:?}) has 2^31 elements or more"),
            ));
        }
        Ok(g)
    }

    /// Multiplies and adds of the forward (and of each gradient): 2·N·K·P·Q·C·R·S.
    fn flops(&self) -> f64 {
        2.0 * [self.n, self.k, self.p, self.q, self.c, self.r, self.s]
            .iter()
            .map(|&d| d as f64)
            .product::<f64>()
    }

    fn x_shape(&self) -> [usize; 4] {
        [self.n, self.c, self.h, self.w]
    }
    fn y_shape(&self) -> [usize; 4] {
        [self.n, self.k, self.p, self.q]
    }
    fn w_shape(&self) -> [usize; 4] {
        [self.k, self.c, self.r, self.s]
    }

    /// A 1×1 filter at stride 1 without padding over planes wide enough for per-image GEMMs (see
    /// `POINTWISE_MIN_PLANE`): y = W · x per image.
    fn pointwise(&self) -> bool {
        let Conv2dParams { stride, padding, .. } = self.params;
        (self.r, self.s, stride, padding) == (1, 1, (1, 1), (0, 0))
            && self.p * self.q >= POINTWISE_MIN_PLANE
            && self.n <= POINTWISE_MAX_IMAGES
    }

    /// Whether the backward data gradient runs as the forward of `dy` with the flipped filter
    /// bank (`conv2d_flip_weights_f32`): a stride-1 convolution whose padding is at most its
    /// dilated filter's reach, so that the forward's padding `dilation·(R−1) − padding` exists.
    fn flips_to_forward(&self) -> bool {
        let Conv2dParams { stride, padding, dilation } = self.params;
        stride == (1, 1) && padding.0 <= dilation.0 * (self.r - 1) && padding.1 <= dilation.1 * (self.s - 1)
    }

    /// The geometry of that forward: dy `[N, K, P, Q]` ⊛ `[C, K, R, S]` → `[N, C, H, W]`.
    fn flipped(&self) -> Geometry {
        let Conv2dParams { padding, dilation, .. } = self.params;
        let params = Conv2dParams {
            stride: (1, 1),
            padding: (dilation.0 * (self.r - 1) - padding.0, dilation.1 * (self.s - 1) - padding.1),
            dilation,
        };
        Geometry { c: self.k, h: self.p, w: self.q, k: self.c, p: self.h, q: self.w, params, ..*self }
    }

    /// Whether the backward data gradient is cheaper as `cols = Wᵀ · dy` plus a gather than as
    /// the implicit GEMM. The implicit GEMM multiplies over every tap (all but 1/(sh·sw) of them
    /// zero) and pads C to a 64-wide tile; the GEMM pads C·R·S to 128 and moves cols twice
    /// (counted at 10 flops a byte, the f32 pipes' rate over DRAM's). A 2× margin keeps the
    /// implicit GEMM wherever the two are close (every stride-1 layer with C ≥ 64).
    fn col2im_wins(&self) -> bool {
        let crs = self.c * self.r * self.s;
        let cols = [self.n, crs, self.p, self.q].iter().map(|&d| d as f64).product::<f64>();
        let taps = (self.k * self.r * self.s) as f64;
        let implicit = (self.n * self.h * self.w) as f64 * self.c.next_multiple_of(64) as f64 * taps;
        let gemm =
            (self.n * self.p * self.q * self.k) as f64 * crs.next_multiple_of(128) as f64 + 80.0 * cols;
        cols <= (1u64 << 28) as f64 && 2.0 * gemm < implicit
    }

    /// The input coordinate of output `o` at tap `t` along an axis, if inside `[0, len)`.
    fn input(&self, o: usize, t: usize, axis: usize, len: usize) -> Option<usize> {
        let (stride, pad, dilation) = if axis == 0 {
            (self.params.stride.0, self.params.padding.0, self.params.dilation.0)
        } else {
            (self.params.stride.1, self.params.padding.1, self.params.dilation.1)
        };
        (o * stride + t * dilation).checked_sub(pad).filter(|&i| i < len)
    }
}

fn check_shape(op: &'static str, t: &Tensor, expected: &[usize]) -> Result<()> {
    if t.shape() != expected {
        return Err(Error::ShapeMismatch { op, lhs: t.shape().to_vec(), rhs: expected.to_vec() });
    }
    Ok(())
}

/// The arguments every implicit-GEMM kernel takes: `a`, `b`, `bias`, `out`, the geometry
/// (n, c, h, w, k, r, s, p, q, stride, padding, dilation) and `k_chunk`.
type ImplicitGemmArgs = (
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
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
);
/// One implicit-GEMM op's kernels: SIMT large, medium, small tiles (as `SIMT_TILES`), then TF32.
type Kernels = [Kernel<ImplicitGemmArgs>; 4];
/// The TF32 kernel's index in [`Kernels`].
const TF32_KERNEL: usize = 3;
const FORWARD: Kernels = [
    kernels::conv2d_fwd_f32_large,
    kernels::conv2d_fwd_f32_medium,
    kernels::conv2d_fwd_f32_small,
    kernels::conv2d_fwd_tf32,
];
const BACKWARD_DATA: Kernels = [
    kernels::conv2d_bwd_data_f32_large,
    kernels::conv2d_bwd_data_f32_medium,
    kernels::conv2d_bwd_data_f32_small,
    kernels::conv2d_bwd_data_tf32,
];
const BACKWARD_WEIGHT: Kernels = [
    kernels::conv2d_bwd_weight_f32_large,
    kernels::conv2d_bwd_weight_f32_medium,
    kernels::conv2d_bwd_weight_f32_small,
    kernels::conv2d_bwd_weight_tf32,
];

/// One implicit-GEMM op, ready to launch.
struct ImplicitGemm<'a> {
    op: &'static str,
    kernels: Kernels,
    a: &'a Tensor,
    b: &'a Tensor,
    g: Geometry,
    /// The GEMM's (M, N, K).
    mnk: (usize, usize, usize),
    /// The forward's bias (`[K]`, one value per output plane of P·Q).
    bias: Option<&'a Tensor>,
}

/// A kernel with its tile, threads and dynamic shared bytes.
type Choice = (Kernel<ImplicitGemmArgs>, (usize, usize), usize, usize);

/// How an implicit GEMM launches: which of its op's [`Kernels`] and how long a piece of the
/// reduction each `gridDim.z` split takes (`k` itself when unsplit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ConvPlan {
    kernel: usize,
    k_chunk: usize,
}

/// Seconds one SM spends on a multiply-add at cost weight 100 (the large SIMT tile; the TF32
/// `mma.sync` kernel measures about the same on these gathers): ~40 TFLOP/s over 132 SMs.
const MAC_SECONDS: f64 = 2.0 / 0.30e12;
/// DRAM bytes a second that the split partials move at (write, then the split sum's read).
const SPLIT_BYTES_PER_SECOND: f64 = 2.5e12;
/// The split sum's launch and drain.
const SPLIT_LAUNCH_SECONDS: f64 = 4e-6;
/// A tile a kernel computes: its shape, its cost per multiply-add relative to the large SIMT
/// tile's 100 when the SM is full, its warps, and the blocks an SM holds (by ptxas's register
/// counts: large 167 × 256 threads, medium 168 × 128 (capped for three blocks, build.rs), small
/// 219 × 64, TF32 230 × 256).
struct ConvTile {
    shape: (usize, usize),
    weight: f64,
    warps: usize,
    resident: usize,
}

/// The SIMT tiles by kernel index (the 8×8 register tiles all; the smaller tiles stage more
/// operand bytes a multiply-add).
const SIMT_TILES: [ConvTile; 3] = [
    ConvTile { shape: GEMM_TILE_LARGE, weight: 100.0, warps: 8, resident: 1 },
    ConvTile { shape: GEMM_TILE_MEDIUM, weight: 105.0, warps: 4, resident: CONV_MEDIUM_BLOCKS_PER_SM },
    ConvTile { shape: GEMM_TILE_SMALL, weight: 125.0, warps: 2, resident: 4 },
];
/// TF32's `mma.sync` tile at 60: the stem (N = 64, which half-fills its 128 columns) ran 0.377
/// ms on it against 0.328 on the medium SIMT tile (twentieth session), the seed layer 1.34 ms
/// against 2.27 on the large one (fifteenth); both give ~60 in this model.
const TF32_TILE: ConvTile = ConvTile { shape: MMA_TILE, weight: 60.0, warps: 8, resident: 1 };
/// Warps an SM needs before these kernels run at full rate (two a scheduler: one's shared-memory
/// loads and barriers under the other's multiply-adds); fewer run proportionally slower.
const FULL_RATE_WARPS: usize = 8;

/// The plan whose busiest SM finishes first: for every tile (the three SIMT ones, and TF32's
/// where the context allows TF32: a layer that fills the SIMT tiles far better may still run
/// exact) and every split of the reduction into pieces of at least four tensor-core k-steps,
/// the tiles the busiest SM runs (`⌈blocks / SMs⌉`, so a wave with a few blocks past the last
/// full one costs a whole tile) times a tile's work, slowed where the SM holds fewer than
/// `FULL_RATE_WARPS` warps, plus the partials' traffic and the split sum. Ties go to the
/// larger tile and then to fewer splits.
fn conv_plan((m, n, k): (usize, usize, usize), sms: usize, tf32: bool) -> ConvPlan {
    let tf32_tile = tf32.then_some((TF32_KERNEL, &TF32_TILE));
    let most = k.div_ceil(4 * CONV_SPLIT_ALIGN).clamp(1, 65_535);
    let mut best = (f64::INFINITY, ConvPlan { kernel: if tf32 { TF32_KERNEL } else { 0 }, k_chunk: k });
    for (index, t) in SIMT_TILES.iter().enumerate().chain(tf32_tile) {
        let tile = t.shape;
        let blocks = m.div_ceil(tile.0) * n.div_ceil(tile.1);
        // Past four blocks an SM more splits only add partials.
        for wanted in 1..=most.min((4 * sms).div_ceil(blocks)) {
            let k_chunk = if wanted == 1 { k } else { k.div_ceil(wanted).next_multiple_of(CONV_SPLIT_ALIGN) };
            let splits = k.div_ceil(k_chunk);
            if splits != wanted || splits.checked_mul(m * n).is_none_or(|e| e > MAX_ELEMENTS) {
                continue;
            }
            let per_sm = (blocks * splits).div_ceil(sms);
            let rate =
                (per_sm.min(t.resident) * t.warps).min(FULL_RATE_WARPS) as f64 / FULL_RATE_WARPS as f64;
            let work = (per_sm * tile.0 * tile.1 * k_chunk) as f64 * t.weight / 100.0;
            let mut seconds = work * MAC_SECONDS / rate;
            if splits > 1 {
                seconds += SPLIT_LAUNCH_SECONDS + (2 * splits * m * n * 4) as f64 / SPLIT_BYTES_PER_SECOND;
            }
            if seconds < best.0 {
                best = (seconds, ConvPlan { kernel: index, k_chunk });
            }
        }
    }
    best.1
}

impl ImplicitGemm<'_> {
    /// Compute the op into `out` as [`conv_plan`] says: one launch, or the reduction split and
    /// the partial sums added in order by `conv2d_split_sum_f32` (which also adds the bias).
    fn run(&self, out: &Tensor) -> Result<()> {
        let ctx = self.a.context();
        let stream = ctx.stream(self.op)?;
        let sms = stream.device.info.sm_count as usize;
        let (_, _, k) = self.mnk;
        let ConvPlan { kernel, k_chunk } = conv_plan(self.mnk, sms, ctx.allow_tf32());
        let choice = match kernel {
            TF32_KERNEL => (self.kernels[TF32_KERNEL], MMA_TILE, MMA_THREADS, MMA_SHARED_BYTES),
            simt => {
                let tile = SIMT_TILES[simt].shape;
                (self.kernels[simt], tile, gemm_threads(tile), gemm_shared_bytes(tile))
            }
        };
        let splits = k.div_ceil(k_chunk);
        let bias = Tensor::ptr_or_null(self.bias);
        if splits == 1 {
            return self.launch(choice, (bias, out.ptr_mut()), 1, k);
        }
        let len = out.len();
        if splits.checked_mul(len).is_none_or(|total| total > MAX_ELEMENTS) {
            return Err(Error::InvalidArgument {
                op: self.op,
                shape: out.shape().to_vec(),
                reason: format!("{splits} partial results would have 2^31 elements or more"),
            });
        }
        let partial = Tensor::uninit(ctx, &[splits, len], self.op)?;
        self.launch(choice, (DevPtr::null(), partial.ptr_mut()), splits, k_chunk)?;
        add_splits(self.op, (&partial, splits), self.bias, out, (self.g.p * self.g.q, self.g.k))
    }

    /// Launch over `splits` pieces of the reduction, `k_chunk` long each.
    fn launch(
        &self,
        (kernel, tile, threads, shared): Choice,
        (bias, out): (DevPtr<f32>, DevPtrMut<f32>),
        splits: usize,
        k_chunk: usize,
    ) -> Result<()> {
        let (m, n, _) = self.mnk;
        let grid = (m.div_ceil(tile.0), n.div_ceil(tile.1), splits);
        if grid.0 > i32::MAX as usize || grid.1 > 65_535 || grid.2 > 65_535 {
            return Err(Error::InvalidArgument {
                op: self.op,
                shape: self.g.x_shape().to_vec(),
                reason: "too large for one launch".into(),
            });
        }
        let cfg = LaunchConfig {
            grid: (grid.0 as u32, grid.1 as u32, grid.2 as u32),
            block: (threads as u32, 1, 1),
            shared_bytes: shared as u32,
        };
        let stream = self.a.context().stream(self.op)?;
        let g = &self.g;
        let Conv2dParams { stride, padding, dilation } = g.params;
        // SAFETY: `conv2d_<op>_<f32_tile|tf32>(a, b, bias, out, n, c, h, w, k, r, s, p, q,
        // stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, k_chunk)`: `a` and `b` are live device
        // tensors whose shapes `Geometry::check` and the caller matched to the geometry (every
        // tensor < 2^31 elements), `bias` is null or K floats, `out` is a fresh buffer of the
        // op's output times `splits`; grid, block and shared memory are the kernel's.
        let args = (
            self.a.ptr(),
            self.b.ptr(),
            bias,
            out,
            g.n,
            g.c,
            g.h,
            g.w,
            g.k,
            g.r,
            g.s,
            g.p,
            g.q,
            stride.0,
            stride.1,
            padding.0,
            padding.1,
            dilation.0,
            dilation.1,
            k_chunk,
        );
        unsafe { kernel.launch(stream, cfg, args) }
    }
}

/// `out = Σ_z partial[z] + bias` per output element, the `splits` pieces of `partial` (each
/// `out.len()` floats) added in order, the bias (`[channels]`, planes of `plane` elements) last.
fn add_splits(
    op: &'static str,
    (partial, splits): (&Tensor, usize),
    bias: Option<&Tensor>,
    out: &Tensor,
    (plane, channels): (usize, usize),
) -> Result<()> {
    let len = out.len();
    debug_assert_eq!(partial.len(), splits * len);
    let stream = out.context().stream(op)?;
    let cfg = LaunchConfig::covering(len, ELEMENTWISE_BLOCK);
    let args = (partial.ptr(), Tensor::ptr_or_null(bias), out.ptr_mut(), len, splits, plane, channels);
    // SAFETY: `conv2d_split_sum_f32(partial, bias, out, len, splits, plane, channels)`: `partial`
    // holds splits·len floats written before on this stream (the callers' launches or GEMM),
    // `out` is a distinct buffer of len floats, `bias` is null or K = channels floats, and
    // `Geometry::check` bounded len below 2^31.
    unsafe { kernels::conv2d_split_sum_f32.launch(stream, cfg, args) }
}

/// `y = x ⊛ w + bias`: x `[N, C, H, W]`, w `[K, C, R, S]`, bias `[K]` → `[N, K, P, Q]`
/// (cross-correlation, as in PyTorch).
pub fn conv2d(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, p: Conv2dParams) -> Result<Tensor> {
    const OP: &str = "conv2d";
    x.check_peer(OP, w)?;
    x.require_f32(OP)?;
    let g = Geometry::check(OP, x.shape(), w.shape(), p)?;
    if let Some(b) = bias {
        x.check_peer(OP, b)?;
        check_shape(OP, b, &[g.k])?;
    }
    match x.storage() {
        Storage::Cpu(_) => {
            let bias = bias.map(Tensor::to_vec).transpose()?;
            let y = cpu_forward(&g, &x.to_vec()?, &w.to_vec()?, bias.as_deref());
            Ok(Tensor::from_cpu(x.context(), &g.y_shape(), y))
        }
        Storage::Cuda(_) => forward_cuda(OP, &g, x, w, bias),
    }
}

/// The forward on the GPU, shapes checked: `g` describes `x ⊛ w`.
fn forward_cuda(
    op: &'static str,
    g: &Geometry,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    if let Some(plan) = WgmmaForward::plan(op, g, x)? {
        return plan.run(op, x, w, bias);
    }
    if g.pointwise() && x.context().allow_tf32() {
        let x_planes = x.reshape(&[g.n, g.c, g.h * g.w])?;
        let planes = Gemm::new(&w.reshape(&[g.k, g.c])?, &x_planes).run()?.reshape(&g.y_shape())?;
        let Some(bias) = bias else { return Ok(planes) };
        let y = Tensor::uninit(x.context(), &g.y_shape(), op)?;
        add_splits(op, (&planes, 1), Some(bias), &y, (g.p * g.q, g.k))?;
        return Ok(y);
    }
    let y = Tensor::uninit(x.context(), &g.y_shape(), op)?;
    ImplicitGemm {
        op,
        kernels: FORWARD,
        a: x,
        b: w,
        g: *g,
        mnk: (g.n * g.p * g.q, g.k, g.c * g.r * g.s),
        bias,
    }
    .run(&y)?;
    Ok(y)
}

/// A `wgmma` forward tile: its index in `WGMMA_TILES` (pixels × channels), its cost weight (the
/// 128×64 tile's `m64n64` products read more shared memory per flop), its kernel.
type ForwardTile = (usize, f64, Kernel<WgmmaForwardArgs>);

/// The TF32 forward's tiles.
const WGMMA_FORWARD_TILES: [ForwardTile; 3] = [
    (0, 1.0, kernels::conv2d_fwd_wgmma_tf32),
    (1, 1.0, kernels::conv2d_fwd_wgmma_tf32_256x128),
    (3, 1.2, kernels::conv2d_fwd_wgmma_tf32_128x64),
];

/// The 3xTF32 forward's tiles: those whose consumers have registers for the promoted sums beside
/// a k-step's.
const F32X3_FORWARD_TILES: [ForwardTile; 2] =
    [(4, 1.0, kernels::conv2d_fwd_wgmma_f32x3_128x128), (3, 1.2, kernels::conv2d_fwd_wgmma_f32x3_128x64)];

/// `conv2d_fwd_wgmma_{tf32,f32x3}*(maps, bias, out, m, n, k, c_steps, taps_s, dilation_h,
/// dilation_w, padding_h, padding_w, box_q_shift, box_p_shift, boxes_q, boxes_p, images,
/// channels, rows, cols)`.
type WgmmaForwardArgs = (
    TensorMaps,
    DevPtr<f32>,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
);

/// Channels of one `wgmma` k-step (a 128-byte row of f32).
const WGMMA_CHANNELS: usize = WGMMA_ROW_BYTES / 4;
/// The fewest flops (2·N·K·P·Q·C·R·S) a convolution takes to the `wgmma` kernels: below, their
/// extra launches (the layout transposes) cost more than the faster product saves. (1,32,64,64)⊛(64,32,3,3), 151 MFLOP: 0.019–0.025 ms in TF32 against 0.020–0.022 on
/// `mma.sync`, 0.027–0.030 in 3xTF32 against 0.025–0.026 on the FMA kernels; train_cnn's layers
/// (at most 29 MFLOP) ran 17% slower on `wgmma`.
const WGMMA_MIN_FLOPS: f64 = (1u64 << 28) as f64;
/// As `WGMMA_MIN_FLOPS` for 3xTF32 (three products, two outputs a transpose).
const F32X3_MIN_FLOPS: f64 = (1u64 << 30) as f64;

/// The forward on Hopper's `wgmma` (`gpu-kernels/src/conv/forward_wgmma.rs`), TF32 or, for exact
/// f32, 3xTF32: output pixels in boxes of `images × 2^box_shift.1 × 2^box_shift.0` (images × rows
/// × columns), one box per tile row block, channels along the tile's columns.
#[derive(Clone, Copy, Debug)]
struct WgmmaForward {
    geometry: Geometry,
    /// 3xTF32: the context does not allow TF32.
    split: bool,
    /// Index in `WGMMA_FORWARD_TILES` (TF32) or `F32X3_FORWARD_TILES`.
    tile: usize,
    box_shift: (u32, u32),
    images: usize,
    /// Boxes along Q, P and the images.
    boxes: (usize, usize, usize),
    sms: usize,
}

impl WgmmaForward {
    /// The plan for `g` on `x`'s device, if the `wgmma` forward takes it: as `wgmma_enabled`,
    /// stride 1, C a multiple of 4 (TMA reads NHWC rows of 16-byte multiples), N and K within a
    /// grid's z extent (the layout transposes).
    fn plan(op: &'static str, g: &Geometry, x: &Tensor) -> Result<Option<Self>> {
        let min_flops = if x.context().allow_tf32() { WGMMA_MIN_FLOPS } else { F32X3_MIN_FLOPS };
        if !wgmma_enabled(x, g, min_flops) {
            return Ok(None);
        }
        // Pointwise layers stay per-image GEMMs: the transpose of x costs more than the product
        // (32×256×56×56 ⊛ 64×256×1×1: 70 µs of transposes, 55 µs of `wgmma`; the GEMMs, on
        // matmul's swapped `wgmma` kernel, 65 µs).
        let fits = g.params.stride == (1, 1)
            && !g.pointwise()
            && g.c % 4 == 0
            && g.n.max(g.k) <= 65_535
            && Tensor::transpose_fits(g.c);
        if !fits {
            return Ok(None);
        }
        let sms = x.context().stream(op)?.device.info.sm_count as usize;
        Ok(Some(Self::for_sms(g, sms, !x.context().allow_tf32())))
    }

    /// k-steps of the reduction: taps × 32-channel pieces of C.
    fn steps(g: &Geometry) -> usize {
        g.r * g.s * g.c.div_ceil(WGMMA_CHANNELS)
    }

    /// The tiles of a TF32 forward, or (`split`) a 3xTF32 one.
    fn tiles(split: bool) -> &'static [ForwardTile] {
        if split {
            &F32X3_FORWARD_TILES
        } else {
            &WGMMA_FORWARD_TILES
        }
    }

    /// The tile (TF32, or 3xTF32 with `split`) and pixel boxes whose busiest SM has the least
    /// work (tiles per SM, rounded up, × the tile's area × its cost weight), on `sms` SMs.
    fn for_sms(g: &Geometry, sms: usize, split: bool) -> Self {
        let mut best = (f64::INFINITY, None);
        for (index, &(kind, weight, _)) in Self::tiles(split).iter().enumerate() {
            let (rows, cols) = WGMMA_TILES[kind];
            let box_q = g.q.next_power_of_two().min(rows);
            let box_p = g.p.next_power_of_two().min(rows / box_q);
            let images = rows / (box_q * box_p);
            let boxes = (g.q.div_ceil(box_q), g.p.div_ceil(box_p), g.n.div_ceil(images));
            let tiles = boxes.0 * boxes.1 * boxes.2 * g.k.div_ceil(cols);
            let cost = tiles.div_ceil(sms) as f64 * (rows * cols) as f64 * weight;
            if cost < best.0 {
                let box_shift = (box_q.trailing_zeros(), box_p.trailing_zeros());
                let plan = Self { geometry: *g, split, tile: index, box_shift, images, boxes, sms };
                best = (cost, Some(plan));
            }
        }
        best.1.expect("at least one tile")
    }

    /// The output tiles: pixel boxes × channel blocks.
    fn units(&self) -> usize {
        let cols = WGMMA_TILES[Self::tiles(self.split)[self.tile].0].1;
        self.pixel_boxes() * self.geometry.k.div_ceil(cols)
    }

    /// Pixel boxes over the output: along Q × along P × image groups.
    fn pixel_boxes(&self) -> usize {
        self.boxes.0 * self.boxes.1 * self.boxes.2
    }

    /// x to NHWC, w to `[K, R·S, C]` (for 3xTF32, each as its TF32 rounding and remainder),
    /// their tensor maps, then the launch.
    fn run(&self, op: &'static str, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let g = &self.geometry;
        let (kind, _, kernel) = Self::tiles(self.split)[self.tile];
        let (rows, cols) = WGMMA_TILES[kind];
        let (x_dims, w_dims) = ((g.n, g.c, g.h * g.w), (g.k, g.c, g.r * g.s));
        let (x_nhwc, w_taps, low) = if self.split {
            let ((x_hi, x_lo), (w_hi, w_lo)) = (
                x.transpose_planes_split(op, x_dims, x_dims.1)?,
                w.transpose_planes_split(op, w_dims, w_dims.1)?,
            );
            (x_hi, w_hi, Some((x_lo, w_lo)))
        } else {
            (x.transpose_planes(op, x_dims)?, w.transpose_planes(op, w_dims)?, None)
        };
        let (c, taps) = (g.c as u64, (g.r * g.s) as u64);
        let row = c * 4;
        let (box_q, box_p) = (1u32 << self.box_shift.0, 1u32 << self.box_shift.1);
        let map_x = |t: &Tensor| {
            tensor_map_tiled(
                DType::F32,
                t.device_ptr(),
                &[c, g.w as u64, g.h as u64, g.n as u64],
                &[row, row * g.w as u64, row * (g.w * g.h) as u64],
                &[WGMMA_CHANNELS as u32, box_q, box_p, self.images as u32],
            )
        };
        let map_w = |t: &Tensor| {
            tensor_map_tiled(
                DType::F32,
                t.device_ptr(),
                &[c, taps, g.k as u64],
                &[row, row * taps],
                &[WGMMA_CHANNELS as u32, 1, cols as u32],
            )
        };
        let mut maps = vec![map_x(&x_nhwc)?, map_w(&w_taps)?];
        if let Some((x_lo, w_lo)) = &low {
            maps.extend([map_x(x_lo)?, map_w(w_lo)?]);
        }
        let ctx = x.context();
        let stream = ctx.stream(op)?;
        let y = Tensor::uninit(ctx, &g.y_shape(), op)?;
        let units = self.units();
        let cfg = LaunchConfig {
            grid: (units.min(self.sms) as u32, 1, 1),
            block: (WGMMA_THREADS as u32, 1, 1),
            shared_bytes: WGMMA_SHARED_BYTES as u32,
        };
        let c_steps = g.c.div_ceil(WGMMA_CHANNELS);
        let Conv2dParams { dilation, padding, .. } = g.params;
        let u = |v: usize| v as u32;
        let args = (
            tensor_maps(&maps),
            Tensor::ptr_or_null(bias),
            y.ptr_mut(),
            self.pixel_boxes() * rows,
            g.k,
            Self::steps(g) * WGMMA_CHANNELS,
            u(c_steps),
            u(g.s),
            u(dilation.0),
            u(dilation.1),
            u(padding.0),
            u(padding.1),
            self.box_shift.0,
            self.box_shift.1,
            u(self.boxes.0),
            u(self.boxes.1),
            u(g.n),
            u(g.k),
            u(g.p),
            u(g.q),
        );
        // SAFETY: `conv2d_fwd_wgmma_{tf32,f32x3}*` as documented in its file: `maps` holds the
        // tensor maps of the live NHWC copy of x and of w as [K, R·S, C] (for 3xTF32, of their
        // roundings, then of their remainders), all fresh buffers of this stream, with the
        // dims, 16-byte-multiple strides (C % 4 == 0) and boxes the kernel's tile reads (32
        // channels × the pixel box of `rows` pixels; 32 channels × 1 tap × `cols` channels); m
        // is the boxes × `rows`, n = K, k = R·S·⌈C/32⌉·32; `bias` is null or K floats (checked by
        // `conv2d`) and the output the fresh [N, K, P, Q] `y` on this stream; `Geometry::check` bounded every extent below 2^31, so the kernel's 32-bit
        // coordinates hold; block, grid (at most one block an SM, no clusters) and dynamic
        // shared memory are the kernel's. `x_nhwc`, `w_taps` and `low` return to the
        // stream-ordered pool after this call, so no later work reuses them before the kernel
        // ends; the maps travel by value in the launch's parameters.
        unsafe { kernel.launch(stream, cfg, args)? };
        Ok(y)
    }
}

/// The `wgmma` weight gradient's tiles (output channels × input channels, from `WGMMA_TILES`),
/// kernels and cost weights (as `WGMMA_FORWARD_TILES`).
const WGMMA_WEIGHT_TILES: [WeightTile; 3] = [
    (0, 1.0, kernels::conv2d_bwd_weight_wgmma_tf32),
    (1, 1.0, kernels::conv2d_bwd_weight_wgmma_tf32_256x128),
    (3, 1.2, kernels::conv2d_bwd_weight_wgmma_tf32_128x64),
];
/// As `WGMMA_WEIGHT_TILES` for exact f32 as 3xTF32 (the tiles whose promoted sums fit the
/// registers; weights as `F32X3_FORWARD_TILES`).
const F32X3_WEIGHT_TILES: [WeightTile; 2] = [
    (4, 1.0, kernels::conv2d_bwd_weight_wgmma_f32x3_128x128),
    (3, 1.2, kernels::conv2d_bwd_weight_wgmma_f32x3_128x64),
];
/// The rows (output channels) of every `F32X3_WEIGHT_TILES` tile.
const F32X3_WEIGHT_ROWS: usize = 128;
const _: () = assert!(WGMMA_TILES[F32X3_WEIGHT_TILES[0].0].0 == F32X3_WEIGHT_ROWS);
const _: () = assert!(WGMMA_TILES[F32X3_WEIGHT_TILES[1].0].0 == F32X3_WEIGHT_ROWS);
/// A weight-gradient tile: its index in `WGMMA_TILES`, its cost weight, its kernel.
type WeightTile = (usize, f64, Kernel<WgmmaWeightArgs>);

/// `conv2d_bwd_weight_wgmma_tf32*(maps, out, ws, m, n, k, k_steps, layers, q_steps, rows, taps_s,
/// dilation_h, dilation_w, padding_h, padding_w)`.
type WgmmaWeightArgs = (
    TensorMaps,
    DevPtrMut<f32>,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    usize,
    usize,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
);

/// The fewest k-steps a slice of the weight gradient's reduction takes.
const WGMMA_WEIGHT_MIN_SLICE: usize = 16;

/// Whether the `wgmma` convolutions may run on `x`'s context (the sm_90a kernels loaded, and not
/// turned off by `FERROCUDA_CONV_WGMMA=0`, for measuring the difference), and the fewest flops
/// they take: `min_flops`, or any with `FERROCUDA_CONV_WGMMA=1` (for tests at small sizes).
/// Read at each call, so that a test may switch it.
fn wgmma_enabled(x: &Tensor, g: &Geometry, min_flops: f64) -> bool {
    let setting = std::env::var("FERROCUDA_CONV_WGMMA");
    let large = setting.as_deref() == Ok("1") || g.flops() >= min_flops;
    setting.as_deref() != Ok("0") && large && x.context().uses_sm90a_kernels()
}

/// The weight gradient on Hopper's `wgmma` (`gpu-kernels/src/conv/backward_weight_wgmma.rs`), TF32
/// or, for exact f32, 3xTF32: one GEMM a tap over the output pixels, each split into `slices`
/// parts of `k_steps` k-steps.
#[derive(Clone, Copy, Debug)]
struct WgmmaWeight {
    geometry: Geometry,
    /// 3xTF32: the context does not allow TF32.
    split: bool,
    /// Index in `WGMMA_WEIGHT_TILES` (TF32) or `F32X3_WEIGHT_TILES`.
    tile: usize,
    slices: usize,
    k_steps: usize,
    sms: usize,
}

impl WgmmaWeight {
    /// The plan for `g` on `x`'s device, if the `wgmma` weight gradient takes it: as
    /// `wgmma_enabled`, stride 1, and rows of x and dy of 16-byte multiples (W, Q multiples of
    /// 4). 3xTF32 also needs the output channels to fill three quarters of its 128-row tiles:
    /// at K = 64 (ResNet's 56×56 layer) half of every tile's products are zeros, and the FMA
    /// kernels took 0.23 ms against its 0.33.
    fn plan(op: &'static str, g: &Geometry, x: &Tensor) -> Result<Option<Self>> {
        let split = !x.context().allow_tf32();
        let filled = 4 * g.k >= 3 * g.k.next_multiple_of(F32X3_WEIGHT_ROWS);
        if !wgmma_enabled(x, g, if split { F32X3_MIN_FLOPS } else { WGMMA_MIN_FLOPS }) || split && !filled {
            return Ok(None);
        }
        let fits = g.params.stride == (1, 1)
            && g.w % 4 == 0
            && g.q % 4 == 0
            && g.r * g.s <= 65_535
            && Tensor::transpose_fits(g.r * g.s);
        let sms = x.context().stream(op)?.device.info.sm_count as usize;
        Ok(fits.then(|| Self::for_sms(g, sms, split)))
    }

    /// k-steps of one tap's reduction: images × output rows × 32-column pieces.
    fn steps(g: &Geometry) -> usize {
        g.n * g.p * g.q.div_ceil(WGMMA_CHANNELS)
    }

    /// The tile and split whose busiest SM has the least work: each tile's output tiles
    /// (× taps) split into as many slices as fill the SMs once, at least `WGMMA_WEIGHT_MIN_SLICE`
    /// k-steps each; work = units per SM (rounded up) × k-steps per slice × the tile's area × its
    /// weight.
    fn for_sms(g: &Geometry, sms: usize, split: bool) -> Self {
        let steps = Self::steps(g);
        let mut best = (f64::INFINITY, None);
        for (index, &(kind, weight, _)) in Self::tiles(split).iter().enumerate() {
            let (rows, cols) = WGMMA_TILES[kind];
            let tiles = g.k.div_ceil(rows) * g.c.div_ceil(cols) * g.r * g.s;
            let wanted = (sms / tiles).min(steps / WGMMA_WEIGHT_MIN_SLICE).max(1);
            let k_steps = steps.div_ceil(wanted);
            let slices = steps.div_ceil(k_steps);
            let cost = (tiles * slices).div_ceil(sms) as f64 * k_steps as f64 * (rows * cols) as f64 * weight;
            if cost < best.0 {
                best = (cost, Some(Self { geometry: *g, split, tile: index, slices, k_steps, sms }));
            }
        }
        best.1.expect("at least one tile")
    }

    /// The tiles of a TF32 weight gradient, or (`split`) a 3xTF32 one.
    fn tiles(split: bool) -> &'static [WeightTile] {
        if split {
            &F32X3_WEIGHT_TILES
        } else {
            &WGMMA_WEIGHT_TILES
        }
    }

    /// dy's and x's tensor maps, the launch, the slices added in order, and the
    /// `[R·S, K·C]` sums transposed to `[K, C, R, S]`.
    fn run(&self, op: &'static str, x: &Tensor, dy: &Tensor) -> Result<Tensor> {
        let g = &self.geometry;
        let (kind, _, kernel) = Self::tiles(self.split)[self.tile];
        let (rows, cols) = WGMMA_TILES[kind];
        let taps = g.r * g.s;
        // A 4-D map of NCHW rows `pitch` floats apart (`width` of them the tensor's), boxes of 32
        // columns of one row of `tile` channels.
        let map = |ptr: u64, (width, pitch, height, channels): (usize, usize, usize, usize), tile: usize| {
            let row = pitch as u64 * 4;
            let plane = row * height as u64;
            tensor_map_tiled(
                DType::F32,
                ptr,
                &[width as u64, height as u64, channels as u64, g.n as u64],
                &[row, plane, plane * channels as u64],
                &[WGMMA_CHANNELS as u32, 1, tile as u32, 1],
            )
        };
        let map_dy = map(dy.device_ptr(), (g.q, g.q, g.p, g.k), rows)?;
        let ctx = x.context();
        let stream = ctx.stream(op)?;
        // x's map for the taps whose column shift is a multiple of 4; shifted copies for the
        // others (see `conv2d_shift_rows_f32`), each read through its own map.
        let mut maps_x = [map(x.device_ptr(), (g.w, g.w, g.h, g.c), cols)?; 4];
        let (dilation, padding) = (g.params.dilation.1 as isize, g.params.padding.1 as isize);
        let shifts =
            (0..g.s as isize).fold(0u32, |set, s| set | 1 << (s * dilation - padding).rem_euclid(4)) & !1;
        let (pitch, x_rows) = (g.w + 4, g.n * g.c * g.h);
        let copies = Tensor::uninit(ctx, &[shifts.count_ones() as usize, x_rows, pitch], op)?;
        if shifts != 0 {
            let cfg =
                LaunchConfig::grid_stride(&stream.device.info, x_rows * pitch / 4, ELEMENTWISE_BLOCK, 1);
            // SAFETY: `conv2d_shift_rows_f32(x, out, rows, width, pitch, shifts)`: `x` holds
            // N·C·H rows of W floats (checked by `conv2d_backward_weight`), `copies` is a fresh
            // buffer of one copy per shift of the set, each as many rows of `pitch` (a multiple
            // of 4) floats, both on this stream.
            unsafe {
                kernels::conv2d_shift_rows_f32.launch(
                    stream,
                    cfg,
                    (x.ptr(), copies.ptr_mut(), x_rows, g.w, pitch, shifts),
                )?
            };
        }
        let mut copy = copies.device_ptr();
        for (shift, map_x) in maps_x.iter_mut().enumerate().skip(1) {
            if shifts & 1 << shift != 0 {
                *map_x = map(copy, (pitch, pitch, g.h, g.c), cols)?;
                copy += (x_rows * pitch * 4) as u64;
            }
        }
        let sums = Tensor::uninit(ctx, &[taps, g.k, g.c], op)?;
        let layers = taps * self.slices;
        let ws = if self.slices > 1 {
            Some(stream.device.pool.alloc(stream, layers * g.k * g.c * 4, op)?)
        } else {
            None
        };
        let units = g.k.div_ceil(rows) * g.c.div_ceil(cols) * layers;
        let cfg = LaunchConfig {
            grid: (units.min(self.sms) as u32, 1, 1),
            block: (WGMMA_THREADS as u32, 1, 1),
            shared_bytes: WGMMA_SHARED_BYTES as u32,
        };
        let Conv2dParams { dilation, padding, .. } = g.params;
        let u = |v: usize| v as u32;
        let args = (
            tensor_maps(&[map_dy, maps_x[0], maps_x[1], maps_x[2], maps_x[3]]),
            sums.ptr_mut(),
            ws.as_ref().map_or(DevPtrMut::null(), DeviceBuffer::dev_ptr_mut),
            g.k,
            g.c,
            Self::steps(g) * WGMMA_CHANNELS,
            self.k_steps,
            layers,
            u(g.q.div_ceil(WGMMA_CHANNELS)),
            u(g.p),
            u(g.s),
            u(dilation.0),
            u(dilation.1),
            u(padding.0),
            u(padding.1),
        );
        // SAFETY: `conv2d_bwd_weight_wgmma_tf32*` as documented in its file: `maps` holds the
        // tensor maps of the live dy [N, K, P, Q], x [N, C, H, W] (shapes `conv2d_backward_weight`
        // checked) and x's shifted copies (fresh, written above on this stream; x's map where no
        // tap needs one), with 16-byte-multiple strides (Q, W multiples of 4) and the boxes of the
        // kernel's tile (32 columns × 1 row × the tile's K or C × 1 image); m = K, n = C, k = the
        // k-steps × 32, `k_steps` per slice and layers = taps × slices; `ws` is null (one slice:
        // `sums` gets [R·S, K, C]) or a fresh buffer of layers·K·C floats, `sums` a fresh
        // [R·S, K, C] buffer, all on this stream; `Geometry::check` bounded every extent below
        // 2^31, so the kernel's 32-bit coordinates hold; block, grid (at most one block an SM, no
        // clusters) and dynamic shared memory are the kernel's. `copies` and `ws` return to the
        // stream-ordered pool after the launches here, so no later work reuses them before the
        // kernels end; the maps travel by value in the launch's parameters.
        unsafe { kernel.launch(stream, cfg, args)? };
        if let Some(ws) = &ws {
            let outputs = g.k * g.c;
            let per_thread = gemm_reduce_per_thread(outputs, sums.device_ptr(), 4);
            let cfg = LaunchConfig {
                grid: (outputs.div_ceil(per_thread * GEMM_REDUCE_THREADS) as u32, 1, taps as u32),
                block: (GEMM_REDUCE_THREADS as u32, 1, 1),
                shared_bytes: 0,
            };
            let args = (
                ws.dev_ptr(),
                DevPtr::null(),
                DevPtr::null(),
                sums.ptr_mut(),
                g.k,
                g.c,
                self.slices,
                0,
                1.0f32,
                0.0f32,
                ACTIVATION_NONE,
            );
            // SAFETY: `gemm_reduce_f32(ws, c, bias, out, m, n, slices, stride_c, alpha, beta,
            // activation)` over `taps` grid layers: `ws` holds taps·slices·K·C floats written by
            // the launch above on this stream, `sums` taps·K·C; no C, no bias; one thread per
            // `per_thread` outputs of each layer (K·C < 2^31: `Geometry::check`).
            unsafe { kernels::gemm_reduce_f32.launch(stream, cfg, args)? };
        }
        sums.transpose_planes(op, (1, taps, g.k * g.c))?.reshape(&g.w_shape())
    }
}

/// The gradient of [`conv2d`] with respect to x: dy `[N, K, P, Q]`, w `[K, C, R, S]` →
/// `x_shape` `[N, C, H, W]`.
pub fn conv2d_backward_data(dy: &Tensor, w: &Tensor, x_shape: &[usize], p: Conv2dParams) -> Result<Tensor> {
    const OP: &str = "conv2d_backward_data";
    dy.check_peer(OP, w)?;
    dy.require_f32(OP)?;
    let g = Geometry::check(OP, x_shape, w.shape(), p)?;
    check_shape(OP, dy, &g.y_shape())?;
    match dy.storage() {
        Storage::Cpu(_) => Ok(Tensor::from_cpu(
            dy.context(),
            &g.x_shape(),
            cpu_backward_data(&g, &dy.to_vec()?, &w.to_vec()?),
        )),
        Storage::Cuda(_) if g.col2im_wins() => backward_data_col2im(OP, &g, dy, w),
        Storage::Cuda(_) if g.flips_to_forward() => backward_data_flipped(OP, &g, dy, w),
        Storage::Cuda(_) => {
            let dx = Tensor::uninit(dy.context(), &g.x_shape(), OP)?;
            let mnk = (g.n * g.h * g.w, g.c, g.k * g.r * g.s);
            ImplicitGemm { op: OP, kernels: BACKWARD_DATA, a: dy, b: w, g, mnk, bias: None }.run(&dx)?;
            Ok(dx)
        }
    }
}

/// The backward data gradient of a stride-1 convolution as the forward `dy ⊛ flip(w)` (see
/// `Geometry::flips_to_forward`).
fn backward_data_flipped(op: &'static str, g: &Geometry, dy: &Tensor, w: &Tensor) -> Result<Tensor> {
    let ctx = dy.context();
    let flipped = Tensor::uninit(ctx, &[g.c, g.k, g.r, g.s], op)?;
    let stream = ctx.stream(op)?;
    let cfg = LaunchConfig::grid_stride(&stream.device.info, flipped.len(), ELEMENTWISE_BLOCK, 1);
    // SAFETY: `conv2d_flip_weights_f32(w, out, k, c, rs)`: `w` is the live [K, C, R, S] filter
    // bank (`check_shape` matched it to the geometry) and `out` a fresh buffer of as many floats,
    // both on this context's stream; `Geometry::check` bounded it below 2^31 elements.
    unsafe {
        kernels::conv2d_flip_weights_f32.launch(
            stream,
            cfg,
            (w.ptr(), flipped.ptr_mut(), g.k, g.c, g.r * g.s),
        )?
    };
    forward_cuda(op, &g.flipped(), dy, &flipped, None)
}

/// The backward data gradient as `cols = Wᵀ · dy` (`[N, C·R·S, P·Q]`, a batched GEMM over a shared
/// W) and the gather `conv2d_col2im_f32`, which sums each dx element's taps in a fixed order.
fn backward_data_col2im(op: &'static str, g: &Geometry, dy: &Tensor, w: &Tensor) -> Result<Tensor> {
    let crs = g.c * g.r * g.s;
    // Wᵀ as its own (small) matrix: with both operands as they are, exact f32 and TF32 may take
    // the swapped `wgmma` kernels (matmul's rows 5a and 6a), which a transposed A rules out (the
    // stem's columns: 0.50 ms f32 and 0.38 TF32 on `gemm_*_tn`).
    let w_t = w.reshape(&[g.k, crs])?.transpose()?;
    let dy_planes = dy.reshape(&[g.n, g.k, g.p * g.q])?;
    let cols = Gemm::new(&w_t, &dy_planes).run()?;
    let ctx = dy.context();
    let dx = Tensor::uninit(ctx, &g.x_shape(), op)?;
    let stream = ctx.stream(op)?;
    let rows = g.n * g.c * g.h;
    let cfg =
        LaunchConfig { grid: (rows as u32, 1, 1), block: (CONV_COL2IM_BLOCK as u32, 1, 1), shared_bytes: 0 };
    let Conv2dParams { stride, padding, dilation } = g.params;
    let args = (
        cols.ptr(),
        dx.ptr_mut(),
        g.h,
        g.w,
        g.r,
        g.s,
        g.p,
        g.q,
        stride.0,
        stride.1,
        padding.0,
        padding.1,
        dilation.0,
        dilation.1,
    );
    // SAFETY: `conv2d_col2im_f32(cols, dx, h, w, r, s, p, q, strides, paddings, dilations)`
    // over N·C·H blocks, one a row of dx: `cols` is the GEMM's fresh [N, C·R·S, P·Q] result and
    // `dx` a fresh [N, C, H, W] buffer, both on this context's stream; `Geometry::check` bounded every
    // tensor below 2^31 elements (`col2im_wins` bounds cols), so the kernel's 32-bit indices hold.
    unsafe { kernels::conv2d_col2im_f32.launch(stream, cfg, args)? };
    Ok(dx)
}

/// The gradient of [`conv2d`] with respect to w: x `[N, C, H, W]`, dy `[N, K, P, Q]` →
/// `w_shape` `[K, C, R, S]`.
pub fn conv2d_backward_weight(x: &Tensor, dy: &Tensor, w_shape: &[usize], p: Conv2dParams) -> Result<Tensor> {
    const OP: &str = "conv2d_backward_weight";
    x.check_peer(OP, dy)?;
    x.require_f32(OP)?;
    let g = Geometry::check(OP, x.shape(), w_shape, p)?;
    check_shape(OP, dy, &g.y_shape())?;
    match x.storage() {
        Storage::Cpu(_) => Ok(Tensor::from_cpu(
            x.context(),
            &g.w_shape(),
            cpu_backward_weight(&g, &x.to_vec()?, &dy.to_vec()?),
        )),
        Storage::Cuda(_) => {
            if let Some(plan) = WgmmaWeight::plan(OP, &g, x)? {
                return plan.run(OP, x, dy);
            }
            let dw = Tensor::uninit(x.context(), &g.w_shape(), OP)?;
            let mnk = (g.c * g.r * g.s, g.k, g.n * g.p * g.q);
            ImplicitGemm { op: OP, kernels: BACKWARD_WEIGHT, a: x, b: dy, g, mnk, bias: None }.run(&dw)?;
            Ok(dw)
        }
    }
}

/// The gradient of [`conv2d`]'s bias: `[K]`, the sum of dy `[N, K, P, Q]` over N, P and Q.
pub fn conv2d_backward_bias(dy: &Tensor) -> Result<Tensor> {
    const OP: &str = "conv2d_backward_bias";
    dy.require_f32(OP)?;
    let &[n, k, p, q] = dy.shape() else {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: dy.shape().to_vec(),
            reason: "dy must be [N, K, P, Q]".into(),
        });
    };
    if dy.is_empty() {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: dy.shape().to_vec(),
            reason: "dy has a zero-size axis".into(),
        });
    }
    let pq = p * q;
    match dy.storage() {
        Storage::Cpu(v) => {
            let sums = (0..k)
                .into_par_iter()
                .map(|ch| {
                    (0..n)
                        .map(|i| v[(i * k + ch) * pq..][..pq].iter().map(|&e| e as f64).sum::<f64>())
                        .sum::<f64>() as f32
                })
                .collect();
            Ok(Tensor::from_cpu(dy.context(), &[k], sums))
        }
        Storage::Cuda(_) => {
            let db = Tensor::uninit(dy.context(), &[k], OP)?;
            if k > i32::MAX as usize {
                return Err(Error::InvalidArgument {
                    op: OP,
                    shape: dy.shape().to_vec(),
                    reason: "more than 2^31-1 channels".into(),
                });
            }
            let stream = dy.context().stream(OP)?;
            let cfg = LaunchConfig {
                grid: (k as u32, 1, 1),
                block: (CONV_BIAS_BLOCK as u32, 1, 1),
                shared_bytes: 0,
            };
            // SAFETY: `conv2d_bwd_bias_f32(dy, db, n, k, pq)`: dy holds n·k·pq floats, db k; one
            // block per channel.
            unsafe { kernels::conv2d_bwd_bias_f32.launch(stream, cfg, (dy.ptr(), db.ptr_mut(), n, k, pq))? };
            Ok(db)
        }
    }
}

/// The CPU twin of the forward: f64 accumulation, one output plane per task.
fn cpu_forward(g: &Geometry, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let (pq, hw, crs) = (g.p * g.q, g.h * g.w, g.c * g.r * g.s);
    let mut y = vec![0.0f32; g.n * g.k * pq];
    y.par_chunks_mut(pq).enumerate().for_each(|(plane, out)| {
        let (img, k) = (plane / g.k, plane % g.k);
        let wk = &w[k * crs..][..crs];
        for (o, v) in out.iter_mut().enumerate() {
            let (op, oq) = (o / g.q, o % g.q);
            let mut acc = bias.map_or(0.0, |b| b[k] as f64);
            for c in 0..g.c {
                let xc = &x[(img * g.c + c) * hw..][..hw];
                for r in 0..g.r {
                    let Some(h) = g.input(op, r, 0, g.h) else { continue };
                    for s in 0..g.s {
                        if let Some(wi) = g.input(oq, s, 1, g.w) {
                            acc += xc[h * g.w + wi] as f64 * wk[(c * g.r + r) * g.s + s] as f64;
                        }
                    }
                }
            }
            *v = acc as f32;
        }
    });
    y
}

/// The CPU twin of the data gradient: each output scatters `dy · w` back onto the inputs it
/// read (f64 accumulation, one input plane per task).
fn cpu_backward_data(g: &Geometry, dy: &[f32], w: &[f32]) -> Vec<f32> {
    let (pq, hw, rs) = (g.p * g.q, g.h * g.w, g.r * g.s);
    let mut dx = vec![0.0f32; g.n * g.c * hw];
    dx.par_chunks_mut(hw).enumerate().for_each(|(plane, out)| {
        let (img, c) = (plane / g.c, plane % g.c);
        let mut acc = vec![0.0f64; hw];
        for k in 0..g.k {
            let dyk = &dy[(img * g.k + k) * pq..][..pq];
            let wkc = &w[(k * g.c + c) * rs..][..rs];
            for op in 0..g.p {
                for r in 0..g.r {
                    let Some(h) = g.input(op, r, 0, g.h) else { continue };
                    for oq in 0..g.q {
                        for s in 0..g.s {
                            if let Some(wi) = g.input(oq, s, 1, g.w) {
                                acc[h * g.w + wi] += dyk[op * g.q + oq] as f64 * wkc[r * g.s + s] as f64;
                            }
                        }
                    }
                }
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = a as f32;
        }
    });
    dx
}

/// The CPU twin of the weight gradient: f64 accumulation over N·P·Q, one `(k, c)` filter per task.
fn cpu_backward_weight(g: &Geometry, x: &[f32], dy: &[f32]) -> Vec<f32> {
    let (pq, hw, rs) = (g.p * g.q, g.h * g.w, g.r * g.s);
    let mut dw = vec![0.0f32; g.k * g.c * rs];
    dw.par_chunks_mut(rs).enumerate().for_each(|(filter, out)| {
        let (k, c) = (filter / g.c, filter % g.c);
        for r in 0..g.r {
            for s in 0..g.s {
                let mut acc = 0.0f64;
                for img in 0..g.n {
                    let xc = &x[(img * g.c + c) * hw..][..hw];
                    let dyk = &dy[(img * g.k + k) * pq..][..pq];
                    for op in 0..g.p {
                        let Some(h) = g.input(op, r, 0, g.h) else { continue };
                        for oq in 0..g.q {
                            if let Some(wi) = g.input(oq, s, 1, g.w) {
                                acc += xc[h * g.w + wi] as f64 * dyk[op * g.q + oq] as f64;
                            }
                        }
                    }
                }
                out[r * g.s + s] = acc as f32;
            }
        }
    });
    dw
}

#[cfg(test)]
mod tests {
    use super::{conv_plan, Conv2dParams, ConvPlan, Geometry, WgmmaForward, WgmmaWeight};
    use crate::shapes::WGMMA_TILES;

    /// Plans on an H100 (132 SMs), as (kernel, splits); (M, N, K) of the benchmarks' shapes.
    #[test]
    fn plans_by_busiest_sm() {
        let plan = |mnk: (usize, usize, usize), tf32| {
            let ConvPlan { kernel, k_chunk } = conv_plan(mnk, 132, tf32);
            (kernel, mnk.2.div_ceil(k_chunk))
        };
        // Grids of many waves keep the large tile, or the medium one where N = 64 would leave
        // half the large tile empty (the seed forward; its data gradient; ResNet's 56×56 layers).
        assert_eq!(plan((524288, 128, 576), false), (0, 1));
        assert_eq!(plan((524288, 64, 1152), false), (1, 1));
        assert_eq!(plan((100352, 64, 576), false), (1, 1));
        // 3×3 at 28×28: 196 large tiles are 1.5 waves; 392 medium ones fill three an SM.
        assert_eq!(plan((25088, 128, 1152), false), (1, 1));
        // Under TF32 (one tile) the same layer splits in two: 392 blocks.
        assert_eq!(plan((25088, 128, 1152), true), (3, 2));
        // 3×3 at 7×7: 52 large tiles; five splits make 260 blocks, two an SM.
        assert_eq!(plan((1568, 512, 4608), false), (0, 5));
        assert_eq!(plan((1568, 512, 4608), true), (3, 5));
        // Weight gradients: short M and N, a reduction over N·P·Q split into whole waves.
        assert_eq!(plan((576, 128, 524288), false), (0, 79));
        assert_eq!(plan((576, 64, 100352), false), (1, 79));
        // The stem's: the small tile (three down M), 175 splits for four blocks an SM.
        assert_eq!(plan((147, 64, 401408), false), (2, 175));
        // One block: the large tile's eight warps beat the small tile's two.
        assert_eq!(plan((91, 4, 27), false), (0, 1));
        assert_eq!(plan((91, 4, 27), true), (3, 1));
        // The seed's small layer: three splits of the large tile (96 blocks).
        assert_eq!(plan((4096, 64, 288), false), (0, 3));
        // Under TF32 the SIMT tiles still compete: ResNet's stem (K = 64 half-fills TF32's
        // 128 columns) runs exact on the medium tile; the seed's small layer stays on TF32.
        assert_eq!(plan((401408, 64, 147), true), (1, 1));
        assert_eq!(plan((4096, 64, 288), true), (3, 3));
    }

    /// The kernels' division by a fixed divisor equals `/` and `%` for every dividend below 2^31.
    #[test]
    fn fast_division_is_exact() {
        use crate::shapes::FastDiv;
        let mut divisors: Vec<u32> = (1..=4100).collect();
        divisors.extend((0..31).flat_map(|b| [(1u32 << b) - 1, 1 << b, (1 << b) + 1]).filter(|&d| d > 0));
        divisors.extend([3 * 3, 7 * 7, 56 * 56, 224 * 224, 50257, 1_000_003, (1 << 31) - 1]);
        let mut dividends: Vec<u32> = (0..5000).collect();
        dividends.extend((0..31).flat_map(|b| [(1u32 << b) - 1, 1 << b, (1 << b) + 1]));
        dividends.extend([(1 << 31) - 1, (1 << 31) - 2, 2_147_483_000, 1_234_567_891]);
        for &d in &divisors {
            let f = FastDiv::new(d);
            for &n in dividends.iter().filter(|&&n| n < 1 << 31) {
                assert_eq!(f.divmod(n), (n / d, n % d), "{n} / {d}");
            }
            // Around each multiple of d near the top of the range.
            let top = ((1u32 << 31) - 1) / d * d;
            for n in [top.saturating_sub(1), top, top + (d - 1).min((1 << 31) - 1 - top)] {
                assert_eq!(f.divmod(n), (n / d, n % d), "{n} / {d}");
            }
        }
    }

    /// The data gradient of a stride-1 convolution runs as a forward whose output is x's shape.
    #[test]
    fn flipped_geometry() {
        let p = Conv2dParams::new();
        let g = |x: [usize; 4], w: [usize; 4], p: Conv2dParams| Geometry::check("test", &x, &w, p).unwrap();
        for (x, w, p) in [
            ([2, 3, 7, 13], [4, 3, 3, 3], p.padding(1)),
            ([3, 4, 11, 9], [9, 4, 3, 3], p.dilation(2).padding(2)),
            ([1, 3, 7, 13], [2, 3, 7, 13], p),
            ([2, 17, 31, 29], [33, 17, 3, 5], Conv2dParams { padding: (0, 2), dilation: (1, 2), ..p }),
        ] {
            let geometry = g(x, w, p);
            assert!(geometry.flips_to_forward(), "{x:?} {w:?}");
            let f = geometry.flipped();
            let checked = g(f.x_shape(), f.w_shape(), f.params);
            assert_eq!((checked.y_shape(), f.y_shape()), (x, x), "{x:?} {w:?}");
            assert_eq!(f.x_shape(), geometry.y_shape());
        }
        // Strides, and paddings past the dilated filter's reach, keep the backward kernels.
        assert!(!g([2, 3, 9, 9], [4, 3, 3, 3], p.stride(2).padding(1)).flips_to_forward());
        assert!(!g([2, 3, 9, 9], [4, 3, 3, 3], p.padding(3)).flips_to_forward());
        assert!(!g([2, 3, 9, 9], [4, 3, 1, 3], p.padding(1)).flips_to_forward());
    }

    /// The `wgmma` plans on an H100 (132 SMs) for the benchmarks' stride-1 layers: the forward's
    /// tile (pixels × channels) and pixel box (columns, rows, images); the weight gradient's
    /// tile (K × C) and slices.
    #[test]
    fn wgmma_plans_by_busiest_sm() {
        let p = Conv2dParams::new().padding(1);
        let g = |x: [usize; 4], w: [usize; 4]| Geometry::check("test", &x, &w, p).unwrap();
        let forward_as = |x, w, split| {
            let plan = WgmmaForward::for_sms(&g(x, w), 132, split);
            let tile = WGMMA_TILES[WgmmaForward::tiles(split)[plan.tile].0];
            (tile, (1 << plan.box_shift.0, 1 << plan.box_shift.1, plan.images), plan.units())
        };
        let forward = |x, w| forward_as(x, w, false);
        // The seed layer: 256 pixels (two rows of 128) × 128 channels, 2048 tiles.
        assert_eq!(forward([32, 64, 128, 128], [128, 64, 3, 3]), ((256, 128), (128, 2, 1), 2048));
        // 28×28: boxes of 8 rows of 32 columns (28 used), 128 tiles, one wave.
        assert_eq!(forward([32, 128, 28, 28], [128, 128, 3, 3]), ((256, 128), (32, 8, 1), 128));
        // 64 channels: the 128×64 tile; 56 columns in boxes of 64.
        assert_eq!(forward([32, 64, 56, 56], [64, 64, 3, 3]), ((128, 64), (64, 2, 1), 896));
        // 7×7 with 512 channels: two images a box; 128 narrow tiles fill the SMs where 128×256
        // would leave 100 of them idle.
        assert_eq!(forward([32, 512, 7, 7], [512, 512, 3, 3]), ((128, 64), (8, 8, 2), 128));
        // 3xTF32 on the 128×128 and 128×64 tiles: the seed and 28×28 on 128×128 (4096 and 224
        // tiles), 64 channels and 7×7 on 128×64.
        let f32x3 = |x, w| forward_as(x, w, true);
        assert_eq!(f32x3([32, 64, 128, 128], [128, 64, 3, 3]), ((128, 128), (128, 1, 1), 4096));
        assert_eq!(f32x3([32, 128, 28, 28], [128, 128, 3, 3]), ((128, 128), (32, 4, 1), 224));
        assert_eq!(f32x3([32, 64, 56, 56], [64, 64, 3, 3]), ((128, 64), (64, 2, 1), 896));
        assert_eq!(f32x3([32, 512, 7, 7], [512, 512, 3, 3]), ((128, 64), (8, 8, 2), 128));
        let weight_as = |x, w, split| {
            let plan = WgmmaWeight::for_sms(&g(x, w), 132, split);
            (WGMMA_TILES[WgmmaWeight::tiles(split)[plan.tile].0], plan.slices, plan.k_steps)
        };
        let weight = |x, w| weight_as(x, w, false);
        // 9 taps of one 128×64 tile each, 14 slices of 32·128·4 = 16384 k-steps: 126 units.
        assert_eq!(weight([32, 64, 128, 128], [128, 64, 3, 3]), ((128, 64), 14, 1171));
        assert_eq!(weight([32, 64, 56, 56], [64, 64, 3, 3]), ((128, 64), 14, 256));
        // Few k-steps: slices of at least 16.
        assert_eq!(weight([1, 8, 8, 8], [8, 8, 3, 3]), ((128, 64), 1, 8));
        // 3xTF32: the same 128×64 tiles where C = 64; 128 channels each way fill 128×128.
        let f32x3 = |x, w| weight_as(x, w, true);
        assert_eq!(f32x3([32, 64, 128, 128], [128, 64, 3, 3]), ((128, 64), 14, 1171));
        assert_eq!(f32x3([32, 128, 28, 28], [128, 128, 3, 3]), ((128, 128), 14, 64));
    }

    fn col2im_wins(x: [usize; 4], w: [usize; 4], p: Conv2dParams) -> bool {
        Geometry::check("test", &x, &w, p).unwrap().col2im_wins()
    }

    /// Pointwise convolutions take per-image GEMMs only on wide planes.
    #[test]
    fn pointwise_path() {
        let p = Conv2dParams::new();
        let g = |x: [usize; 4], w: [usize; 4], p: Conv2dParams| Geometry::check("test", &x, &w, p).unwrap();
        // ResNet-50's 1×1 at 56×56 (the torch_ref row).
        assert!(g([32, 256, 56, 56], [64, 256, 1, 1], p).pointwise());
        // At 7×7 the planes are too narrow; padding, stride or a 3×3 filter are not pointwise.
        assert!(!g([32, 2048, 7, 7], [512, 2048, 1, 1], p).pointwise());
        assert!(!g([2, 8, 32, 32], [8, 8, 1, 1], p.stride(2)).pointwise());
        assert!(!g([2, 8, 32, 32], [8, 8, 1, 1], p.padding(1)).pointwise());
        assert!(!g([2, 8, 32, 32], [8, 8, 3, 3], p).pointwise());
        // Dilation does not matter for a 1×1 filter.
        assert!(g([2, 8, 32, 32], [8, 8, 1, 1], p.dilation(2)).pointwise());
    }

    /// The backward data gradient leaves the implicit GEMM only where it wastes most of its work.
    #[test]
    fn backward_data_path() {
        let p = Conv2dParams::new();
        // ResNet-50's stem (C = 3, stride 2) and small strided cases of tests/conv.rs.
        assert!(col2im_wins([32, 3, 224, 224], [64, 3, 7, 7], p.stride(2).padding(3)));
        assert!(col2im_wins(
            [2, 3, 7, 13],
            [6, 3, 5, 3],
            Conv2dParams { stride: (2, 2), padding: (2, 1), ..p }
        ));
        // Stride-1 layers with 64 channels or more, and a 1×1, stay on the implicit GEMM.
        assert!(!col2im_wins([32, 64, 56, 56], [64, 64, 3, 3], p.padding(1)));
        assert!(!col2im_wins([32, 64, 128, 128], [128, 64, 3, 3], p.padding(1)));
        assert!(!col2im_wins([32, 256, 56, 56], [64, 256, 1, 1], p));
        // cols of 2^28 floats or more: the implicit GEMM, whatever the cost.
        assert!(!col2im_wins([1000, 3, 224, 224], [64, 3, 7, 7], p.stride(2).padding(3)));
    }
}
