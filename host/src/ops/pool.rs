//! 2-D pooling over NCHW tensors: [`max_pool2d`] (with its argmax) and [`avg_pool2d`]
//! (`count_include_pad`), forward and backward. Kernels: `gpu-kernels/src/pool/`.
//!
//! Output size per axis: `(in + 2·padding - kernel) / stride + 1` (PyTorch's floor mode).
//! Padding may be at most half the kernel (PyTorch's rule), so every window holds at least one
//! input element.
use crate::kernels;
use crate::runtime::context::Context;
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{DeviceArg, Kernel, KernelArgs};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::pool::DeviceBuffer;
use crate::runtime::stream::Stream;
use crate::shapes::POOL_BLOCK;
use crate::tensor::{element_count, Storage, Tensor};
use rayon::prelude::*;
use std::fmt;

/// Window, stride and padding of a 2-D pooling, `(rows, columns)` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dParams {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
}

impl Pool2dParams {
    /// A square `kernel`, stride equal to it, no padding.
    pub fn new(kernel: usize) -> Self {
        Pool2dParams { kernel: (kernel, kernel), stride: (kernel, kernel), padding: (0, 0) }
    }
    /// The same stride along both axes.
    pub fn stride(self, s: usize) -> Self {
        Pool2dParams { stride: (s, s), ..self }
    }
    /// The same padding along both axes.
    pub fn padding(self, p: usize) -> Self {
        Pool2dParams { padding: (p, p), ..self }
    }
}

/// Windows of more elements than this cannot store their argmax in a byte.
const MAX_POOL_WINDOW: usize = 256;

/// Checked geometry of one pooling: input planes `N·C` of `h × w`, output `oh × ow`.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    p: Pool2dParams,
}

impl Geometry {
    fn of(op: &'static str, shape: &[usize], p: Pool2dParams) -> Result<Geometry> {
        let invalid = |reason: String| Error::InvalidArgument { op, shape: shape.to_vec(), reason };
        let &[n, c, h, w] = shape else {
            return Err(invalid(format!("needs an NCHW tensor (rank 4), got rank {}", shape.len())));
        };
        element_count(op, shape)?;
        let ((kh, kw), (sh, sw), (ph, pw)) = (p.kernel, p.stride, p.padding);
        if kh == 0 || kw == 0 || sh == 0 || sw == 0 {
            return Err(invalid(format!("kernel {:?} and stride {:?} must be positive", p.kernel, p.stride)));
        }
        if 2 * ph > kh || 2 * pw > kw {
            return Err(invalid(format!("padding {:?} exceeds half the kernel {:?}", p.padding, p.kernel)));
        }
        if h == 0 || w == 0 {
            return Err(invalid("empty planes".into()));
        }
        if h + 2 * ph < kh || w + 2 * pw < kw {
            return Err(invalid(format!(
                "kernel {:?} larger than the padded input ({}, {})",
                p.kernel,
                h + 2 * ph,
                w + 2 * pw
            )));
        }
        Ok(Geometry { n, c, h, w, oh: (h + 2 * ph - kh) / sh + 1, ow: (w + 2 * pw - kw) / sw + 1, p })
    }

    fn input_shape(&self) -> [usize; 4] {
        [self.n, self.c, self.h, self.w]
    }
    fn output_shape(&self) -> [usize; 4] {
        [self.n, self.c, self.oh, self.ow]
    }
    fn planes(&self) -> usize {
        self.n * self.c
    }

    /// 2×2 windows, stride 2, no padding, rows of a multiple of 4 floats: the 16-byte kernels.
    fn is_2x2_vectorizable(&self) -> bool {
        self.p == Pool2dParams::new(2) && self.w % 4 == 0
    }

    /// The output rows (or columns) whose windows hold input row `i` (`pad`, `k`, `s` of that
    /// axis, `outputs` along it).
    fn covering(i: usize, pad: usize, k: usize, s: usize, outputs: usize) -> std::ops::Range<usize> {
        let a = i + pad;
        let lo = if a + 1 < k { 0 } else { (a + 1 - k).div_ceil(s) };
        lo..(a / s + 1).min(outputs)
    }

    /// The valid input rows of window `o` along one axis, and the offset of the first in the
    /// window.
    fn valid(o: usize, pad: usize, k: usize, s: usize, size: usize) -> (std::ops::Range<usize>, usize) {
        let origin = o * s;
        let start = origin.saturating_sub(pad);
        (start..(origin + k - pad).min(size), start + pad - origin)
    }

