//! Reductions: sum, mean, max, min over all elements, and along the last axis.
//! Kernels: `gpu-kernels/src/reduce/`.
//!
//! Deterministic on both backends: the GPU's combine order depends only on the size and the
//! device; the CPU folds fixed chunks in f64 and combines them in order. Sum of nothing is 0 and
//! mean of nothing NaN (as in PyTorch); max and min of nothing are errors.
use super::rows::{ColumnPlan, RowKernels, RowPlan};
use super::CPU_CHUNK;
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{ByDType, DevPtr, DevPtrMut};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::stream::Stream;
use crate::shapes::{REDUCE_ALL_BLOCK, ROW_APPLY};
use crate::tensor::{DType, Storage, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// x, n, partials, counter, out, scale.
type AllArgs<T> = (DevPtr<T>, usize, DevPtrMut<f32>, DevPtrMut<u32>, DevPtrMut<T>, f32);
/// x, partials, out, rows, cols, team, chunk, mode, scale.
type RowsArgs<T> = (DevPtr<T>, DevPtrMut<f32>, DevPtrMut<T>, usize, usize, usize, usize, u32, f32);
/// x, rows, cols, c_lanes, rows per group, partials, counters, out.
type LeadingArgs<T> = (DevPtr<T>, usize, usize, usize, usize, DevPtrMut<f32>, DevPtrMut<u32>, DevPtrMut<T>);
/// x, dy, dx, rows, cols, c_lanes, rows per group, partials, counters, out.
type GeluSumArgs<T> = (
    DevPtr<T>,
    DevPtr<T>,
    DevPtrMut<T>,
    usize,
    usize,
    usize,
    usize,
    DevPtrMut<f32>,
    DevPtrMut<u32>,
    DevPtrMut<T>,
);

const SUM_LEADING: ByDType<LeadingArgs<f32>, LeadingArgs<u16>> =
    by_dtype!(sum_leading_f32, sum_leading_f16, sum_leading_bf16);
const GELU_BWD_SUM_LEADING: ByDType<GeluSumArgs<f32>, GeluSumArgs<u16>> =
    by_dtype!(gelu_bwd_sum_leading_f32, gelu_bwd_sum_leading_f16, gelu_bwd_sum_leading_bf16);

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

    /// The whole-tensor kernels of this combine; mean runs as a sum that is scaled at the end.
    fn all_kernels(self) -> ByDType<AllArgs<f32>, AllArgs<u16>> {
        match self {
            Reduce::Sum | Reduce::Mean => by_dtype!(sum_all_f32, sum_all_f16, sum_all_bf16),
            Reduce::Max => by_dtype!(max_all_f32, max_all_f16, max_all_bf16),
            Reduce::Min => by_dtype!(min_all_f32, min_all_f16, min_all_bf16),
        }
    }

    /// The row kernels of this combine.
    fn rows_kernels(self) -> RowKernels<RowsArgs<f32>, RowsArgs<u16>> {
        match self {
            Reduce::Sum | Reduce::Mean => [
                by_dtype!(sum_rows_f32, sum_rows_f16, sum_rows_bf16),
                by_dtype!(sum_rows_v16_f32, sum_rows_v16_f16, sum_rows_v16_bf16),
                by_dtype!(sum_rows_v8_f32, sum_rows_v8_f16, sum_rows_v8_bf16),
            ],
            Reduce::Max => [
                by_dtype!(max_rows_f32, max_rows_f16, max_rows_bf16),
                by_dtype!(max_rows_v16_f32, max_rows_v16_f16, max_rows_v16_bf16),
                by_dtype!(max_rows_v8_f32, max_rows_v8_f16, max_rows_v8_bf16),
            ],
            Reduce::Min => [
                by_dtype!(min_rows_f32, min_rows_f16, min_rows_bf16),
                by_dtype!(min_rows_v16_f32, min_rows_v16_f16, min_rows_v16_bf16),
                by_dtype!(min_rows_v8_f32, min_rows_v8_f16, min_rows_v8_bf16),
            ],
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

    /// The CPU twin: f64 accumulation in fixed chunks, combined in order, rounded once to `dtype`.
    fn cpu(self, x: &[f32], dtype: DType) -> f32 {
        match self {
            Reduce::Sum | Reduce::Mean => {
                let partial: Vec<f64> =
                    x.par_chunks(CPU_CHUNK).map(|c| c.iter().map(|&v| v as f64).sum()).collect();
                let total: f64 = partial.iter().sum();
                dtype.round(if matches!(self, Reduce::Mean) { total / x.len() as f64 } else { total })
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
    let (n, dtype) = (x.len(), x.dtype());
    if n == 0 {
        let value = op.of_empty(name, x.shape())?;
        return x.context().full_as(&[], value, dtype);
    }
    match x.storage() {
        Storage::Cpu(v) => Ok(Tensor::from_cpu_as(x.context(), &[], dtype, vec![op.cpu(v, dtype)])),
        Storage::Cuda(_) => {
            let stream = x.context().stream(name)?;
            let cfg = LaunchConfig::grid_stride(&stream.device.info, n.div_ceil(8), REDUCE_ALL_BLOCK, 1);
            let blocks = cfg.grid.0 as usize;
            let partials = stream.device.pool.alloc(stream, blocks * 4, name)?;
            let counter = stream.reduce_counter()?;
            let out = Tensor::uninit_as(x.context(), &[], dtype, name)?;
            launch_by_dtype!(op.all_kernels(), dtype, |k| {
                let args =
                    (x.ptr(), n, partials.dev_ptr_mut(), DevPtrMut::new(counter), out.ptr_mut(), op.scale(n));
                // SAFETY: `<op>_all_<dtype>(x, n, partials, counter, out, scale)`: `x` holds `n`
                // values of the kernel's type, `partials` one float per block of this grid,
                // `counter` is this stream's zeroed counter (launches writing it never overlap,
                // and the kernel leaves it zero), `out` one value; blocks of REDUCE_ALL_BLOCK
                // threads (≤ 1024, a multiple of 32).
                unsafe { k.launch(stream, cfg, args) }
            })?;
            Ok(out)
        }
    }
}

/// `(rows, cols)` of `x` viewed as rows of its last axis (rank ≥ 1).
fn last_axis(name: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    match x.shape().split_last() {
        Some((&cols, outer)) => Ok((outer.iter().product(), cols)),
        None => Err(Error::InvalidArgument {
            op: name,
            shape: vec![],
            reason: "a scalar has no last axis".into(),
        }),
    }
}

fn reduce_rows(x: &Tensor, op: Reduce) -> Result<Tensor> {
    let name = op.name(true);
    let (rows, cols) = last_axis(name, x)?;
    let (outer, dtype) = (&x.shape()[..x.rank() - 1], x.dtype());
    if cols == 0 {
        let value = op.of_empty(name, x.shape())?;
        return x.context().full_as(outer, value, dtype);
    }
    match x.storage() {
        Storage::Cpu(v) => {
            let out = if rows == 0 {
                Vec::new()
            } else {
                v.par_chunks(cols).map(|row| op.cpu(row, dtype)).collect()
            };
            Ok(Tensor::from_cpu_as(x.context(), outer, dtype, out))
        }
        Storage::Cuda(_) => {
            let out = Tensor::uninit_as(x.context(), outer, dtype, name)?;
            if rows == 0 {
                return Ok(out);
            }
            let stream = x.context().stream(name)?;
            let info = &stream.device.info;
            let plan = RowPlan::new(name, x.shape(), (rows, cols), info)?.for_reduction();
            let kernels = op.rows_kernels();
            let scale = op.scale(cols);
            plan.run(name, stream, 1, |l, partials| {
                // The second pass of a split row folds the row's partials: rows of `chunks` floats
                // (at most a block's worth: RowPlan refuses longer rows), never split.
                let (launch, width) = if l.mode == ROW_APPLY {
                    (RowPlan::whole_rows(l.rows, plan.chunks).launches()[0], plan.chunks)
                } else {
                    (*l, cols)
                };
                launch_by_dtype!(kernels[launch.variant()], dtype, |k| {
                    let (x, out) = (x.ptr(), out.ptr_mut());
                    let args = (x, partials, out, l.rows, width, launch.team, launch.chunk, l.mode, scale);
                    // SAFETY: `<op>_rows_<dtype>`: x holds rows·cols values of the kernel's type,
                    // out rows values; partials holds `chunks` floats per row (null and unread
                    // unless split in two launches); the launch shapes (and clusters) are
                    // RowPlan's, the second pass's for rows of `chunks` floats.
                    unsafe { k.launch_clustered(stream, launch.cfg, launch.cluster, args) }
                })
            })?;
            Ok(out)
        }
    }
}

fn sum_leading(x: &Tensor) -> Result<Tensor> {
    const OP: &str = "sum_leading";
    let (rows, cols) = last_axis(OP, x)?;
    let dtype = x.dtype();
    match x.storage() {
        Storage::Cpu(v) => {
            let sums: Vec<f32> = (0..cols)
                .into_par_iter()
                .map(|c| dtype.round((0..rows).map(|r| v[r * cols + c] as f64).sum::<f64>()))
                .collect();
            Ok(Tensor::from_cpu_as(x.context(), &[cols], dtype, sums))
        }
        Storage::Cuda(_) => {
            if rows == 0 || cols == 0 {
                return x.context().full_as(&[cols], 0.0, dtype);
            }
            let out = Tensor::uninit_as(x.context(), &[cols], dtype, OP)?;
            column_sums_launch(OP, x, (rows, cols), |stream, (plan, p, counters)| {
                launch_by_dtype!(SUM_LEADING, dtype, |k| {
                    let args =
                        (x.ptr(), rows, cols, plan.c_lanes, plan.rows_per_group, p, counters, out.ptr_mut());
                    // SAFETY: `sum_leading_<dtype>`: x holds rows·cols values of the kernel's
                    // type, out cols values; partials and counters as `column_sums_launch` gives
                    // them; ColumnPlan's grid.
                    unsafe { k.launch(stream, plan.cfg, args) }
                })
            })?;
            Ok(out)
        }
    }
}

/// The setup of a one-launch column sum over `rows × cols` (`launch(stream, (plan, partials,
/// counters))`): with more than one row group, `partials` holds cols floats per group and
/// `counters` is this stream's `COLUMN_COUNTERS` zeroed words, at least one per column block
/// (ColumnPlan keeps a split grid that narrow; launches writing them never overlap, and the
/// kernels leave them zero); else both are null (unread).
fn column_sums_launch(
    op: &'static str,
    x: &Tensor,
    (rows, cols): (usize, usize),
    launch: impl FnOnce(&Arc<Stream>, (&ColumnPlan, DevPtrMut<f32>, DevPtrMut<u32>)) -> Result<()>,
) -> Result<()> {
    let stream = x.context().stream(op)?;
    let plan = ColumnPlan::new(op, x.shape(), rows, cols, &stream.device.info)?;
    let (_partials, p) = plan.partials(op, stream, cols)?;
    let counters = DevPtrMut::new(if plan.groups > 1 { stream.column_counters()? } else { 0 });
    launch(stream, (&plan, p, counters))
}

/// A GELU layer's input and bias gradients in one pass: `(dx, db)` with `dx = gelu_backward(x,
/// dy)` (`x` the GELU's input, `[.., n]` like `dy`, one dtype) and `db` `[n]` its sums over every
/// axis but the last, accumulated in f32 (on the GPU from dx's values before their rounding to a
/// 16-bit dtype); deterministic. On the GPU, dx is not read again for the sums.
pub fn gelu_backward_bias(x: &Tensor, dy: &Tensor) -> Result<(Tensor, Tensor)> {
    const OP: &str = "gelu_backward_bias";
    x.check_pair(OP, dy)?;
    let (rows, cols) = last_axis(OP, x)?;
    let (ctx, dtype) = (x.context(), x.dtype());
    if matches!(x.storage(), Storage::Cpu(_)) || rows == 0 || cols == 0 {
        let dx = x.gelu_backward(dy)?;
        let db = dx.sum_leading()?;
        return Ok((dx, db));
    }
    let dx = Tensor::uninit_as(ctx, x.shape(), dtype, OP)?;
    let out = Tensor::uninit_as(ctx, &[cols], dtype, OP)?;
    column_sums_launch(OP, x, (rows, cols), |stream, (plan, p, counters)| {
        launch_by_dtype!(GELU_BWD_SUM_LEADING, dtype, |k| {
            let (groups, c_lanes) = (plan.rows_per_group, plan.c_lanes);
            let args =
                (x.ptr(), dy.ptr(), dx.ptr_mut(), rows, cols, c_lanes, groups, p, counters, out.ptr_mut());
            // SAFETY: `gelu_bwd_sum_leading_<dtype>`: x and dy hold rows·cols values of the
            // kernel's type (same shape and dtype, checked above), dx as many (fresh), out cols
            // values; partials and counters as `column_sums_launch` gives them; ColumnPlan's grid.
            unsafe { k.launch(stream, plan.cfg, args) }
        })
    })?;
    Ok((dx, out))
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
    /// Sum of all elements, as a tensor of shape `[]` of the input's dtype (16-bit inputs are
    /// accumulated in f32; so are all the reductions here).
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

impl Tensor {
    /// Sums over every axis but the last: `[.., n]` → `[n]` (a linear layer's bias gradient from
    /// `[tokens, features]`). Any dtype, accumulated in f32, the result in the input's dtype;
    /// deterministic (row groups' partial sums added in order, no atomics).
    pub fn sum_leading(&self) -> Result<Tensor> {
        sum_leading(self)
    }
}
