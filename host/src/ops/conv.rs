//! 2-D convolution, NCHW, f32: [`conv2d`] (bias fused, but for the pointwise TF32 forward below,
//! which adds it in a second pass), [`conv2d_backward_data`], [`conv2d_backward_weight`],
//! [`conv2d_backward_bias`]. Kernels: `gpu-kernels/src/conv/`.
//!
//! Forward and both backward products are implicit GEMMs (the im2col gather happens in the tile
//! loaders), but for the forward of a pointwise convolution under TF32 (a 1×1 filter at stride
//! 1 without padding, planes of at least `POINTWISE_MIN_PLANE` pixels): a plain GEMM batched over
//! the images with W shared (`[K, C] · [C, H·W]` per image) on matmul's TF32 tensor-core kernel.
//! In exact f32 the implicit GEMM's SIMT tiles, whose M is N·P·Q rather than K, are faster there.
//! Precision as in matmul: exact f32 on the SIMT kernels by default, TF32 tensor cores when the
//! context allows TF32 ([`Context::set_allow_tf32`](crate::Context::set_allow_tf32)).
//! The SIMT tile is the largest whose grid still gives every SM a block; the weight gradient
//! splits its N·P·Q reduction over enough blocks to fill the GPU and adds the splits in a fixed
//! order, so every op here is deterministic.
use crate::kernels;
use crate::ops::matmul::Gemm;
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{DevPtr, DevPtrMut, Kernel};
use crate::runtime::launch::LaunchConfig;
use crate::shapes::{
    gemm_shared_bytes, gemm_threads, CONV_BIAS_BLOCK, CONV_SPLIT_ALIGN, ELEMENTWISE_BLOCK, GEMM_TILE_LARGE,
    GEMM_TILE_MEDIUM, GEMM_TILE_SMALL, MMA_SHARED_BYTES, MMA_THREADS, MMA_TILE,
};
use crate::tensor::{Storage, Tensor};
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
/// One implicit-GEMM op's kernels: SIMT large, medium, small tiles, then TF32.
type Kernels = [Kernel<ImplicitGemmArgs>; 4];
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
    /// The weight gradient always splits its long reduction; the others only when the grid is
    /// too small to fill the GPU.
    split_first: bool,
}

/// A kernel with its tile, threads and dynamic shared bytes.
type Choice = (Kernel<ImplicitGemmArgs>, (usize, usize), usize, usize);