    /// The valid rows and columns of output `(r, c)`'s window, each with its offset in the window.
    fn window(
        &self,
        r: usize,
        c: usize,
    ) -> ((std::ops::Range<usize>, usize), (std::ops::Range<usize>, usize)) {
        let ((kh, kw), (sh, sw), (ph, pw)) = (self.p.kernel, self.p.stride, self.p.padding);
        (Self::valid(r, ph, kh, sh, self.h), Self::valid(c, pw, kw, sw, self.w))
    }

    /// The launch of a kernel over `items` work items (outputs, output pairs or inputs).
    fn launch_config(&self, op: &'static str, items: usize) -> Result<LaunchConfig> {
        if items.div_ceil(POOL_BLOCK) > i32::MAX as usize {
            return Err(Error::InvalidArgument {
                op,
                shape: self.input_shape().to_vec(),
                reason: "more than 2^31-1 blocks".into(),
            });
        }
        Ok(LaunchConfig::covering(items, POOL_BLOCK))
    }

    /// The general kernels' geometry arguments, in the order they take them; the 2×2 kernels
    /// take the first three.
    fn args(&self) -> [usize; 11] {
        let ((kh, kw), (sh, sw), (ph, pw)) = (self.p.kernel, self.p.stride, self.p.padding);
        [self.planes(), self.h, self.w, self.oh, self.ow, kh, kw, sh, sw, ph, pw]
    }

    /// `dy` must have this pooling's output shape.
    fn check_output(&self, op: &'static str, dy: &Tensor) -> Result<()> {
        if dy.shape() != self.output_shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: dy.shape().to_vec(),
                rhs: self.output_shape().to_vec(),
            });
        }
        Ok(())
    }

    /// Launches one pass of `kernels` on `stream`: the 2×2 kernel over pairs of outputs where
    /// [`Geometry::is_2x2_vectorizable`], else the general kernel over `items` (outputs, or
    /// inputs for a backward gather). Both take `ptrs` first, then [`Geometry::args`] (the 2×2
    /// kernel its first three); both take any grid (grid-stride loops).
    ///
    /// # Safety
    /// `ptrs` are the kernels' pointer arguments in their order, each to a live device buffer
    /// of the size the kernels ask for under this geometry.
    unsafe fn launch<P: PoolPointers>(
        &self,
        stream: &Stream,
        op: &'static str,
        kernels: Kernels<P>,
        items: usize,
        ptrs: P,
    ) -> Result<()> {
        let g = self.args();
        // SAFETY: the caller's pointers, then the geometry both kernels take after them.
        unsafe {
            if self.is_2x2_vectorizable() {
                let pairs = self.planes() * self.oh * (self.w / 4);
                kernels.vectorized_2x2.launch(
                    stream,
                    self.launch_config(op, pairs)?,
                    ptrs.with_sizes3([g[0], g[1], g[2]]),
                )
            } else {
                kernels.general.launch(stream, self.launch_config(op, items)?, ptrs.with_sizes(g))
            }
        }
    }
}

/// The pointer arguments of a pooling pass, which its kernels take before the geometry: the
/// general kernels all eleven sizes of [`Geometry::args`], the 2×2 ones the first three.
trait PoolPointers: Copy {
    type General: KernelArgs;
    type Pairs: KernelArgs;
    fn with_sizes(self, sizes: [usize; 11]) -> Self::General;
    fn with_sizes3(self, sizes: [usize; 3]) -> Self::Pairs;
}

macro_rules! pool_pointers {
    ($($p:ident)+) => {
        impl<$($p: DeviceArg),+> PoolPointers for ($($p,)+) {
            type General = ($($p,)+ usize, usize, usize, usize, usize, usize, usize, usize, usize, usize, usize);
            type Pairs = ($($p,)+ usize, usize, usize);
            #[allow(non_snake_case)]
            fn with_sizes(self, [a, b, c, d, e, f, g, h, i, j, k]: [usize; 11]) -> Self::General {
                let ($($p,)+) = self;
                ($($p,)+ a, b, c, d, e, f, g, h, i, j, k)
            }
            #[allow(non_snake_case)]
            fn with_sizes3(self, [a, b, c]: [usize; 3]) -> Self::Pairs {
                let ($($p,)+) = self;
                ($($p,)+ a, b, c)
            }
        }
    };
}
pool_pointers!(A B);
pool_pointers!(A B C);

