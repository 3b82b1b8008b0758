//! Layout ops: copy, transpose, padded rows and the mini-batches of a device-resident dataset.
//! Kernels: `gpu-kernels/src/layout/{transpose,pad,gather}.rs`.
use super::nn::{LabelStorage, Labels};
use super::CPU_CHUNK;
use crate::kernels;
use crate::runtime::context::Backend;
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{DevPtr, DevPtrMut};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::pool::DeviceBuffer;
use crate::runtime::stream::Stream;
use crate::shapes::{GATHER_BLOCK, TRANSPOSE_BLOCK, TRANSPOSE_TILE, TRANSPOSE_TILE_WORDS};
use crate::tensor::{Storage, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// Threads of a `pad_split_f32` block (one value each along a row).
const PAD_SPLIT_BLOCK: usize = 256;
/// Threads of a `pad_rows_b16` block (one 16-byte output vector each).
const PAD_ROWS_BLOCK: usize = 256;

/// Copy `rows` rows of `cols` 16-bit values from `src` into rows `pitch` apart at `dst`, zeros
/// after each row's values (`pad_rows_b16`): an operand TMA cannot read in place, at about the
/// copy's rate where the driver's 2-D copy of such rows reaches ~0.35 TB/s.
///
/// # Safety
/// `src` holds rows·cols 16-bit values and `dst` rows·pitch, both in device memory of `stream`'s
/// device that stays allocated until the launch completes in stream order; `dst` is 16-byte
/// aligned, `pitch` a multiple of 8 not below `cols`, and nothing else writes `dst` meanwhile.
pub(crate) unsafe fn pad_rows_b16(
    stream: &Arc<Stream>,
    src: DevPtr<u16>,
    (rows, cols, pitch): (usize, usize, usize),
    dst: DevPtrMut<u16>,
) -> Result<()> {
    let vectors = rows * (pitch / 8);
    if vectors == 0 {
        return Ok(());
    }
    let cfg = LaunchConfig::grid_stride(&stream.device.info, vectors, PAD_ROWS_BLOCK, 1);
    // SAFETY: `pad_rows_b16(x, rows, cols, pitch, out)` reads rows·cols values at `src` and
    // writes rows·pitch at `dst` in 16-byte vectors, as this function's contract provides; any
    // 1-D grid covers them (grid-stride).
    unsafe { kernels::pad_rows_b16.launch(stream, cfg, (src, rows, cols, pitch, dst)) }
}

impl Tensor {
    /// A copy of this tensor in a buffer of its own (device-to-device on CUDA).
    pub fn copy(&self) -> Result<Tensor> {
        match self.storage() {
            Storage::Cpu(x) => Ok(Tensor::from_cpu_as(self.context(), self.shape(), self.dtype(), x.clone())),
            Storage::Cuda(src) => {
                let out = Tensor::uninit_as(self.context(), self.shape(), self.dtype(), "copy")?;
                if src.bytes() > 0 {
                    // SAFETY: both buffers hold `bytes` and live on this stream (`out` is fresh).
                    unsafe { src.stream().copy_dtod(out.device_ptr(), src.ptr(), src.bytes()) }?;
                }
                Ok(out)
            }
        }
    }

    /// Rows `range` of the first axis, copied into a tensor of their own: `[n, ..]` →
    /// `[range.len(), ..]`.
    pub fn rows(&self, range: std::ops::Range<usize>) -> Result<Tensor> {
        const OP: &str = "rows";
        let (n, row) = self.row_layout(OP)?;
        if range.start > range.end || range.end > n {
            return Err(Error::InvalidArgument {
                op: OP,
                shape: self.shape().to_vec(),
                reason: format!("rows {range:?} of {n}"),
            });
        }
        let mut shape = self.shape().to_vec();
        shape[0] = range.len();
        match self.storage() {
            Storage::Cpu(x) => {
                let data = x[range.start * row..range.end * row].to_vec();
                Ok(Tensor::from_cpu_as(self.context(), &shape, self.dtype(), data))
            }
            Storage::Cuda(src) => {
                let out = Tensor::uninit_as(self.context(), &shape, self.dtype(), OP)?;
                let (bytes, size) =
                    (range.len() * row * self.dtype().size_bytes(), self.dtype().size_bytes());
                if bytes > 0 {
                    let from = src.ptr() + (range.start * row * size) as u64;
                    // SAFETY: the source rows lie inside its buffer (range checked above), the
                    // fresh `out` holds `bytes`; both on this stream.
                    unsafe { src.stream().copy_dtod(out.device_ptr(), from, bytes) }?;
                }
                Ok(out)
            }
        }
    }

    /// Overwrite rows `start..start + src rows` of the first axis with `src` (same trailing
    /// shape and dtype), in place; like [`Tensor::copy_from_slice`], clones sharing the buffer
    /// see the new rows on CUDA.
    pub fn write_rows(&mut self, start: usize, src: &Tensor) -> Result<()> {
        const OP: &str = "write_rows";
        self.check_peer(OP, src)?;
        let (n, row) = self.row_layout(OP)?;
        let (m, src_row) = src.row_layout(OP)?;
        if self.dtype() != src.dtype() {
            return Err(Error::DTypeMismatch { op: OP, lhs: self.dtype(), rhs: src.dtype() });
        }
        if src_row != row || self.shape()[1..] != src.shape()[1..] || start + m > n {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: src.shape().to_vec(),
            });
        }
        if let Some(dst) = self.make_unique_cpu()? {
            let Storage::Cpu(x) = src.storage() else { unreachable!("peers share a backend") };
            dst[start * row..(start + m) * row].copy_from_slice(x);
            return Ok(());
        }
        let (Storage::Cuda(dst), Storage::Cuda(from)) = (self.storage(), src.storage()) else {
            unreachable!("peers share a backend")
        };
        let size = self.dtype().size_bytes();
        if m * row > 0 {
            // SAFETY: the destination rows lie inside its buffer (checked above), the source
            // holds them all; both buffers live on this stream.
            unsafe {
                dst.stream().copy_dtod(dst.ptr() + (start * row * size) as u64, from.ptr(), m * row * size)
            }?;
        }
        Ok(())
    }

    /// `(rows of the first axis, elements per row)`; rank ≥ 1.
    fn row_layout(&self, op: &'static str) -> Result<(usize, usize)> {
        match self.shape().split_first() {
            Some((&n, rest)) => Ok((n, rest.iter().product())),
            None => Err(Error::InvalidArgument { op, shape: vec![], reason: "needs rank ≥ 1".into() }),
        }
    }

    /// Whether the CUDA transpose takes a matrix of `rows` rows (one tile row per grid row).
    pub(crate) fn transpose_fits(rows: usize) -> bool {
        rows.div_ceil(TRANSPOSE_TILE) <= 65_535
    }

    /// The transpose of a matrix: `[rows, cols]` → `[cols, rows]`, materialised.
    pub fn transpose(&self) -> Result<Tensor> {
        const OP: &str = "transpose";
        self.require_f32(OP)?;
        let &[rows, cols] = self.shape() else {
            return Err(Error::InvalidArgument {
                op: OP,
                shape: self.shape().to_vec(),
                reason: "expects a 2-D tensor".into(),
            });
        };
        match self.storage() {
            Storage::Cpu(x) => {
                let mut out = vec![0.0f32; rows * cols];
                if rows > 0 {
                    out.par_chunks_mut(rows).with_min_len(CPU_CHUNK / rows.max(1)).enumerate().for_each(
                        |(c, dst)| {
                            for (r, d) in dst.iter_mut().enumerate() {
                                *d = x[r * cols + c];
                            }
                        },
                    );
                }
                Ok(Tensor::from_cpu(self.context(), &[cols, rows], out))
            }
            Storage::Cuda(_) => self.transpose_planes(OP, (1, rows, cols))?.reshape(&[cols, rows]),
        }
    }

    /// The transposes of `batch` row-major `[rows, cols]` matrices laid end to end (this CUDA
    /// tensor's `batch·rows·cols` values): `[batch, cols, rows]`.
    pub(crate) fn transpose_planes(
        &self,
        op: &'static str,
        (batch, rows, cols): (usize, usize, usize),
    ) -> Result<Tensor> {
        let out = Tensor::uninit(self.context(), &[batch, cols, rows], op)?;
        self.launch_transpose(op, (batch, rows, cols), rows, (&out, None))?;
        Ok(out)
    }

    /// [`Tensor::transpose_planes`] split for 3xTF32 products: each value's TF32 rounding, and
    /// the remainders (the value less its rounding, exact), `[batch, cols, pitch]` each: output
    /// rows `pitch` ≥ `rows` apart, the values past `rows` in each left unwritten.
    pub(crate) fn transpose_planes_split(
        &self,
        op: &'static str,
        (batch, rows, cols): (usize, usize, usize),
        pitch: usize,
    ) -> Result<(Tensor, Tensor)> {
        let hi = Tensor::uninit(self.context(), &[batch, cols, pitch], op)?;
        let lo = Tensor::uninit(self.context(), &[batch, cols, pitch], op)?;
        self.launch_transpose(op, (batch, rows, cols), pitch, (&hi, Some(&lo)))?;
        Ok((hi, lo))
    }

    /// This tensor's `[rows, cols]` values split for 3xTF32 products as in
    /// [`Tensor::transpose_planes_split`], not transposed: `[rows, pitch]` each (`pad_split_f32`).
    pub(crate) fn pad_split(
        &self,
        op: &'static str,
        (rows, cols): (usize, usize),
        pitch: usize,
    ) -> Result<(Tensor, Tensor)> {
        if self.len() != rows * cols || pitch < cols {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().to_vec(),
                rhs: vec![rows, cols, pitch],
            });
        }
        let hi = Tensor::uninit(self.context(), &[rows, pitch], op)?;
        let lo = Tensor::uninit(self.context(), &[rows, pitch], op)?;
        if hi.is_empty() {
            return Ok((hi, lo));
        }
        let cfg = LaunchConfig {
            grid: (cols.div_ceil(PAD_SPLIT_BLOCK) as u32, rows.min(65_535) as u32, 1),
            block: (PAD_SPLIT_BLOCK as u32, 1, 1),
            shared_bytes: 0,
        };
        let stream = self.context().stream(op)?;
        // SAFETY: `pad_split_f32(x, rows, cols, pitch, hi, lo)`: `x` (this tensor) holds
        // rows·cols floats (checked above), the fresh `hi` and `lo` rows·pitch each, pitch ≥
        // cols; the grid covers the columns along x (rows along y in any count, ≤ 65,535).
        unsafe {
            kernels::pad_split_f32.launch(
                stream,
                cfg,
                (self.ptr(), rows, cols, pitch, hi.ptr_mut(), lo.ptr_mut()),
            )?
        };
        Ok((hi, lo))
    }

    /// `transpose_f32` (or, with a second output, `transpose_split_f32`) of this tensor's
    /// `batch` matrices into the fresh `[batch, cols, pitch]` outputs (pitch ≥ rows).
    fn launch_transpose(
        &self,
        op: &'static str,
        (batch, rows, cols): (usize, usize, usize),
        pitch: usize,
        (out, lo): (&Tensor, Option<&Tensor>),
    ) -> Result<()> {
        if self.len() != batch * rows * cols {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().to_vec(),
                rhs: vec![batch, rows, cols],
            });
        }
        if out.is_empty() {
            return Ok(());
        }
        let (grid_x, grid_y) = (cols.div_ceil(TRANSPOSE_TILE), rows.div_ceil(TRANSPOSE_TILE));
        if !Self::transpose_fits(rows) || grid_x > i32::MAX as usize || batch > 65_535 {
            return Err(Error::InvalidArgument {
                op,
                shape: vec![batch, rows, cols],
                reason: format!("at most {} rows and 65535 matrices", 65_535 * TRANSPOSE_TILE),
            });
        }
        let cfg = LaunchConfig {
            grid: (grid_x as u32, grid_y as u32, batch as u32),
            block: (TRANSPOSE_BLOCK as u32, 1, 1),
            shared_bytes: (TRANSPOSE_TILE_WORDS * 4) as u32,
        };
        let stream = self.context().stream(op)?;
        // SAFETY: `transpose_f32(x, rows, cols, pitch, out)` / `transpose_split_f32(x, rows, cols,
        // pitch, hi, lo)` over `batch` grid layers: `x` (this tensor, length checked above) holds
        // batch·rows·cols floats and the fresh outputs (the callers' `[batch, cols, pitch]`
        // buffers, pitch ≥ rows) batch·cols·pitch;
        // TRANSPOSE_BLOCK threads, a grid of tiles covering each matrix, and TRANSPOSE_TILE_WORDS
        // floats of dynamic shared memory, as the kernels ask.
        unsafe {
            match lo {
                None => kernels::transpose_f32.launch(
                    stream,
                    cfg,
                    (self.ptr(), rows, cols, pitch, out.ptr_mut()),
                )?,
                Some(lo) => kernels::transpose_split_f32.launch(
                    stream,
                    cfg,
                    (self.ptr(), rows, cols, pitch, out.ptr_mut(), lo.ptr_mut()),
                )?,
            }
        };
        Ok(())
    }
}

