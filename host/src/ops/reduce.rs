//! Reductions: sum, mean, max, min over all elements, and along the last axis.
//! Kernels: `gpu-kernels/src/reduce/`.
//!
//! Deterministic on both backends: the GPU's combine order depends only on the size and the
//! device; the CPU folds fixed chunks in f64 and combines them in order. Sum of nothing is 0 and
//! mean of nothing NaN (as in PyTorch); max and min of nothing are errors.
use super::CPU_CHUNK;
use crate::kernels;
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{DevPtr, DevPtrMut, Kernel};
use crate::runtime::launch::LaunchConfig;

type AllArgs = (DevPtr<f32>, usize, DevPtrMut<f32>, DevPtrMut<u32>, DevPtrMut<f32>, f32);
type RowsArgs = (DevPtr<f32>, usize, usize, DevPtrMut<f32>, f32);
use crate::shapes::{REDUCE_ALL_BLOCK, REDUCE_ROWS_BLOCK};
use crate::tensor::{Storage, Tensor};
use rayon::prelude::*;

/// Rows at least this long get a whole block each; shorter ones a warp each.
const BLOCK_PER_ROW_MIN_COLS: usize = 1024;

#[derive(Clone, Copy, Debug)]
enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
}

impl Reduce {
    fn name(self, rows: bool) -> &'static str {
        match (self, rows) {
            (Reduce::Sum, false) => "sum",
            (Reduce::Mean, false) => "mean",
            (Reduce::Max, false) => "max",
            (Reduce::Min, false) => "min",
            (Reduce::Sum, true) => "sum_last",
            (Reduce::Mean, true) => "mean_last",
            (Reduce::Max, true) => "max_last",
            (Reduce::Min, true) => "min_last",
        }
    }

    /// The whole-tensor kernel's combine; mean runs as a sum that is scaled at the end.
    fn all_kernel(self) -> Kernel<AllArgs> {
        match self {
            Reduce::Sum | Reduce::Mean => kernels::sum_all_f32,
            Reduce::Max => kernels::max_all_f32,
            Reduce::Min => kernels::min_all_f32,
        }
    }

    /// The row kernel's combine.
    fn rows_kernel(self) -> Kernel<RowsArgs> {
        match self {
            Reduce::Sum | Reduce::Mean => kernels::sum_rows_f32,
            Reduce::Max => kernels::max_rows_f32,
            Reduce::Min => kernels::min_rows_f32,
        }
    }

    fn scale(self, count: usize) -> f32 {
        match self {
            Reduce::Mean => (1.0 / count as f64) as f32,
            _ => 1.0,
        }
    }

    /// What reducing nothing gives (`op` on a tensor of `shape`), or the typed refusal.
    fn of_empty(self, op: &'static str, shape: &[usize]) -> Result<f32> {
        match self {
            Reduce::Sum => Ok(0.0),
            Reduce::Mean => Ok(f32::NAN),
            Reduce::Max | Reduce::Min => Err(Error::InvalidArgument {
                op,
                shape: shape.to_vec(),
                reason: "cannot reduce an empty set of elements".into(),
            }),
        }
    }

    /// The CPU twin: f64 accumulation in fixed chunks, combined in order.
    fn cpu(self, x: &[f32]) -> f32 {
        match self {
            Reduce::Sum | Reduce::Mean => {
                let partial: Vec<f64> =
                    x.par_chunks(CPU_CHUNK).map(|c| c.iter().map(|&v| v as f64).sum()).collect();
                let total: f64 = partial.iter().sum();
                (if matches!(self, Reduce::Mean) { total / x.len() as f64 } else { total }) as f32
            }
            Reduce::Max => fold_nan_wins(x, f32::NEG_INFINITY, |a, b| a > b),
            Reduce::Min => fold_nan_wins(x, f32::INFINITY, |a, b| a < b),
        }
    }
}

fn fold_nan_wins(x: &[f32], identity: f32, better: impl Fn(f32, f32) -> bool + Sync) -> f32 {
    let pick = |a: f32, b: f32| if better(a, b) || a.is_nan() { a } else { b };
    let partial: Vec<f32> =
        x.par_chunks(CPU_CHUNK).map(|c| c.iter().fold(identity, |a, &b| pick(a, b))).collect();
    partial.into_iter().fold(identity, pick)
}