/// The kernels of one pooling pass: the general one, and the 2×2 stride-2 one for rows of a
/// multiple of 4 floats (one thread per pair of outputs).
struct Kernels<P: PoolPointers> {
    general: Kernel<P::General>,
    vectorized_2x2: Kernel<P::Pairs>,
}

enum Argmax {
    Cuda(DeviceBuffer),
    Cpu(Vec<u8>),
}

/// What [`max_pool2d`] saves for its backward pass: the input shape, the parameters, and for
/// every output the position of its maximum in its window (row-major in the kernel window, one
/// byte; on the device for CUDA tensors).
pub struct MaxPoolSaved {
    geometry: Geometry,
    ctx: Context,
    argmax: Argmax,
}

impl MaxPoolSaved {
    /// Shape of the forward pass's input.
    pub fn input_shape(&self) -> [usize; 4] {
        self.geometry.input_shape()
    }
    /// The forward pass's parameters.
    pub fn params(&self) -> Pool2dParams {
        self.geometry.p
    }
    /// The argmax bytes, row-major over the output (waits for the forward pass).
    pub fn argmax(&self) -> Result<Vec<u8>> {
        match &self.argmax {
            Argmax::Cpu(v) => Ok(v.clone()),
            Argmax::Cuda(buf) => {
                let mut out = vec![0u8; buf.bytes()];
                if !out.is_empty() {
                    // SAFETY: the buffer of this stream holds `bytes` bytes, written by the
                    // forward pass queued before; any byte is a valid u8.
                    unsafe { buf.stream().copy_dtoh_sync("MaxPoolSaved::argmax", &mut out, buf.ptr()) }?;
                }
                Ok(out)
            }
        }
    }
}

impl fmt::Debug for MaxPoolSaved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MaxPoolSaved({:?}, {:?})", self.geometry.input_shape(), self.geometry.p)
    }
}

/// `f(plane, output)` for each plane's slice of `out` (planes of `per_plane` elements), in
/// parallel.
fn cpu_planes<T: Send>(out: &mut [T], per_plane: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if per_plane > 0 {
        out.par_chunks_mut(per_plane).enumerate().for_each(|(plane, o)| f(plane, o));
    }
}

/// Sum of `src[i·stride + j]` over rows `i` in `rows` and columns `j` in `cols`, in f64 (the CPU
/// twin of the average-pooling kernels' `rect_sum`).
fn rect_sum(src: &[f32], stride: usize, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>) -> f64 {
    let mut sum = 0.0f64;
    for i in rows {
        for j in cols.clone() {
            sum += src[i * stride + j] as f64;
        }
    }
    sum
}

