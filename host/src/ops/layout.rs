//! Layout ops: copy and transpose. Kernel: `gpu-kernels/src/layout/transpose.rs`.
use super::CPU_CHUNK;
use crate::kernels;
use crate::runtime::error::{Error, Result};
use crate::runtime::launch::LaunchConfig;
use crate::shapes::{TRANSPOSE_BLOCK, TRANSPOSE_TILE, TRANSPOSE_TILE_WORDS};
use crate::tensor::{Storage, Tensor};
use rayon::prelude::*;

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
            Storage::Cuda(_) => {
                let out = Tensor::uninit(self.context(), &[cols, rows], OP)?;
                if out.is_empty() {
                    return Ok(out);
                }
                let (grid_x, grid_y) = (cols.div_ceil(TRANSPOSE_TILE), rows.div_ceil(TRANSPOSE_TILE));
                if !Self::transpose_fits(rows) || grid_x > i32::MAX as usize {
                    return Err(Error::InvalidArgument {
                        op: OP,
                        shape: self.shape().to_vec(),
                        reason: format!("at most {} rows", 65_535 * TRANSPOSE_TILE),
                    });
                }
                let cfg = LaunchConfig {
                    grid: (grid_x as u32, grid_y as u32, 1),
                    block: (TRANSPOSE_BLOCK as u32, 1, 1),
                    shared_bytes: (TRANSPOSE_TILE_WORDS * 4) as u32,
                };
                let stream = self.context().stream(OP)?;
                // SAFETY: `transpose_f32(x, rows, cols, out)`: `x` and `out` hold rows·cols
                // floats; TRANSPOSE_BLOCK threads, a grid of tiles covering the matrix, and
                // TRANSPOSE_TILE_WORDS floats of dynamic shared memory, as the kernel asks.
                unsafe {
                    kernels::transpose_f32.launch(stream, cfg, (self.ptr(), rows, cols, out.ptr_mut()))?
                };
                Ok(out)
            }
        }
    }
}