/// A labelled dataset kept where its context computes (device memory on CUDA), served as
/// mini-batches in an order set once per epoch: [`DeviceDataset::next_batch`] gathers the next
/// rows of the order on the device, at a cursor kept on the device too, so a training step needs
/// no copy from the host, and a [`Graph`](crate::Graph) that captured it serves the next batch
/// at each replay. The order always holds as many indices as there are samples (a permutation
/// per epoch, or any indices with repeats), refreshed in place, so a graph keeps reading it.
pub struct DeviceDataset {
    samples: Tensor,
    labels: Labels,
    /// The samples to serve, in order: `len()` indices, each below `len()`.
    order: Labels,
    cursor: Cursor,
}

/// Where the next batch starts in the order.
enum Cursor {
    /// `[position, a zero counter for the gather's last block]`, two u32 on the device.
    Cuda(DeviceBuffer),
    Cpu(usize),
}

impl std::fmt::Debug for DeviceDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceDataset({:?})", self.samples.shape())
    }
}

impl DeviceDataset {
    /// `samples` `[n, ..]` (any dtype, at least one element a sample) with one label each, on the
    /// same context; served in their stored order until [`DeviceDataset::set_order`].
    pub fn new(samples: Tensor, labels: Labels) -> Result<Self> {
        const OP: &str = "DeviceDataset::new";
        let (n, row) = samples.row_layout(OP)?;
        if n == 0 || row == 0 || n > u32::MAX as usize {
            let reason = "needs 1 to 2^32-1 samples of at least one element each".into();
            return Err(Error::InvalidArgument { op: OP, shape: samples.shape().to_vec(), reason });
        }
        if labels.len() != n {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: samples.shape().to_vec(),
                rhs: vec![labels.len()],
            });
        }
        let ctx = samples.context().clone();
        if !ctx.same_queue(labels.context()) {
            return Err(ctx.mismatch(OP, labels.context()));
        }
        let cursor = match &ctx.backend {
            Backend::Cpu => Cursor::Cpu(0),
            Backend::Cuda(stream) => {
                let state = stream.device.pool.alloc(stream, 8, OP)?;
                // SAFETY: the fresh buffer of this stream holds two u32.
                unsafe { stream.copy_htod(OP, state.ptr(), &[0u32, 0]) }?;
                Cursor::Cuda(state)
            }
        };
        let order = ctx.labels(&(0..n as u32).collect::<Vec<_>>(), n)?;
        Ok(DeviceDataset { samples, labels, order, cursor })
    }

    /// Samples in the dataset.
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Serve the samples at `order` (`len()` indices, each below `len()`) from its start: one
    /// copy from the host, typically once per epoch, into the buffer a captured graph reads.
    /// Refused during a capture (`NotCapturable`): set it before the replays.
    pub fn set_order(&mut self, order: &[usize]) -> Result<()> {
        const OP: &str = "DeviceDataset::set_order";
        let n = self.len();
        if order.len() != n {
            return Err(Error::ShapeMismatch { op: OP, lhs: vec![n], rhs: vec![order.len()] });
        }
        if let Some(bad) = order.iter().find(|&&i| i >= n) {
            let reason = format!("index {bad} out of range for {n} samples");
            return Err(Error::InvalidArgument { op: OP, shape: vec![n], reason });
        }
        if let Backend::Cuda(stream) = &self.samples.context().backend {
            stream.refuse_in_capture(OP)?;
        }
        self.order.copy_from_slice(&order.iter().map(|&i| i as u32).collect::<Vec<_>>())?;
        match &mut self.cursor {
            Cursor::Cpu(c) => *c = 0,
            // SAFETY: the cursor's two u32 live on this stream, whose earlier gathers are ordered
            // before the copy.
            Cursor::Cuda(buf) => unsafe { buf.stream().copy_htod(OP, buf.ptr(), &[0u32, 0]) }?,
        }
        Ok(())
    }

    /// The next `size` samples of the order (`[size, ..]`, the samples' dtype) and their labels,
    /// wrapping around at its end; moves the cursor on by `size`. Capturable: a replay serves the
    /// batch after the previous one (keep the dataset alive while the graph may be launched, as
    /// any tensor a graph reads).
    pub fn next_batch(&mut self, size: usize) -> Result<(Tensor, Labels)> {
        const OP: &str = "DeviceDataset::next_batch";
        let m = self.order.len();
        if size == 0 || size > m {
            let reason = format!("batch of {size} from an order of {m}");
            return Err(Error::InvalidArgument { op: OP, shape: self.samples.shape().to_vec(), reason });
        }
        let ctx = self.samples.context().clone();
        let (_, row) = self.samples.row_layout(OP)?;
        let mut shape = self.samples.shape().to_vec();
        shape[0] = size;
        let classes = self.labels.classes();
        match (self.samples.storage(), self.labels.storage(), self.order.storage(), &mut self.cursor) {
            (Storage::Cpu(x), LabelStorage::Cpu(labels), LabelStorage::Cpu(order), Cursor::Cpu(c)) => {
                let picks: Vec<usize> = (0..size).map(|r| order[(*c + r) % m] as usize).collect();
                *c = (*c + size) % m;
                let data = picks.iter().flat_map(|&p| x[p * row..(p + 1) * row].iter().copied()).collect();
                let batch = Tensor::from_cpu_as(&ctx, &shape, self.samples.dtype(), data);
                let picked = LabelStorage::Cpu(picks.iter().map(|&p| labels[p]).collect());
                Ok((batch, Labels::from_storage(&ctx, classes, size, picked)))
            }
            (
                Storage::Cuda(_),
                LabelStorage::Cuda(labels),
                LabelStorage::Cuda(order),
                Cursor::Cuda(state),
            ) => {
                let stream = ctx.stream(OP)?;
                let out = Tensor::uninit_as(&ctx, &shape, self.samples.dtype(), OP)?;
                let picked = stream.device.pool.alloc(stream, size * 4, OP)?;
                let cfg = LaunchConfig::covering(size * row, GATHER_BLOCK);
                let (l, o, st, ol) =
                    (labels.dev_ptr(), order.dev_ptr(), state.dev_ptr_mut(), picked.dev_ptr_mut());
                // SAFETY: `gather_batch_<bits>`: samples hold n·row elements of the kernel's width
                // and labels n u32 (n = their rows, checked in `new`); the order holds m indices
                // below n (checked on upload); the state is this dataset's cursor (below m: set
                // to 0 and moved on mod m only by these launches, which its write orders on the
                // stream and in a captured graph) and a zero
                // counter that its last block resets; `out` and `picked` are fresh buffers of
                // size·row elements and size u32; size ≤ m; a 1-D grid.
                unsafe {
                    if self.samples.dtype().size_bytes() == 4 {
                        let args = (self.samples.ptr(), l, o, st, out.ptr_mut(), ol, m, row, size);
                        kernels::gather_batch_b32.launch(stream, cfg, args)
                    } else {
                        let args = (self.samples.ptr(), l, o, st, out.ptr_mut(), ol, m, row, size);
                        kernels::gather_batch_b16.launch(stream, cfg, args)
                    }
                }?;
                Ok((out, Labels::from_storage(&ctx, classes, size, LabelStorage::Cuda(picked))))
            }
            _ => unreachable!("a dataset's tensors share its context's backend"),
        }
    }
}