/// Max pooling of an NCHW tensor; padding counts as −∞, NaN propagates. Returns the output
/// `[N, C, OH, OW]` and what [`max_pool2d_backward`] needs. Windows hold at most 256 elements.
pub fn max_pool2d(x: &Tensor, p: Pool2dParams) -> Result<(Tensor, MaxPoolSaved)> {
    const OP: &str = "max_pool2d";
    x.require_f32(OP)?;
    let g = Geometry::of(OP, x.shape(), p)?;
    if p.kernel.0 * p.kernel.1 > MAX_POOL_WINDOW {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: x.shape().to_vec(),
            reason: format!("kernel {:?} has more than {MAX_POOL_WINDOW} elements", p.kernel),
        });
    }
    let ctx = x.context();
    let outputs = g.planes() * g.oh * g.ow;
    match x.storage() {
        Storage::Cpu(v) => {
            let mut y = vec![0.0f32; outputs];
            let mut argmax = vec![0u8; outputs];
            let kw = p.kernel.1;
            let mut pairs: Vec<(&mut [f32], &mut [u8])> =
                y.chunks_mut(g.oh * g.ow).zip(argmax.chunks_mut(g.oh * g.ow)).collect();
            pairs.par_iter_mut().enumerate().for_each(|(plane, (yp, ap))| {
                let src = &v[plane * g.h * g.w..(plane + 1) * g.h * g.w];
                for r in 0..g.oh {
                    for c in 0..g.ow {
                        let ((rows, dr), (cols, dc)) = g.window(r, c);
                        let mut best = (f32::NEG_INFINITY, dr * kw + dc);
                        for (i, row) in rows.clone().enumerate() {
                            for (j, col) in cols.clone().enumerate() {
                                let e = src[row * g.w + col];
                                if e > best.0 || e.is_nan() {
                                    best = (e, (i + dr) * kw + j + dc);
                                }
                            }
                        }
                        yp[r * g.ow + c] = best.0;
                        ap[r * g.ow + c] = best.1 as u8;
                    }
                }
            });
            let saved = MaxPoolSaved { geometry: g, ctx: ctx.clone(), argmax: Argmax::Cpu(argmax) };
            Ok((Tensor::from_cpu(ctx, &g.output_shape(), y), saved))
        }
        Storage::Cuda(_) => {
            let stream = ctx.stream(OP)?;
            let y = Tensor::uninit(ctx, &g.output_shape(), OP)?;
            let argmax = stream.device.pool.alloc(stream, outputs, OP)?;
            if outputs > 0 {
                let kernels =
                    Kernels { general: kernels::max_pool2d_f32, vectorized_2x2: kernels::max_pool2d_2x2_f32 };
                // SAFETY: `max_pool2d_f32` and `max_pool2d_2x2_f32` take (x, y, argmax): x holds
                // planes·h·w floats (16-byte aligned rows for the 2×2 kernel: w % 4 == 0), y and
                // argmax planes·oh·ow floats and bytes; the geometry was checked (windows of
                // ≤ 256 elements, each with a valid element).
                unsafe {
                    g.launch(stream, OP, kernels, outputs, (x.ptr(), y.ptr_mut(), argmax.dev_ptr_mut()))?
                };
            }
            Ok((y, MaxPoolSaved { geometry: g, ctx: ctx.clone(), argmax: Argmax::Cuda(argmax) }))
        }
    }
}

/// The gradient of [`max_pool2d`] w.r.t. its input: each element gets the sum of `dy` over the
/// windows whose maximum it was.
pub fn max_pool2d_backward(dy: &Tensor, saved: &MaxPoolSaved) -> Result<Tensor> {
    const OP: &str = "max_pool2d_backward";
    dy.require_f32(OP)?;
    if !dy.context().same_queue(&saved.ctx) {
        return Err(dy.context().mismatch(OP, &saved.ctx));
    }
    let g = saved.geometry;
    g.check_output(OP, dy)?;
    let ctx = dy.context();
    match (dy.storage(), &saved.argmax) {
        (Storage::Cpu(d), Argmax::Cpu(argmax)) => {
            let mut dx = vec![0.0f32; g.planes() * g.h * g.w];
            let kw = g.p.kernel.1;
            cpu_planes(&mut dx, g.h * g.w, |plane, out| {
                let mut acc = vec![0.0f64; g.h * g.w];
                for r in 0..g.oh {
                    for c in 0..g.ow {
                        let o = plane * g.oh * g.ow + r * g.ow + c;
                        let ((rows, dr), (cols, dc)) = g.window(r, c);
                        let pos = argmax[o] as usize;
                        let (i, j) = (rows.start + pos / kw - dr, cols.start + pos % kw - dc);
                        acc[i * g.w + j] += d[o] as f64;
                    }
                }
                for (o, a) in out.iter_mut().zip(acc) {
                    *o = a as f32;
                }
            });
            Ok(Tensor::from_cpu(ctx, &g.input_shape(), dx))
        }
        (Storage::Cuda(_), Argmax::Cuda(argmax)) => {
            let stream = ctx.stream(OP)?;
            let dx = Tensor::uninit(ctx, &g.input_shape(), OP)?;
            if dx.is_empty() {
                return Ok(dx);
            }
            let kernels = Kernels {
                general: kernels::max_pool2d_bwd_f32,
                vectorized_2x2: kernels::max_pool2d_2x2_bwd_f32,
            };
            // SAFETY: `max_pool2d_bwd_f32` and `max_pool2d_2x2_bwd_f32` take (dy, argmax, dx): dy
            // and argmax hold planes·oh·ow floats and bytes (the forward pass's, same geometry),
            // dx planes·h·w floats (w % 4 == 0 for the 2×2 kernel, which writes each once).
            unsafe { g.launch(stream, OP, kernels, dx.len(), (dy.ptr(), argmax.dev_ptr(), dx.ptr_mut()))? };
            Ok(dx)
        }
        _ => Err(dy.context().mismatch(OP, &saved.ctx)),
    }
}