fn reduce_all(x: &Tensor, op: Reduce) -> Result<Tensor> {
    let name = op.name(false);
    x.require_f32(name)?;
    let n = x.len();
    if n == 0 {
        let value = op.of_empty(name, x.shape())?;
        return x.context().full(&[], value);
    }
    match x.storage() {
        Storage::Cpu(v) => Ok(Tensor::from_cpu(x.context(), &[], vec![op.cpu(v)])),
        Storage::Cuda(_) => {
            let stream = x.context().stream(name)?;
            let cfg = LaunchConfig::grid_stride(&stream.device.info, n.div_ceil(4), REDUCE_ALL_BLOCK, 1);
            let blocks = cfg.grid.0 as usize;
            let partials = stream.device.pool.alloc(stream, blocks * 4, name)?;
            let counter = stream.reduce_counter()?;
            let out = Tensor::uninit(x.context(), &[], name)?;
            let args =
                (x.ptr(), n, partials.dev_ptr_mut(), DevPtrMut::new(counter), out.ptr_mut(), op.scale(n));
            // SAFETY: `<op>_all_f32(x, n, partials, counter, out, scale)`: `x` holds `n` floats,
            // `partials` one float per block of this grid, `counter` is this stream's zeroed
            // counter (launches on a stream do not overlap, and the kernel leaves it zero),
            // `out` one float; blocks of REDUCE_ALL_BLOCK threads (≤ 1024, a multiple of 32).
            unsafe { op.all_kernel().launch(stream, cfg, args)? };
            Ok(out)
        }
    }
}

fn reduce_rows(x: &Tensor, op: Reduce) -> Result<Tensor> {
    let name = op.name(true);
    x.require_f32(name)?;
    let Some((&cols, outer)) = x.shape().split_last() else {
        return Err(Error::InvalidArgument {
            op: name,
            shape: vec![],
            reason: "a scalar has no last axis".into(),
        });
    };
    let rows: usize = outer.iter().product();
    if cols == 0 {
        let value = op.of_empty(name, x.shape())?;
        return x.context().full(outer, value);
    }
    match x.storage() {
        Storage::Cpu(v) => {
            let out =
                if rows == 0 { Vec::new() } else { v.par_chunks(cols).map(|row| op.cpu(row)).collect() };
            Ok(Tensor::from_cpu(x.context(), outer, out))
        }
        Storage::Cuda(_) => {
            let out = Tensor::uninit(x.context(), outer, name)?;
            if rows == 0 {
                return Ok(out);
            }
            let stream = x.context().stream(name)?;
            let cfg = if cols >= BLOCK_PER_ROW_MIN_COLS {
                LaunchConfig {
                    grid: (rows as u32, 1, 1),
                    block: (REDUCE_ROWS_BLOCK as u32, 1, 1),
                    shared_bytes: 0,
                }
            } else {
                let rows_per_block = REDUCE_ROWS_BLOCK / 32;
                LaunchConfig {
                    grid: (rows.div_ceil(rows_per_block) as u32, 1, 1),
                    block: (32, rows_per_block as u32, 1),
                    shared_bytes: 0,
                }
            };
            if rows > i32::MAX as usize {
                return Err(Error::InvalidArgument {
                    op: name,
                    shape: x.shape().to_vec(),
                    reason: "more than 2^31-1 rows".into(),
                });
            }
            let args = (x.ptr(), rows, cols, out.ptr_mut(), op.scale(cols));
            // SAFETY: `<op>_rows_f32(x, rows, cols, out, scale)`: `x` holds rows·cols floats,
            // `out` rows floats; the block is (32, k) with one row per warp or (t > 32, 1) with
            // one row per block, and the grid covers every row.
            unsafe { op.rows_kernel().launch(stream, cfg, args)? };
            Ok(out)
        }
    }
}

macro_rules! reduce_ops {
    ($($(#[$doc:meta])* $method:ident => $f:ident($op:expr);)*) => {
        impl Tensor {$(
            $(#[$doc])*
            pub fn $method(&self) -> Result<Tensor> {
                $f(self, $op)
            }
        )*}
    };
}

reduce_ops! {
    /// Sum of all elements, as a tensor of shape `[]`.
    sum => reduce_all(Reduce::Sum);
    /// Mean of all elements (NaN for an empty tensor), shape `[]`.
    mean => reduce_all(Reduce::Mean);
    /// Largest element (NaN if any is NaN), shape `[]`; an error for an empty tensor.
    max => reduce_all(Reduce::Max);
    /// Smallest element (NaN if any is NaN), shape `[]`; an error for an empty tensor.
    min => reduce_all(Reduce::Min);
    /// Sums along the last axis: `[.., n]` → `[..]`.
    sum_last => reduce_rows(Reduce::Sum);
    /// Means along the last axis: `[.., n]` → `[..]`.
    mean_last => reduce_rows(Reduce::Mean);
    /// Maxima along the last axis: `[.., n]` → `[..]`.
    max_last => reduce_rows(Reduce::Max);
    /// Minima along the last axis: `[.., n]` → `[..]`.
    min_last => reduce_rows(Reduce::Min);
}