impl ImplicitGemm<'_> {
    /// TF32 when allowed; else, of the SIMT tiles whose grid still gives every SM a block, the one
    /// that pads the output least (the larger on a tie), the small tile when none does, the large
    /// one for the weight gradient (which splits instead).
    fn choose(&self, sms: usize) -> Choice {
        if self.a.context().allow_tf32() {
            return (self.kernels[3], MMA_TILE, MMA_THREADS, MMA_SHARED_BYTES);
        }
        let (m, n, _) = self.mnk;
        let blocks = |t: (usize, usize)| m.div_ceil(t.0) * n.div_ceil(t.1);
        let padded = |t: (usize, usize)| blocks(t) * t.0 * t.1;
        let (tile, size) = [(GEMM_TILE_LARGE, 0), (GEMM_TILE_MEDIUM, 1), (GEMM_TILE_SMALL, 2)]
            .into_iter()
            .filter(|&(t, size)| if self.split_first { size == 0 } else { blocks(t) >= sms })
            .min_by_key(|&(t, _)| padded(t))
            .unwrap_or((GEMM_TILE_SMALL, 2));
        (self.kernels[size], tile, gemm_threads(tile), gemm_shared_bytes(tile))
    }

    /// Compute the op into `out`: one launch when the tile grid fills the GPU, else the reduction
    /// split for about two blocks per SM (each split at least 4 tensor-core k-steps long), the
    /// partial sums added in order by `conv2d_split_sum_f32` (which also adds the bias).
    fn run(&self, out: &Tensor) -> Result<()> {
        let ctx = self.a.context();
        let stream = ctx.stream(self.op)?;
        let sms = stream.device.info.sm_count as usize;
        let choice = self.choose(sms);
        let (m, n, k) = self.mnk;
        let tile = choice.1;
        let blocks = m.div_ceil(tile.0) * n.div_ceil(tile.1);
        let most = k.div_ceil(4 * CONV_SPLIT_ALIGN).clamp(1, 65_535);
        let wanted = if blocks >= sms { 1 } else { (2 * sms).div_ceil(blocks).clamp(1, most) };
        let k_chunk = k.div_ceil(wanted).next_multiple_of(CONV_SPLIT_ALIGN);
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
        Storage::Cuda(_) if g.pointwise() && x.context().allow_tf32() => {
            let x_planes = x.reshape(&[g.n, g.c, g.h * g.w])?;
            let planes = Gemm::new(&w.reshape(&[g.k, g.c])?, &x_planes).run()?.reshape(&g.y_shape())?;
            let Some(bias) = bias else { return Ok(planes) };
            let y = Tensor::uninit(x.context(), &g.y_shape(), OP)?;
            add_splits(OP, (&planes, 1), Some(bias), &y, (g.p * g.q, g.k))?;
            Ok(y)
        }
        Storage::Cuda(_) => {
            let y = Tensor::uninit(x.context(), &g.y_shape(), OP)?;
            ImplicitGemm {
                op: OP,
                kernels: FORWARD,
                a: x,
                b: w,
                g,
                mnk: (g.n * g.p * g.q, g.k, g.c * g.r * g.s),
                bias,
                split_first: false,
            }
            .run(&y)?;
            Ok(y)
        }
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
        Storage::Cuda(_) => {
            let dx = Tensor::uninit(dy.context(), &g.x_shape(), OP)?;
            ImplicitGemm {
                op: OP,
                kernels: BACKWARD_DATA,
                a: dy,
                b: w,
                g,
                mnk: (g.n * g.h * g.w, g.c, g.k * g.r * g.s),
                bias: None,
                split_first: false,
            }
            .run(&dx)?;
            Ok(dx)
        }
    }
}

/// The backward data gradient as `cols = Wᵀ · dy` (`[N, C·R·S, P·Q]`, a batched GEMM over a shared
/// W) and the gather `conv2d_col2im_f32`, which sums each dx element's taps in a fixed order.
fn backward_data_col2im(op: &'static str, g: &Geometry, dy: &Tensor, w: &Tensor) -> Result<Tensor> {
    let crs = g.c * g.r * g.s;
    let w_flat = w.reshape(&[g.k, crs])?;
    let dy_planes = dy.reshape(&[g.n, g.k, g.p * g.q])?;
    let cols = Gemm::new(&w_flat, &dy_planes).transpose_a(true).run()?;
    let ctx = dy.context();
    let dx = Tensor::uninit(ctx, &g.x_shape(), op)?;
    let stream = ctx.stream(op)?;
    let cfg = LaunchConfig::grid_stride(&stream.device.info, dx.len(), ELEMENTWISE_BLOCK, 4);
    let Conv2dParams { stride, padding, dilation } = g.params;
    let args = (
        cols.ptr(),
        dx.ptr_mut(),
        g.n,
        g.c,
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
    // SAFETY: `conv2d_col2im_f32(cols, dx, n, c, h, w, r, s, p, q, strides, paddings,
    // dilations)`: `cols` is the GEMM's fresh [N, C·R·S, P·Q] result and `dx` a fresh
    // [N, C, H, W] buffer, both on this context's stream; `Geometry::check` bounded every
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
            let dw = Tensor::uninit(x.context(), &g.w_shape(), OP)?;
            ImplicitGemm {
                op: OP,
                kernels: BACKWARD_WEIGHT,
                a: x,
                b: dy,
                g,
                mnk: (g.c * g.r * g.s, g.k, g.n * g.p * g.q),
                bias: None,
                split_first: true,
            }
            .run(&dw)?;
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
    use super::{Conv2dParams, Geometry};

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