/// Average pooling of an NCHW tensor, padding counted in the divisor (`count_include_pad`,
/// PyTorch's default): every window divides by `kh·kw`.
pub fn avg_pool2d(x: &Tensor, p: Pool2dParams) -> Result<Tensor> {
    const OP: &str = "avg_pool2d";
    x.require_f32(OP)?;
    let g = Geometry::of(OP, x.shape(), p)?;
    let ctx = x.context();
    let divisor = (p.kernel.0 * p.kernel.1) as f64;
    match x.storage() {
        Storage::Cpu(v) => {
            let mut y = vec![0.0f32; g.planes() * g.oh * g.ow];
            cpu_planes(&mut y, g.oh * g.ow, |plane, out| {
                let src = &v[plane * g.h * g.w..(plane + 1) * g.h * g.w];
                for r in 0..g.oh {
                    for c in 0..g.ow {
                        let ((rows, _), (cols, _)) = g.window(r, c);
                        out[r * g.ow + c] = (rect_sum(src, g.w, rows, cols) / divisor) as f32;
                    }
                }
            });
            Ok(Tensor::from_cpu(ctx, &g.output_shape(), y))
        }
        Storage::Cuda(_) => {
            let stream = ctx.stream(OP)?;
            let y = Tensor::uninit(ctx, &g.output_shape(), OP)?;
            if y.is_empty() {
                return Ok(y);
            }
            let kernels =
                Kernels { general: kernels::avg_pool2d_f32, vectorized_2x2: kernels::avg_pool2d_2x2_f32 };
            // SAFETY: `avg_pool2d_f32` and `avg_pool2d_2x2_f32` take (x, y): x holds planes·h·w
            // floats (w % 4 == 0 for the 2×2 kernel), y planes·oh·ow; geometry checked.
            unsafe { g.launch(stream, OP, kernels, y.len(), (x.ptr(), y.ptr_mut()))? };
            Ok(y)
        }
    }
}

/// The gradient of [`avg_pool2d`] w.r.t. its input of shape `x_shape`: each element gets
/// `dy / (kh·kw)` summed over the windows that hold it.
pub fn avg_pool2d_backward(dy: &Tensor, x_shape: &[usize], p: Pool2dParams) -> Result<Tensor> {
    const OP: &str = "avg_pool2d_backward";
    dy.require_f32(OP)?;
    let g = Geometry::of(OP, x_shape, p)?;
    g.check_output(OP, dy)?;
    let ctx = dy.context();
    let divisor = (p.kernel.0 * p.kernel.1) as f64;
    match dy.storage() {
        Storage::Cpu(d) => {
            let ((kh, kw), (sh, sw), (ph, pw)) = (p.kernel, p.stride, p.padding);
            let mut dx = vec![0.0f32; g.planes() * g.h * g.w];
            cpu_planes(&mut dx, g.h * g.w, |plane, out| {
                let src = &d[plane * g.oh * g.ow..(plane + 1) * g.oh * g.ow];
                for i in 0..g.h {
                    for j in 0..g.w {
                        let rows = Geometry::covering(i, ph, kh, sh, g.oh);
                        let cols = Geometry::covering(j, pw, kw, sw, g.ow);
                        out[i * g.w + j] = (rect_sum(src, g.ow, rows, cols) / divisor) as f32;
                    }
                }
            });
            Ok(Tensor::from_cpu(ctx, &g.input_shape(), dx))
        }
        Storage::Cuda(_) => {
            let stream = ctx.stream(OP)?;
            let dx = Tensor::uninit(ctx, &g.input_shape(), OP)?;
            if dx.is_empty() {
                return Ok(dx);
            }
            let kernels = Kernels {
                general: kernels::avg_pool2d_bwd_f32,
                vectorized_2x2: kernels::avg_pool2d_2x2_bwd_f32,
            };
            // SAFETY: `avg_pool2d_bwd_f32` and `avg_pool2d_2x2_bwd_f32` take (dy, dx): dy holds
            // planes·oh·ow floats, dx planes·h·w (w % 4 == 0 for the 2×2 kernel, which writes
            // each once); geometry checked.
            unsafe { g.launch(stream, OP, kernels, dx.len(), (dy.ptr(), dx.ptr_mut()))? };
            Ok(dx)
        }
    }
}
