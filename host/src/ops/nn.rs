//! Neural-network ops: along the last axis softmax, log-softmax, cross-entropy with logits, layer
//! norm; the elementwise losses (MSE, binary cross-entropy), dropout, and batch norm over
//! channels; forward and backward. Kernels: `gpu-kernels/src/nn/`.
use super::random::philox;
use super::rows::{ColumnPlan, RowKernels, RowPlan};
use super::CPU_CHUNK;
use crate::kernels;
use crate::runtime::context::{Backend, Context};
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{ByDType, DevPtr, DevPtrMut, Kernel};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::pool::DeviceBuffer;
use crate::runtime::stream::Stream;
use crate::shapes::{
    BATCHNORM_BLOCK, BATCHNORM_BLOCKS_PER_SM, BATCHNORM_UNROLL, CE_BLOCKS_PER_SM, CE_BLOCK_MAX, CE_BLOCK_MIN,
    CE_MIN_SEGMENT, CE_NARROW_BLOCK, CE_NARROW_COLS, CE_UNROLL, ELEMENTWISE_BLOCK, LAYERNORM_FUSED_BLOCK,
    LAYERNORM_FUSED_COLS, LAYERNORM_WARP_MIN_COLS, LAYERNORM_WARP_VECTORS, LOSS_BLOCK, ROW_APPLY,
    ROW_PARTIAL, ROW_WHOLE,
};
use crate::tensor::{Storage, Tensor};
use crate::DType;
use rayon::prelude::*;

/// The narrowest rows the one-launch layer-norm backward takes: from here on every lane of its
/// warp holds at least one 16-byte vector of a 16-bit row (narrower rows keep smaller teams).
const LAYERNORM_FUSED_MIN_COLS: usize = 257;

/// Softmax and log-softmax: x, out, partials, rows, cols, team, chunk, mode.
type SoftmaxArgs<T> = (DevPtr<T>, DevPtrMut<T>, DevPtrMut<f32>, usize, usize, usize, usize, u32);
/// Their backward passes: y, dy, dx, partials, rows, cols, team, chunk, mode.
type SoftmaxBwdArgs<T> =
    (DevPtr<T>, DevPtr<T>, DevPtrMut<T>, DevPtrMut<f32>, usize, usize, usize, usize, u32);
/// Layer norm: x, γ, β, y, mean, rstd, partials, rows, cols, team, chunk, mode, eps.
type LayerNormArgs<T> = (
    DevPtr<T>,
    DevPtr<T>,
    DevPtr<T>,
    DevPtrMut<T>,
    DevPtrMut<f32>,
    DevPtrMut<f32>,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    usize,
    u32,
    f32,
);
/// The warp-row layer norm: x, γ, β, y, mean, rstd, rows, cols, eps.
type LayerNormWarpArgs<T> =
    (DevPtr<T>, DevPtr<T>, DevPtr<T>, DevPtrMut<T>, DevPtrMut<f32>, DevPtrMut<f32>, usize, usize, f32);
/// Layer norm's dx: x, γ, dy, mean, rstd, dx, partials, rows, cols, team, chunk, mode.
type LayerNormDxArgs<T> = (
    DevPtr<T>,
    DevPtr<T>,
    DevPtr<T>,
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtrMut<T>,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    usize,
    u32,
);
/// The one-launch layer-norm backward: x, γ, dy, residual (read by the `_add` kernels only),
/// mean, rstd, dx, partials, counter, dγ, dβ, rows, cols.
type LayerNormBwdArgs<T> = (
    DevPtr<T>,
    DevPtr<T>,
    DevPtr<T>,
    DevPtr<T>,
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtrMut<T>,
    DevPtrMut<f32>,
    DevPtrMut<u32>,
    DevPtrMut<T>,
    DevPtrMut<T>,
    usize,
    usize,
);
/// Layer norm's dγ, dβ per row group: x, dy, mean, rstd, partials, dγ, dβ, rows, cols, c_lanes,
/// rows per group.
type LayerNormParamsArgs<T> = (
    DevPtr<T>,
    DevPtr<T>,
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtrMut<f32>,
    DevPtrMut<T>,
    DevPtrMut<T>,
    usize,
    usize,
    usize,
    usize,
);
/// The final pass of a column sum: partials, groups, cols, stride, c_lanes, out.
pub(crate) type ColumnPartialsArgs<T> = (DevPtr<f32>, usize, usize, usize, usize, DevPtrMut<T>);
/// Dropout: x, residual (or null), y, n, seed, p, scale.
type DropoutArgs<T> = (DevPtr<T>, DevPtr<T>, DevPtrMut<T>, usize, u64, f32, f32);
/// Dropout with the seed on the device: x, residual, y, n, seeds, p, scale.
type DropoutDevArgs<T> = (DevPtr<T>, DevPtr<T>, DevPtrMut<T>, usize, DevPtr<u64>, f32, f32);

// Row kernels by the values a thread holds (`RowLaunch::variant`: 32, 16, 8).
const SOFTMAX: RowKernels<SoftmaxArgs<f32>, SoftmaxArgs<u16>> = [
    by_dtype!(softmax_f32, softmax_f16, softmax_bf16),
    by_dtype!(softmax_v16_f32, softmax_v16_f16, softmax_v16_bf16),
    by_dtype!(softmax_v8_f32, softmax_v8_f16, softmax_v8_bf16),
];
/// The 32-value softmax for rows split over a cluster (its mode a compile-time constant).
const SOFTMAX_CLUSTER: ByDType<SoftmaxArgs<f32>, SoftmaxArgs<u16>> =
    by_dtype!(softmax_cluster_f32, softmax_cluster_f16, softmax_cluster_bf16);
const LOG_SOFTMAX: RowKernels<SoftmaxArgs<f32>, SoftmaxArgs<u16>> = [
    by_dtype!(log_softmax_f32, log_softmax_f16, log_softmax_bf16),
    by_dtype!(log_softmax_v16_f32, log_softmax_v16_f16, log_softmax_v16_bf16),
    by_dtype!(log_softmax_v8_f32, log_softmax_v8_f16, log_softmax_v8_bf16),
];
const SOFTMAX_BWD: RowKernels<SoftmaxBwdArgs<f32>, SoftmaxBwdArgs<u16>> = [
    by_dtype!(softmax_bwd_f32, softmax_bwd_f16, softmax_bwd_bf16),
    by_dtype!(softmax_bwd_v16_f32, softmax_bwd_v16_f16, softmax_bwd_v16_bf16),
    by_dtype!(softmax_bwd_v8_f32, softmax_bwd_v8_f16, softmax_bwd_v8_bf16),
];
const LOG_SOFTMAX_BWD: RowKernels<SoftmaxBwdArgs<f32>, SoftmaxBwdArgs<u16>> = [
    by_dtype!(log_softmax_bwd_f32, log_softmax_bwd_f16, log_softmax_bwd_bf16),
    by_dtype!(log_softmax_bwd_v16_f32, log_softmax_bwd_v16_f16, log_softmax_bwd_v16_bf16),
    by_dtype!(log_softmax_bwd_v8_f32, log_softmax_bwd_v8_f16, log_softmax_bwd_v8_bf16),
];
const LAYERNORM_FWD: RowKernels<LayerNormArgs<f32>, LayerNormArgs<u16>> = [
    by_dtype!(layernorm_fwd_f32, layernorm_fwd_f16, layernorm_fwd_bf16),
    by_dtype!(layernorm_fwd_v16_f32, layernorm_fwd_v16_f16, layernorm_fwd_v16_bf16),
    by_dtype!(layernorm_fwd_v8_f32, layernorm_fwd_v8_f16, layernorm_fwd_v8_bf16),
];
/// The 32-value build at 64 registers, for rows split over a cluster (build.rs).
const LAYERNORM_FWD_CLUSTER: ByDType<LayerNormArgs<f32>, LayerNormArgs<u16>> =
    by_dtype!(layernorm_fwd_cluster_f32, layernorm_fwd_cluster_f16, layernorm_fwd_cluster_bf16);
const LAYERNORM_DX: RowKernels<LayerNormDxArgs<f32>, LayerNormDxArgs<u16>> = [
    by_dtype!(layernorm_bwd_dx_f32, layernorm_bwd_dx_f16, layernorm_bwd_dx_bf16),
    by_dtype!(layernorm_bwd_dx_v16_f32, layernorm_bwd_dx_v16_f16, layernorm_bwd_dx_v16_bf16),
    by_dtype!(layernorm_bwd_dx_v8_f32, layernorm_bwd_dx_v8_f16, layernorm_bwd_dx_v8_bf16),
];
const LAYERNORM_BWD: ByDType<LayerNormBwdArgs<f32>, LayerNormBwdArgs<u16>> =
    by_dtype!(layernorm_bwd_f32, layernorm_bwd_f16, layernorm_bwd_bf16);
/// The one-launch backward adding a residual, `[f16, bf16]` (f32 rows add it after).
const LAYERNORM_BWD_ADD: [Kernel<LayerNormBwdArgs<u16>>; 2] =
    [kernels::layernorm_bwd_add_f16, kernels::layernorm_bwd_add_bf16];
/// The forward of 16-byte aligned rows a warp holds (`layer_norm_warp_build`): the builds of
/// `LAYERNORM_WARP_VECTORS` vectors a lane and of half as many (fewer registers).
const LAYERNORM_WARP_FWD: [ByDType<LayerNormWarpArgs<f32>, LayerNormWarpArgs<u16>>; 2] = [
    by_dtype!(layernorm_warp_fwd_f32, layernorm_warp_fwd_f16, layernorm_warp_fwd_bf16),
    by_dtype!(layernorm_warp_fwd_v2_f32, layernorm_warp_fwd_v2_f16, layernorm_warp_fwd_v2_bf16),
];
/// The one-launch backward of 16-byte aligned 16-bit rows, `[f16, bf16]`, plain and adding a
/// residual.
const LAYERNORM_WARP_BWD: [[Kernel<LayerNormBwdArgs<u16>>; 2]; 2] = [
    [kernels::layernorm_warp_bwd_f16, kernels::layernorm_warp_bwd_add_f16],
    [kernels::layernorm_warp_bwd_bf16, kernels::layernorm_warp_bwd_add_bf16],
];
const LAYERNORM_PARAMS: ByDType<LayerNormParamsArgs<f32>, LayerNormParamsArgs<u16>> =
    by_dtype!(layernorm_bwd_params_f32, layernorm_bwd_params_f16, layernorm_bwd_params_bf16);
const LAYERNORM_PARAMS_SUM: ByDType<ColumnPartialsArgs<f32>, ColumnPartialsArgs<u16>> =
    by_dtype!(layernorm_params_sum_f32, layernorm_params_sum_f16, layernorm_params_sum_bf16);
const DROPOUT: ByDType<DropoutArgs<f32>, DropoutArgs<u16>> =
    by_dtype!(dropout_f32, dropout_f16, dropout_bf16);
const DROPOUT_DEV: ByDType<DropoutDevArgs<f32>, DropoutDevArgs<u16>> =
    by_dtype!(dropout_dev_f32, dropout_dev_f16, dropout_dev_bf16);

/// The warp-row layer-norm forward build (`LAYERNORM_WARP_FWD`) for rows of `cols` values of
/// `dtype`, if they take one: 16-byte aligned rows (whole vectors) wider than the row teams'
/// shared warps and within what a warp holds; the 2-vector build where it holds the row.
fn layer_norm_warp_build(dtype: DType, cols: usize) -> Option<usize> {
    let per_vector = 16 / dtype.size_bytes();
    let fits = |vectors: usize| cols <= 32 * vectors * per_vector;
    (cols % per_vector == 0 && cols > LAYERNORM_WARP_MIN_COLS && fits(LAYERNORM_WARP_VECTORS))
        .then(|| usize::from(fits(LAYERNORM_WARP_VECTORS / 2)))
}

/// `(rows, cols)` of a tensor of any dtype viewed as rows of its last axis; rank ≥ 1.
fn rows_cols_any(op: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    match x.shape().split_last() {
        Some((&cols, lead)) => Ok((lead.iter().product(), cols)),
        None => Err(Error::InvalidArgument { op, shape: vec![], reason: "needs rank ≥ 1".into() }),
    }
}

/// The CPU twin's row map: `f(row) -> output row`, in parallel.
fn cpu_rows(x: &[f32], cols: usize, f: impl Fn(usize, &[f32], &mut [f32]) + Sync) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    if cols > 0 {
        out.par_chunks_mut(cols)
            .with_min_len((CPU_CHUNK / cols).max(1))
            .enumerate()
            .for_each(|(r, o)| f(r, &x[r * cols..(r + 1) * cols], o));
    }
    out
}

fn max_and_log_sum_exp(row: &[f32]) -> (f64, f64) {
    let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
    (m, row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln())
}

fn softmax_impl(x: &Tensor, log: bool) -> Result<Tensor> {
    let op = if log { "log_softmax" } else { "softmax" };
    let (rows, cols) = rows_cols_any(op, x)?;
    let dtype = x.dtype();
    match x.storage() {
        Storage::Cpu(v) => Ok(Tensor::from_cpu_as(
            x.context(),
            x.shape(),
            dtype,
            cpu_rows(v, cols, |_, row, out| {
                let (m, lse) = max_and_log_sum_exp(row);
                for (o, &e) in out.iter_mut().zip(row) {
                    let l = e as f64 - m - lse;
                    *o = dtype.round(if log { l } else { l.exp() });
                }
            }),
        )),
        Storage::Cuda(_) => {
            let out = Tensor::uninit_as(x.context(), x.shape(), dtype, op)?;
            if out.is_empty() {
                return Ok(out);
            }
            let stream = x.context().stream(op)?;
            let table = if log { LOG_SOFTMAX } else { SOFTMAX };
            let plan = RowPlan::new(op, x.shape(), (rows, cols), &stream.device.info)?;
            plan.run(op, stream, 2, |l, partials| {
                let kernels = if !log && l.clustered() { &SOFTMAX_CLUSTER } else { &table[l.variant()] };
                launch_by_dtype!(*kernels, dtype, |k| {
                    let args = (x.ptr(), out.ptr_mut(), partials, l.rows, cols, l.team, l.chunk, l.mode);
                    // SAFETY: `<log_>softmax_<dtype>`: x and out hold rows·cols values of the
                    // kernel's type; partials holds the plan's statistics (or is null and
                    // unread: modes ROW_WHOLE and ROW_CLUSTER); the launch shape is RowPlan's
                    // (team, chunk, grid, and clusters of a row's chunks for ROW_CLUSTER, the
                    // only launches `softmax_cluster_<dtype>`, which runs ROW_CLUSTER whatever
                    // its mode argument, gets).
                    unsafe { k.launch_clustered(stream, l.cfg, l.cluster, args) }
                })
            })?;
            Ok(out)
        }
    }
}

fn softmax_backward_impl(y: &Tensor, dy: &Tensor, log: bool) -> Result<Tensor> {
    let op = if log { "log_softmax_backward" } else { "softmax_backward" };
    y.check_pair(op, dy)?;
    let (rows, cols) = rows_cols_any(op, y)?;
    let dtype = y.dtype();
    match (y.storage(), dy.storage()) {
        (Storage::Cpu(yv), Storage::Cpu(gv)) => Ok(Tensor::from_cpu_as(
            y.context(),
            y.shape(),
            dtype,
            cpu_rows(yv, cols, |r, yr, out| {
                let gr = &gv[r * cols..(r + 1) * cols];
                let total: f64 = if log {
                    gr.iter().map(|&g| g as f64).sum()
                } else {
                    yr.iter().zip(gr).map(|(&p, &g)| p as f64 * g as f64).sum()
                };
                for ((o, &p), &g) in out.iter_mut().zip(yr).zip(gr) {
                    let (p, g) = (p as f64, g as f64);
                    *o = dtype.round(if log { g - p.exp() * total } else { p * (g - total) });
                }
            }),
        )),
        _ => {
            let dx = Tensor::uninit_as(y.context(), y.shape(), dtype, op)?;
            if dx.is_empty() {
                return Ok(dx);
            }
            let stream = y.context().stream(op)?;
            let table = if log { LOG_SOFTMAX_BWD } else { SOFTMAX_BWD };
            let plan = RowPlan::new(op, y.shape(), (rows, cols), &stream.device.info)?;
            plan.run(op, stream, 1, |l, partials| {
                launch_by_dtype!(table[l.variant()], dtype, |k| {
                    let (y, dy, dx) = (y.ptr(), dy.ptr(), dx.ptr_mut());
                    let args = (y, dy, dx, partials, l.rows, cols, l.team, l.chunk, l.mode);
                    // SAFETY: `<log_>softmax_bwd_<dtype>`: y, dy, dx hold rows·cols values of the
                    // kernel's type (shapes and dtypes checked equal); partials and the launch
                    // shape as in the forward pass.
                    unsafe { k.launch_clustered(stream, l.cfg, l.cluster, args) }
                })
            })?;
            Ok(dx)
        }
    }
}

impl Tensor {
    /// Softmax along the last axis (numerically stable).
    pub fn softmax(&self) -> Result<Tensor> {
        softmax_impl(self, false)
    }
    /// Log-softmax along the last axis (numerically stable).
    pub fn log_softmax(&self) -> Result<Tensor> {
        softmax_impl(self, true)
    }
    /// Gradient of softmax: `self` is its output `y`, `dy` the gradient of the loss w.r.t. `y`.
    pub fn softmax_backward(&self, dy: &Tensor) -> Result<Tensor> {
        softmax_backward_impl(self, dy, false)
    }
    /// Gradient of log-softmax: `self` is its output, `dy` the gradient w.r.t. it.
    pub fn log_softmax_backward(&self, dy: &Tensor) -> Result<Tensor> {
        softmax_backward_impl(self, dy, true)
    }
}

/// Class indices for [`cross_entropy_labels`], kept where the logits live (device memory on
/// CUDA), each checked below `classes` on every upload. Refresh them in place with
/// [`Labels::copy_from_slice`]: a [`Graph`](crate::Graph) that captured the loss reads the new
/// labels at its next replay.
pub struct Labels {
    ctx: Context,
    classes: usize,
    len: usize,
    storage: LabelStorage,
}

pub(crate) enum LabelStorage {
    Cuda(DeviceBuffer),
    Cpu(Vec<u32>),
}

impl std::fmt::Debug for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Labels({} of {} classes, {:?})", self.len, self.classes, self.ctx)
    }
}

/// `InvalidArgument` for the first label not below `classes`.
fn check_labels(op: &'static str, labels: &[u32], classes: usize) -> Result<()> {
    match labels.iter().find(|&&l| l as usize >= classes) {
        Some(bad) => Err(Error::InvalidArgument {
            op,
            shape: vec![labels.len(), classes],
            reason: format!("label {bad} out of range for {classes} classes"),
        }),
        None => Ok(()),
    }
}

impl Context {
    /// `labels` (each below `classes`) on this context, for [`cross_entropy_labels`] and
    /// [`embedding`](crate::embedding) (token ids, `classes` the vocabulary). A label not below
    /// `classes` is an `InvalidArgument` here, on upload, so the kernels never index past a row or
    /// a table.
    pub fn labels(&self, labels: &[u32], classes: usize) -> Result<Labels> {
        check_labels("labels", labels, classes)?;
        upload_labels(self, labels, classes, "labels")
    }
}

/// `labels` (checked below `classes`) on `ctx`; `op` names the copy.
fn upload_labels(ctx: &Context, labels: &[u32], classes: usize, op: &'static str) -> Result<Labels> {
    let storage = match &ctx.backend {
        Backend::Cpu => LabelStorage::Cpu(labels.to_vec()),
        Backend::Cuda(stream) => {
            let buf = stream.device.pool.alloc(stream, labels.len() * 4, op)?;
            if !labels.is_empty() {
                // SAFETY: the fresh buffer of this stream holds `len` u32 (see `copy_htod` on the
                // pageable source).
                unsafe { stream.copy_htod(op, buf.ptr(), labels) }?;
            }
            LabelStorage::Cuda(buf)
        }
    };
    Ok(Labels { ctx: ctx.clone(), classes, len: labels.len(), storage })
}

impl Labels {
    /// Labels made by an op (each below `classes`, as the op guarantees) from their storage.
    pub(crate) fn from_storage(ctx: &Context, classes: usize, len: usize, storage: LabelStorage) -> Labels {
        Labels { ctx: ctx.clone(), classes, len, storage }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The number of classes every label is below.
    pub fn classes(&self) -> usize {
        self.classes
    }
    /// The labels, copied to the host (waits for the work that writes them).
    pub fn to_vec(&self) -> Result<Vec<u32>> {
        match &self.storage {
            LabelStorage::Cpu(v) => Ok(v.clone()),
            LabelStorage::Cuda(buf) => {
                let mut out = vec![0u32; self.len];
                if self.len > 0 {
                    // SAFETY: the buffer holds `len` u32 on its own stream.
                    unsafe { buf.stream().copy_dtoh_sync("Labels::to_vec", &mut out, buf.ptr()) }?;
                }
                Ok(out)
            }
        }
    }
    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }
    pub(crate) fn storage(&self) -> &LabelStorage {
        &self.storage
    }

    /// Overwrite the labels in place (same count, each below `classes`). Refused during a capture
    /// (`NotCapturable`): upload before the replay.
    pub fn copy_from_slice(&mut self, labels: &[u32]) -> Result<()> {
        const OP: &str = "Labels::copy_from_slice";
        if labels.len() != self.len {
            return Err(Error::ShapeMismatch { op: OP, lhs: vec![self.len], rhs: vec![labels.len()] });
        }
        check_labels(OP, labels, self.classes)?;
        match &mut self.storage {
            LabelStorage::Cpu(v) => v.copy_from_slice(labels),
            LabelStorage::Cuda(buf) if !labels.is_empty() => {
                // SAFETY: the buffer holds `len` u32 on its own stream, where every earlier reader
                // is ordered before the copy (see `copy_htod` on the pageable source).
                unsafe { buf.stream().copy_htod(OP, buf.ptr(), labels) }?
            }
            LabelStorage::Cuda(_) => {}
        }
        Ok(())
    }
}

/// `(rows, classes)` of cross-entropy logits (rank ≥ 1, f32, f16 or bf16), at least one row.
fn ce_rows_cols(op: &'static str, logits: &Tensor) -> Result<(usize, usize)> {
    let (rows, cols) = rows_cols_any(op, logits)?;
    if rows == 0 || cols == 0 {
        let reason = if rows == 0 { "no rows" } else { "no classes" };
        return Err(Error::InvalidArgument { op, shape: logits.shape().to_vec(), reason: reason.into() });
    }
    Ok((rows, cols))
}

/// Mean cross-entropy of `logits` `[.., classes]` (f32, f16 or bf16) against one class index per
/// row, with its gradient w.r.t. the logits (softmax − one-hot, divided by the rows), in one pass.
/// Returns `(loss: f32 of shape [], gradient of the logits' shape and dtype)`; the statistics are
/// f32 whatever the logits' dtype. The labels are uploaded from the host on every call, so this
/// cannot be captured into a graph: use [`cross_entropy_labels`].
pub fn cross_entropy(logits: &Tensor, labels: &[u32]) -> Result<(Tensor, Tensor)> {
    const OP: &str = "cross_entropy";
    let (rows, cols) = ce_rows_cols(OP, logits)?;
    if labels.len() != rows {
        return Err(Error::ShapeMismatch { op: OP, lhs: logits.shape().to_vec(), rhs: vec![labels.len()] });
    }
    check_labels(OP, labels, cols)?;
    // The labels buffer returns to the pool in stream order after the launch.
    let labels = upload_labels(logits.context(), labels, cols, "cross_entropy (labels from host memory)")?;
    cross_entropy_impl(OP, logits.clone(), &labels, false)
}

/// [`cross_entropy`] against labels already on the logits' context: no upload, so a graph may
/// capture it and read new labels (refreshed with [`Labels::copy_from_slice`]) at each replay.
pub fn cross_entropy_labels(logits: &Tensor, labels: &Labels) -> Result<(Tensor, Tensor)> {
    cross_entropy_impl("cross_entropy_labels", logits.clone(), labels, false)
}

/// [`cross_entropy_labels`] that writes the gradient over the logits it consumes: no second
/// buffer of the logits' size. When a clone shares the logits' buffer, it is copied first (the
/// clone keeps the logits), as the optimizers do with a shared parameter.
pub fn cross_entropy_labels_in_place(logits: Tensor, labels: &Labels) -> Result<(Tensor, Tensor)> {
    cross_entropy_impl("cross_entropy_labels_in_place", logits, labels, true)
}

fn cross_entropy_impl(
    op: &'static str,
    mut logits: Tensor,
    labels: &Labels,
    in_place: bool,
) -> Result<(Tensor, Tensor)> {
    let (rows, cols) = ce_rows_cols(op, &logits)?;
    if labels.len != rows {
        return Err(Error::ShapeMismatch { op, lhs: logits.shape().to_vec(), rhs: vec![labels.len] });
    }
    if labels.classes > cols {
        return Err(Error::InvalidArgument {
            op,
            shape: logits.shape().to_vec(),
            reason: format!("labels of {} classes for {cols} logits per row", labels.classes),
        });
    }
    if !logits.context().same_queue(&labels.ctx) {
        return Err(logits.context().mismatch(op, &labels.ctx));
    }
    match (logits.storage(), &labels.storage) {
        (Storage::Cpu(v), LabelStorage::Cpu(l)) => cross_entropy_cpu(&logits, v, l, rows, cols),
        (Storage::Cuda(_), LabelStorage::Cuda(buf)) => {
            if in_place {
                logits.make_unique()?;
                let grad = logits.clone();
                cross_entropy_cuda(op, &logits, buf, grad, rows, cols)
            } else {
                let grad = Tensor::uninit_as(logits.context(), logits.shape(), logits.dtype(), op)?;
                cross_entropy_cuda(op, &logits, buf, grad, rows, cols)
            }
        }
        _ => Err(logits.context().mismatch(op, &labels.ctx)),
    }
}

/// The CPU twin: f64 statistics of the (dtype-exact) logits, the gradient rounded to their dtype.
fn cross_entropy_cpu(
    logits: &Tensor,
    v: &[f32],
    labels: &[u32],
    rows: usize,
    cols: usize,
) -> Result<(Tensor, Tensor)> {
    let (scale, dtype) = ((1.0 / rows as f64) as f32 as f64, logits.dtype());
    let grad = cpu_rows(v, cols, |r, row, out| {
        let (m, lse) = max_and_log_sum_exp(row);
        for (i, (o, &e)) in out.iter_mut().zip(row).enumerate() {
            let p = (e as f64 - m - lse).exp();
            *o = dtype.round(scale * (p - f64::from(i == labels[r] as usize)));
        }
    });
    let total: f64 = (0..rows)
        .into_par_iter()
        .map(|r| {
            let row = &v[r * cols..(r + 1) * cols];
            let (m, lse) = max_and_log_sum_exp(row);
            lse + m - row[labels[r] as usize] as f64
        })
        .collect::<Vec<f64>>()
        .iter()
        .sum();
    Ok((
        Tensor::from_cpu(logits.context(), &[], vec![(total / rows as f64) as f32]),
        Tensor::from_cpu_as(logits.context(), logits.shape(), dtype, grad),
    ))
}

/// The CUDA launches of every cross-entropy form: `grad` (the logits' shape and dtype) may be
/// the logits themselves. `labels` holds one u32 below `cols` per row (checked on upload and
/// against `cols` by the callers).
fn cross_entropy_cuda(
    op: &'static str,
    logits: &Tensor,
    labels: &DeviceBuffer,
    grad: Tensor,
    rows: usize,
    cols: usize,
) -> Result<(Tensor, Tensor)> {
    let too_many = || Error::InvalidArgument {
        op,
        shape: logits.shape().to_vec(),
        reason: "more than 2^31-1 blocks".into(),
    };
    let scale = (1.0 / rows as f64) as f32;
    let ctx = logits.context();
    let stream = ctx.stream(op)?;
    let info = &stream.device.info;
    let losses = Tensor::uninit(ctx, &[rows], op)?;
    let ce_rows = by_dtype!(cross_entropy_f32, cross_entropy_f16, cross_entropy_bf16);
    let ce_narrow = by_dtype!(cross_entropy_narrow_f32, cross_entropy_narrow_f16, cross_entropy_narrow_bf16);
    let (lab, loss) = (labels.dev_ptr(), losses.ptr_mut());
    if cols <= CE_NARROW_COLS {
        // At most 8 values a lane: 8 · 32 ≥ CE_NARROW_COLS.
        const _: () = assert!(CE_NARROW_COLS <= 8 * 32);
        let lanes = cols.div_ceil(8).next_power_of_two().min(32);
        let blocks = rows.div_ceil(CE_NARROW_BLOCK / lanes);
        if blocks > i32::MAX as usize {
            return Err(too_many());
        }
        let cfg = LaunchConfig {
            grid: (blocks as u32, 1, 1),
            block: (CE_NARROW_BLOCK as u32, 1, 1),
            shared_bytes: 0,
        };
        // SAFETY: `cross_entropy_narrow_*(logits, labels, loss, grad, rows, cols, lanes, scale)`:
        // logits and grad hold rows·cols elements of the kernel's type (grad may be the logits:
        // each lane reads an element before it writes its gradient, and nothing else touches
        // it), labels and loss `rows` u32 / f32, each label < cols; lanes a power of two ≤ 32
        // dividing the block with 8 · lanes ≥ cols, whose teams cover every row.
        launch_by_dtype!(ce_narrow, logits.dtype(), |k| unsafe {
            k.launch(stream, cfg, (logits.ptr(), lab, loss, grad.ptr_mut(), rows, cols, lanes, scale))?
        });
        return Ok((losses.mean()?, grad));
    }
    // f32 rows that split over a cluster run as softmax's do there (one read of each logit, held
    // in registers): (8192, 50257) at 86-87% of copy, 77.5% on the kernels below. Rows the row
    // machinery refuses (longer than 2^26 values) are no cluster's: the kernels below take them.
    let cluster = if logits.dtype() == DType::F32 {
        RowPlan::new(op, logits.shape(), (rows, cols), info).ok().and_then(|plan| plan.cluster_launch())
    } else {
        None
    };
    if let Some(l) = cluster {
        let args = (logits.ptr(), lab, loss, grad.ptr_mut(), rows, cols, l.team, l.chunk, scale);
        // SAFETY: `cross_entropy_cluster_f32(logits, labels, loss, grad, rows, cols, team,
        // chunk, scale)`: logits and grad hold rows·cols f32 (grad may be the logits: a block
        // writes only the chunk it has read, after the cluster's merge, which follows every
        // read of it), labels and loss `rows` u32 / f32, each label < cols; grid, block,
        // team, chunk and clusters are RowPlan's one ROW_CLUSTER launch, the only mode the
        // kernel runs.
        unsafe { kernels::cross_entropy_cluster_f32.launch_clustered(stream, l.cfg, l.cluster, args)? };
        return Ok((losses.mean()?, grad));
    }
    let vec = 16 / logits.dtype().size_bytes();
    let threads_for = |elems: usize| {
        (elems.div_ceil(vec * CE_UNROLL)).next_power_of_two().clamp(CE_BLOCK_MIN, CE_BLOCK_MAX)
    };
    let resident = info.sm_count as usize * CE_BLOCKS_PER_SM;
    let segments =
        if rows >= resident { 1 } else { resident.div_ceil(rows).min(cols.div_ceil(CE_MIN_SEGMENT)) };
    let seg_len = cols.div_ceil(segments).next_multiple_of(vec);
    let segments = cols.div_ceil(seg_len);
    let blocks = rows.checked_mul(segments).filter(|&b| b <= i32::MAX as usize).ok_or_else(too_many)?;
    let threads = threads_for(seg_len);
    let cfg = |shared_bytes: usize| LaunchConfig {
        grid: (blocks as u32, 1, 1),
        block: (threads as u32, 1, 1),
        shared_bytes: shared_bytes as u32,
    };
    let (dtype, none) = (logits.dtype(), DevPtrMut::<f32>::new(0));
    if segments == 1 {
        // The row's first vectors kept in shared memory, as many as fit in the block's share of
        // an SM (CE_BLOCKS_PER_SM of them) beside the static reduction scratch.
        let share = (info.max_shared_per_block_optin / CE_BLOCKS_PER_SM).saturating_sub(1024);
        let cached = (cols / vec).min(share / 16);
        let cfg = cfg(cached * 16);
        // SAFETY: `cross_entropy_*(logits, labels, partials, loss, grad, cols, seg_len,
        // segments, scale, ROW_WHOLE, cached)`: one block per row (segments = 1, seg_len ≥
        // cols), logits and grad rows·cols elements (grad may be the logits: a block reads its
        // row, the label's logit included, before the barrier that precedes its first write, and
        // the gradient pass reads each vector in the thread that then writes it), labels and
        // loss `rows` u32 / f32, each label < cols; partials unused; 16 bytes of dynamic shared
        // memory per cached vector.
        launch_by_dtype!(ce_rows, dtype, |k| unsafe {
            let args = (
                logits.ptr(),
                lab,
                none,
                loss,
                grad.ptr_mut(),
                cols,
                seg_len,
                1,
                scale,
                ROW_WHOLE,
                cached as u32,
            );
            k.launch(stream, cfg, args)?
        });
        return Ok((losses.mean()?, grad));
    }
    let partials = stream.device.pool.alloc(stream, blocks * 2 * 4, op)?;
    for phase in [ROW_PARTIAL, ROW_APPLY] {
        // SAFETY: as the fused launch, one block per (row, segment) of seg_len elements: the
        // stats phase writes two floats per block to `partials` (blocks·2 floats) and reads the
        // logits only; the gradient phase, after it on this stream, reads its row's partials and
        // writes each gradient element after the same thread read its logit, and the label's
        // once more after a barrier, from the logit thread 0 read before the block's first write.
        launch_by_dtype!(ce_rows, dtype, |k| unsafe {
            let args = (
                logits.ptr(),
                lab,
                partials.dev_ptr_mut(),
                loss,
                grad.ptr_mut(),
                cols,
                seg_len,
                segments,
                scale,
                phase,
                0,
            );
            k.launch(stream, cfg(0), args)?
        });
    }
    Ok((losses.mean()?, grad))
}

/// What layer norm's forward pass saves for its backward pass.
#[derive(Debug)]
pub struct LayerNormSaved {
    /// Per-row mean, shape `[rows]`.
    pub mean: Tensor,
    /// Per-row `1/√(var + eps)`, shape `[rows]`.
    pub rstd: Tensor,
}

fn check_param(op: &'static str, x: &Tensor, p: Option<&Tensor>, cols: usize) -> Result<()> {
    if let Some(p) = p {
        x.check_peer(op, p)?;
        if p.shape() != [cols] {
            return Err(Error::ShapeMismatch { op, lhs: p.shape().to_vec(), rhs: vec![cols] });
        }
    }
    Ok(())
}

/// Layer norm over the last axis: `(x - mean)/√(var + eps) · γ + β` (γ, β of shape `[cols]`,
/// optional, in x's dtype). f32, f16 and bf16 (computed in f32, y rounded once); the saved mean
/// and rstd are f32. Returns the output and what the backward pass needs.
pub fn layer_norm(
    x: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    eps: f32,
) -> Result<(Tensor, LayerNormSaved)> {
    const OP: &str = "layer_norm";
    let (rows, cols) = rows_cols_any(OP, x)?;
    check_param(OP, x, gamma, cols)?;
    check_param(OP, x, beta, cols)?;
    if cols == 0 {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: x.shape().to_vec(),
            reason: "empty rows".into(),
        });
    }
    let dtype = x.dtype();
    match x.storage() {
        Storage::Cpu(v) => {
            let (g, b) = (gamma.map(Tensor::to_vec).transpose()?, beta.map(Tensor::to_vec).transpose()?);
            let stats: Vec<(f64, f64)> = v
                .par_chunks(cols)
                .map(|row| {
                    let mean = row.iter().map(|&e| e as f64).sum::<f64>() / cols as f64;
                    let var = row.iter().map(|&e| (e as f64 - mean).powi(2)).sum::<f64>() / cols as f64;
                    (mean, 1.0 / (var + eps as f64).sqrt())
                })
                .collect();
            let y = cpu_rows(v, cols, |r, row, out| {
                let (mean, rstd) = stats[r];
                for (i, (o, &e)) in out.iter_mut().zip(row).enumerate() {
                    let w = g.as_ref().map_or(1.0, |g| g[i] as f64);
                    let c = b.as_ref().map_or(0.0, |b| b[i] as f64);
                    *o = dtype.round((e as f64 - mean) * rstd * w + c);
                }
            });
            let ctx = x.context();
            let mean = Tensor::from_cpu(ctx, &[rows], stats.iter().map(|s| s.0 as f32).collect());
            let rstd = Tensor::from_cpu(ctx, &[rows], stats.iter().map(|s| s.1 as f32).collect());
            Ok((Tensor::from_cpu_as(ctx, x.shape(), dtype, y), LayerNormSaved { mean, rstd }))
        }
        Storage::Cuda(_) => {
            let ctx = x.context();
            let y = Tensor::uninit_as(ctx, x.shape(), dtype, OP)?;
            let (mean, rstd) = (Tensor::uninit(ctx, &[rows], OP)?, Tensor::uninit(ctx, &[rows], OP)?);
            let warp_build = layer_norm_warp_build(dtype, cols).filter(|_| rows > 0);
            if let Some(build) = warp_build {
                let stream = ctx.stream(OP)?;
                // A warp a row, eight rows a block.
                let cfg = LaunchConfig {
                    grid: (rows.div_ceil(8) as u32, 1, 1),
                    block: (256, 1, 1),
                    shared_bytes: 0,
                };
                launch_by_dtype!(LAYERNORM_WARP_FWD[build], dtype, |k| {
                    let args = (
                        x.ptr(),
                        Tensor::ptr_or_null(gamma),
                        Tensor::ptr_or_null(beta),
                        y.ptr_mut(),
                        mean.ptr_mut(),
                        rstd.ptr_mut(),
                        rows,
                        cols,
                        eps,
                    );
                    // SAFETY: `layernorm_warp_fwd_<dtype>`: x and y hold rows·cols values of the
                    // kernel's type in 16-byte aligned rows of at most the vectors a warp holds
                    // (`layer_norm_warp_build`), gamma/beta cols values of it (checked) or null,
                    // mean/rstd rows floats; a warp a row over the grid's whole-warp blocks.
                    unsafe { k.launch(stream, cfg, args) }
                })?;
            } else if rows > 0 {
                let stream = ctx.stream(OP)?;
                let plan = RowPlan::new(OP, x.shape(), (rows, cols), &stream.device.info)?;
                plan.run(OP, stream, 3, |l, partials| {
                    let kernels =
                        if l.clustered() { &LAYERNORM_FWD_CLUSTER } else { &LAYERNORM_FWD[l.variant()] };
                    launch_by_dtype!(*kernels, dtype, |k| {
                        let args = (
                            x.ptr(),
                            Tensor::ptr_or_null(gamma),
                            Tensor::ptr_or_null(beta),
                            y.ptr_mut(),
                            mean.ptr_mut(),
                            rstd.ptr_mut(),
                            partials,
                            l.rows,
                            cols,
                            l.team,
                            l.chunk,
                            l.mode,
                            eps,
                        );
                        // SAFETY: `layernorm_fwd_<dtype>`: x and y hold rows·cols values of the
                        // kernel's type, gamma/beta cols values of it (same dtype, checked) or
                        // null, mean/rstd rows floats; partials and the launch shape are
                        // RowPlan's (`layernorm_fwd_cluster_<dtype>` runs ROW_CLUSTER whatever
                        // its mode argument, and gets only RowPlan's ROW_CLUSTER launches).
                        unsafe { k.launch_clustered(stream, l.cfg, l.cluster, args) }
                    })
                })?;
            }
            Ok((y, LayerNormSaved { mean, rstd }))
        }
    }
}

/// Gradients of [`layer_norm`]: `(dx, dγ, dβ)` (dx in x's dtype, dγ/dβ in γ's, which is x's,
/// summed over rows in f32 in a fixed order); `dγ`/`dβ` are computed for shape `[cols]` whether
/// or not the forward pass had them.
pub fn layer_norm_backward(
    x: &Tensor,
    gamma: Option<&Tensor>,
    dy: &Tensor,
    saved: &LayerNormSaved,
) -> Result<(Tensor, Tensor, Tensor)> {
    layer_norm_backward_impl("layer_norm_backward", (x, gamma, dy, None), saved)
}

/// [`layer_norm_backward`] with `residual` (like x) added to dx: the input gradient of a
/// pre-norm residual block, `residual + ∂L/∂x`, in the same pass where rows take the one-launch
/// kernel (the transformer widths; rounded once there, as on the CPU backend), else added after.
pub fn layer_norm_backward_add(
    x: &Tensor,
    gamma: Option<&Tensor>,
    dy: &Tensor,
    saved: &LayerNormSaved,
    residual: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    layer_norm_backward_impl("layer_norm_backward_add", (x, gamma, dy, Some(residual)), saved)
}

fn layer_norm_backward_impl(
    op: &'static str,
    (x, gamma, dy, residual): (&Tensor, Option<&Tensor>, &Tensor, Option<&Tensor>),
    saved: &LayerNormSaved,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (rows, cols) = rows_cols_any(op, x)?;
    x.check_pair(op, dy)?;
    if let Some(r) = residual {
        x.check_pair(op, r)?;
    }
    check_param(op, x, gamma, cols)?;
    for s in [&saved.mean, &saved.rstd] {
        if !x.context().same_queue(s.context()) {
            return Err(x.context().mismatch(op, s.context()));
        }
        s.require_f32(op)?;
        if s.shape() != [rows] {
            return Err(Error::ShapeMismatch { op, lhs: s.shape().to_vec(), rhs: vec![rows] });
        }
    }
    let dtype = x.dtype();
    match x.storage() {
        Storage::Cpu(v) => {
            let (g, gv, mean, rstd) = (
                gamma.map(Tensor::to_vec).transpose()?,
                dy.to_vec()?,
                saved.mean.to_vec()?,
                saved.rstd.to_vec()?,
            );
            let w = |i: usize| g.as_ref().map_or(1.0, |g| g[i] as f64);
            let res = residual.map(Tensor::to_vec).transpose()?;
            let dx = cpu_rows(v, cols, |r, row, out| {
                let (mu, rs) = (mean[r] as f64, rstd[r] as f64);
                let dyr = &gv[r * cols..(r + 1) * cols];
                let xhat: Vec<f64> = row.iter().map(|&e| (e as f64 - mu) * rs).collect();
                let gs: Vec<f64> = dyr.iter().enumerate().map(|(i, &d)| d as f64 * w(i)).collect();
                let mean_g = gs.iter().sum::<f64>() / cols as f64;
                let mean_gx = gs.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / cols as f64;
                for (i, o) in out.iter_mut().enumerate() {
                    let add = res.as_ref().map_or(0.0, |res| res[r * cols + i] as f64);
                    *o = dtype.round(rs * (gs[i] - mean_g - xhat[i] * mean_gx) + add);
                }
            });
            let (mut dgamma, mut dbeta) = (vec![0.0f64; cols], vec![0.0f64; cols]);
            for r in 0..rows {
                for c in 0..cols {
                    let d = gv[r * cols + c] as f64;
                    dgamma[c] += d * (v[r * cols + c] as f64 - mean[r] as f64) * rstd[r] as f64;
                    dbeta[c] += d;
                }
            }
            let ctx = x.context();
            let round = |v: Vec<f64>| v.into_iter().map(|e| dtype.round(e)).collect();
            Ok((
                Tensor::from_cpu_as(ctx, x.shape(), dtype, dx),
                Tensor::from_cpu_as(ctx, &[cols], dtype, round(dgamma)),
                Tensor::from_cpu_as(ctx, &[cols], dtype, round(dbeta)),
            ))
        }
        Storage::Cuda(_) => {
            let ctx = x.context();
            let dx = Tensor::uninit_as(ctx, x.shape(), dtype, op)?;
            let (dgamma, dbeta) =
                (Tensor::uninit_as(ctx, &[cols], dtype, op)?, Tensor::uninit_as(ctx, &[cols], dtype, op)?);
            // dx plus the residual where a kernel has not added it.
            let with_residual = |dx: Tensor, added: bool| match residual {
                Some(r) if !added => dx.add(r),
                _ => Ok(dx),
            };
            if cols == 0 {
                return Ok((dx, dgamma, dbeta));
            }
            let stream = ctx.stream(op)?;
            let info = &stream.device.info;
            let (mean, rstd) = (saved.mean.ptr(), saved.rstd.ptr());
            if rows > 0 && (LAYERNORM_FUSED_MIN_COLS..=LAYERNORM_FUSED_COLS).contains(&cols) {
                // A warp a row, warps walking rows; one block per SM is what its registers allow.
                let rows_per_block = LAYERNORM_FUSED_BLOCK / 32;
                let blocks = rows.div_ceil(rows_per_block).min(info.sm_count as usize);
                let cfg = LaunchConfig {
                    grid: (blocks as u32, 1, 1),
                    block: (LAYERNORM_FUSED_BLOCK as u32, 1, 1),
                    shared_bytes: 0,
                };
                let partials = stream.device.pool.alloc(stream, blocks * 2 * cols * 4, op)?;
                let counter = DevPtrMut::new(stream.reduce_counter()?);
                // 16-bit rows add the residual in the kernel; f32 rows (whose third prefetched row
                // would spill) after it.
                let in_kernel = residual.filter(|_| dtype != DType::F32);
                macro_rules! args {
                    ($residual:expr) => {
                        (
                            x.ptr(),
                            Tensor::ptr_or_null(gamma),
                            dy.ptr(),
                            $residual,
                            mean,
                            rstd,
                            dx.ptr_mut(),
                            partials.dev_ptr_mut(),
                            counter,
                            dgamma.ptr_mut(),
                            dbeta.ptr_mut(),
                            rows,
                            cols,
                        )
                    };
                }
                // 16-bit rows of whole 16-byte vectors take the warp-row kernels (same arguments).
                let warp_rows = dtype != DType::F32 && cols % 8 == 0;
                // SAFETY (every launch): `layernorm_[warp_]bwd_<dtype>` (residual null, unread)
                // or `layernorm_[warp_]bwd_add_<dtype>`: x, dy, dx and the residual (checked like
                // x) hold rows·cols values of the kernel's type, gamma cols or null, mean/rstd
                // rows floats, dgamma/dbeta cols values, partials 2·cols floats per block of
                // this 1-D grid of whole-warp blocks; `counter` is this stream's zeroed counter
                // (launches writing it never overlap, and the kernel leaves it zero); cols ≤
                // LAYERNORM_FUSED_COLS, what a warp holds (the warp-row kernels: 16-byte vectors,
                // cols a multiple of 8 of a 16-bit dtype).
                match in_kernel {
                    Some(r) if warp_rows => {
                        let k = &LAYERNORM_WARP_BWD[dtype.index() - 1][1];
                        unsafe { k.launch(stream, cfg, args!(r.ptr()))? }
                    }
                    Some(r) => {
                        let k = &LAYERNORM_BWD_ADD[dtype.index() - 1];
                        unsafe { k.launch(stream, cfg, args!(r.ptr()))? }
                    }
                    None if warp_rows => {
                        let k = &LAYERNORM_WARP_BWD[dtype.index() - 1][0];
                        unsafe { k.launch(stream, cfg, args!(DevPtr::null()))? }
                    }
                    None => launch_by_dtype!(LAYERNORM_BWD, dtype, |k| {
                        unsafe { k.launch(stream, cfg, args!(DevPtr::null())) }
                    })?,
                }
                return Ok((with_residual(dx, in_kernel.is_some())?, dgamma, dbeta));
            }
            if rows > 0 {
                let plan = RowPlan::new(op, x.shape(), (rows, cols), info)?;
                plan.run(op, stream, 2, |l, partials| {
                    launch_by_dtype!(LAYERNORM_DX[l.variant()], dtype, |k| {
                        let args = (
                            x.ptr(),
                            Tensor::ptr_or_null(gamma),
                            dy.ptr(),
                            mean,
                            rstd,
                            dx.ptr_mut(),
                            partials,
                            l.rows,
                            cols,
                            l.team,
                            l.chunk,
                            l.mode,
                        );
                        // SAFETY: `layernorm_bwd_dx_<dtype>`: x, dy, dx hold rows·cols values of
                        // the kernel's type, gamma cols or null, mean/rstd rows floats; partials
                        // and launch shape RowPlan's.
                        unsafe { k.launch_clustered(stream, l.cfg, l.cluster, args) }
                    })
                })?;
            }
            let plan = ColumnPlan::new(op, x.shape(), rows, cols, info)?;
            let (partials, p) = plan.partials(op, stream, 2 * cols)?;
            launch_by_dtype!(LAYERNORM_PARAMS, dtype, |k| {
                let args = (
                    x.ptr(),
                    dy.ptr(),
                    mean,
                    rstd,
                    p,
                    dgamma.ptr_mut(),
                    dbeta.ptr_mut(),
                    rows,
                    cols,
                    plan.c_lanes,
                    plan.rows_per_group,
                );
                // SAFETY: `layernorm_bwd_params_<dtype>`: x, dy hold rows·cols values, mean/rstd
                // rows floats, dgamma/dbeta cols values; with more than one row group, partials
                // holds 2·cols floats per group (else null, unread); ColumnPlan's grid.
                unsafe { k.launch(stream, plan.cfg, args) }
            })?;
            if let Some(partials) = &partials {
                let (cfg, c_lanes) = plan.final_pass();
                for (out, first) in [(&dgamma, 0), (&dbeta, cols)] {
                    launch_by_dtype!(LAYERNORM_PARAMS_SUM, dtype, |k| {
                        let args = (
                            partials.dev_ptr::<f32>().offset(first),
                            plan.groups,
                            cols,
                            2 * cols,
                            c_lanes,
                            out.ptr_mut(),
                        );
                        // SAFETY: `layernorm_params_sum_<dtype>`: partials holds `groups` rows of
                        // 2·cols floats (written by the launch before, on this stream), read
                        // from `first` < 2·cols; out holds cols values; the final pass's grid for
                        // its column lanes.
                        unsafe { k.launch(stream, cfg, args) }
                    })?;
                }
            }
            Ok((with_residual(dx, false)?, dgamma, dbeta))
        }
    }
}

/// One element of an elementwise loss in f64: `(loss term, ∂/∂pred)`, before the mean.
type PointLossF64 = fn(f64, f64) -> (f64, f64);

/// A clamp of a log at -100 that lets NaN through (PyTorch's binary cross-entropy).
fn clamp_log(l: f64) -> f64 {
    if l < -100.0 {
        -100.0
    } else {
        l
    }
}

/// The mean of an elementwise loss and its gradient w.r.t. `pred`: one fused pass writing the
/// gradient and per-block partial sums, then a sum of the partials.
/// pred, target, grad, per-block partial sums, n, scale.
type PointLossArgs = (DevPtr<f32>, DevPtr<f32>, DevPtrMut<f32>, DevPtrMut<f32>, usize, f32);

fn point_loss(
    op: &'static str,
    kernel: Kernel<PointLossArgs>,
    pred: &Tensor,
    target: &Tensor,
    cpu: PointLossF64,
) -> Result<(Tensor, Tensor)> {
    pred.require_f32(op)?;
    pred.check_pair(op, target)?;
    let n = pred.len();
    if n == 0 {
        return Err(Error::InvalidArgument {
            op,
            shape: pred.shape().to_vec(),
            reason: "empty input".into(),
        });
    }
    let ctx = pred.context();
    match (pred.storage(), target.storage()) {
        (Storage::Cpu(p), Storage::Cpu(t)) => {
            let mut grad = vec![0.0f32; n];
            let partials: Vec<f64> = grad
                .par_chunks_mut(CPU_CHUNK)
                .zip(p.par_chunks(CPU_CHUNK).zip(t.par_chunks(CPU_CHUNK)))
                .map(|(g, (p, t))| {
                    let mut sum = 0.0f64;
                    for ((g, &p), &t) in g.iter_mut().zip(p).zip(t) {
                        let (l, d) = cpu(p as f64, t as f64);
                        sum += l;
                        *g = (d / n as f64) as f32;
                    }
                    sum
                })
                .collect();
            let loss = (partials.iter().sum::<f64>() / n as f64) as f32;
            Ok((Tensor::from_cpu(ctx, &[], vec![loss]), Tensor::from_cpu(ctx, pred.shape(), grad)))
        }
        _ => {
            let stream = ctx.stream(op)?;
            let cfg = LaunchConfig::grid_stride(&stream.device.info, n.div_ceil(4), LOSS_BLOCK, 1);
            let grad = Tensor::uninit(ctx, pred.shape(), op)?;
            let partials = Tensor::uninit(ctx, &[cfg.grid.0 as usize], op)?;
            let scale = (1.0 / n as f64) as f32;
            // SAFETY: `<loss>_f32(pred, target, grad, partials, n, scale)`: pred, target and grad
            // hold n floats (16-byte aligned), partials one float per block of the grid.
            let args = (pred.ptr(), target.ptr(), grad.ptr_mut(), partials.ptr_mut(), n, scale);
            unsafe { kernel.launch(stream, cfg, args)? };
            Ok((partials.sum()?, grad))
        }
    }
}

/// Mean squared error `mean((pred - target)²)`, shape `[]`, and its gradient w.r.t. `pred`.
pub fn mse_loss(pred: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor)> {
    point_loss("mse_loss", kernels::mse_loss_f32, pred, target, |p, t| ((p - t) * (p - t), 2.0 * (p - t)))
}

/// Mean binary cross-entropy of probabilities `probs` (in [0, 1]) against `target`, with each
/// log clamped at -100 as PyTorch does, and its gradient w.r.t. `probs`
/// (`(p - t) / max(p(1 - p), 1e-12)`, divided by the element count).
pub fn binary_cross_entropy(probs: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor)> {
    point_loss("binary_cross_entropy", kernels::bce_loss_f32, probs, target, |p, t| {
        let (lp, lq) = (clamp_log(p.ln()), clamp_log((1.0 - p).ln()));
        (-(t * lp + (1.0 - t) * lq), (p - t) / (p * (1.0 - p)).max(1e-12))
    })
}

/// Mean binary cross-entropy of `sigmoid(logits)` against `target` in the stable form
/// `max(x, 0) - x·t + ln(1 + e^-|x|)`, and its gradient `(σ(x) - t) / n` w.r.t. the logits.
pub fn binary_cross_entropy_with_logits(logits: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor)> {
    point_loss(
        "binary_cross_entropy_with_logits",
        kernels::bce_with_logits_loss_f32,
        logits,
        target,
        |x, t| (x.max(0.0) - x * t + (-x.abs()).exp().ln_1p(), 1.0 / (1.0 + (-x).exp()) - t),
    )
}

/// Where a dropout launch finds its seed.
#[derive(Clone, Copy)]
pub(crate) enum DropoutSeed<'a> {
    /// A launch argument.
    Host(u64),
    /// The second u64 of a [`DropoutSeeds`] buffer, read when the kernel runs, so that each replay
    /// of a CUDA graph draws the mask of the seed the buffer holds then.
    Device(&'a DropoutSeeds),
}

/// Two u64 words on the device, `[next, current]`: [`DropoutSeeds::advance`] makes the next seed
/// current and counts on, on the stream, so that a captured forward pass advances it at every
/// replay.
pub(crate) struct DropoutSeeds {
    words: Tensor,
}

impl DropoutSeeds {
    /// A counter on `ctx`'s device whose first [`DropoutSeeds::advance`] makes `next` current.
    /// An upload: refused during a capture.
    pub(crate) fn new(ctx: &Context, next: u64) -> Result<Self> {
        let halves = [next as u32, (next >> 32) as u32, 0, 0].map(f32::from_bits);
        Ok(Self { words: ctx.from_slice(&halves, &[4])? })
    }

    pub(crate) fn context(&self) -> &Context {
        self.words.context()
    }

    fn ptr(&self) -> DevPtr<u64> {
        DevPtr::new(self.words.device_ptr())
    }

    /// Queue `current ← next; next ← next + 1`.
    pub(crate) fn advance(&self) -> Result<()> {
        const OP: &str = "dropout";
        let stream = self.context().stream(OP)?;
        // SAFETY: `dropout_advance(seeds)`: the buffer holds 16 bytes (u64-aligned, as every pool
        // block) of this stream's device; one thread works, any launch shape.
        unsafe {
            kernels::dropout_advance.launch(
                stream,
                LaunchConfig::covering(1, 32),
                (DevPtrMut::new(self.words.device_ptr()),),
            )
        }
    }
}

/// [`dropout`] (`op` "dropout"), [`dropout_add`] (with `residual`) or [`dropout_backward`]
/// ("dropout_backward") with the seed of `seed`.
pub(crate) fn dropout_impl(
    op: &'static str,
    x: &Tensor,
    residual: Option<&Tensor>,
    p: f32,
    seed: DropoutSeed,
) -> Result<Tensor> {
    if !(0.0..1.0).contains(&p) {
        return Err(Error::InvalidArgument {
            op,
            shape: x.shape().to_vec(),
            reason: format!("drop probability {p} outside [0, 1)"),
        });
    }
    if let Some(r) = residual {
        x.check_pair(op, r)?;
    }
    let (scale, dtype) = (1.0 / (1.0 - p), x.dtype());
    match (x.storage(), seed) {
        (Storage::Cpu(v), DropoutSeed::Host(seed)) => {
            // `check_pair` put the residual on this backend.
            let r = residual.and_then(|r| match r.storage() {
                Storage::Cpu(r) => Some(r),
                Storage::Cuda(_) => None,
            });
            let mut out = vec![0.0f32; v.len()];
            out.par_chunks_mut(8).zip(v.par_chunks(8)).with_min_len(CPU_CHUNK / 8).enumerate().for_each(
                |(group, (o, x))| {
                    let u = philox::uniform8_16(seed, group as u64);
                    for (k, (o, &x)) in o.iter_mut().zip(x).enumerate() {
                        let add = r.as_ref().map_or(0.0, |r| r[8 * group + k]);
                        *o = dtype.round((x * if u[k] >= p { scale } else { 0.0 } + add) as f64);
                    }
                },
            );
            Ok(Tensor::from_cpu_as(x.context(), x.shape(), dtype, out))
        }
        (Storage::Cuda(_), _) => {
            if let DropoutSeed::Device(seeds) = seed {
                if !seeds.context().same_queue(x.context()) {
                    return Err(Error::InvalidArgument {
                        op,
                        shape: x.shape().to_vec(),
                        reason: "the dropout seed lives on another device or stream than the tensor".into(),
                    });
                }
            }
            let out = Tensor::uninit_as(x.context(), x.shape(), dtype, op)?;
            let n = out.len();
            if n > 0 {
                let stream = x.context().stream(op)?;
                // A thread per 8 values (one Philox call).
                let cfg = LaunchConfig::covering(n.div_ceil(8), ELEMENTWISE_BLOCK);
                match seed {
                    DropoutSeed::Host(seed) => launch_by_dtype!(DROPOUT, dtype, |k| {
                        // SAFETY: `dropout_<dtype>(x, residual, y, n, seed, p, scale)`: x, y and the
                        // residual (or null) hold n values of the kernel's type (16-byte aligned
                        // pool blocks; the residual's shape and dtype checked above); any grid.
                        let args = (x.ptr(), Tensor::ptr_or_null(residual), out.ptr_mut(), n, seed, p, scale);
                        unsafe { k.launch(stream, cfg, args) }
                    })?,
                    DropoutSeed::Device(seeds) => launch_by_dtype!(DROPOUT_DEV, dtype, |k| {
                        // SAFETY: `dropout_dev_<dtype>(x, residual, y, n, seeds, p, scale)`: as
                        // above, and `seeds` is a 16-byte buffer of this stream (checked above).
                        let args =
                            (x.ptr(), Tensor::ptr_or_null(residual), out.ptr_mut(), n, seeds.ptr(), p, scale);
                        unsafe { k.launch(stream, cfg, args) }
                    })?,
                }
            }
            Ok(out)
        }
        (Storage::Cpu(_), DropoutSeed::Device(_)) => Err(Error::InvalidArgument {
            op,
            shape: x.shape().to_vec(),
            reason: "a device-side dropout seed for a CPU-backend tensor".into(),
        }),
    }
}

/// Dropout in training mode: each element is kept with probability `1 - p` and scaled by
/// `1/(1 - p)`, else zeroed. Element `i`'s mask depends only on `(seed, i)` (Philox, 16 bits an
/// element: `p` is met to within 2^-16), identically on every backend.
pub fn dropout(x: &Tensor, p: f32, seed: u64) -> Result<Tensor> {
    dropout_impl("dropout", x, None, p, DropoutSeed::Host(seed))
}

/// `residual + dropout(x, p, seed)` in one pass, rounded once (a residual connection's dropout
/// and add; `residual` like `x`). Its gradient: [`dropout_backward`] for `x`, `dy` itself for
/// `residual`.
pub fn dropout_add(x: &Tensor, residual: &Tensor, p: f32, seed: u64) -> Result<Tensor> {
    dropout_impl("dropout_add", x, Some(residual), p, DropoutSeed::Host(seed))
}

/// The gradient of [`dropout`] with the same `p` and `seed`: the same mask, regenerated, applied
/// to `dy`.
pub fn dropout_backward(dy: &Tensor, p: f32, seed: u64) -> Result<Tensor> {
    dropout_impl("dropout_backward", dy, None, p, DropoutSeed::Host(seed))
}

/// What [`batch_norm2d_train`] saves for [`batch_norm2d_backward`].
#[derive(Debug)]
pub struct BatchNormSaved {
    /// Per-channel batch mean, shape `[C]`.
    pub mean: Tensor,
    /// Per-channel `1/√(var + eps)` (biased variance), shape `[C]`.
    pub rstd: Tensor,
}

/// `(N, C, H·W)` of an NCHW (or `[N, C]`) tensor.
fn batch_norm_dims(op: &'static str, x: &Tensor) -> Result<(usize, usize, usize)> {
    x.require_f32(op)?;
    let dims = match *x.shape() {
        [n, c, h, w] => (n, c, h * w),
        [n, c] => (n, c, 1),
        _ => {
            return Err(Error::InvalidArgument {
                op,
                shape: x.shape().to_vec(),
                reason: format!("needs [N, C, H, W] or [N, C], got rank {}", x.rank()),
            })
        }
    };
    if dims.0 * dims.2 == 0 || dims.1 == 0 {
        return Err(Error::InvalidArgument {
            op,
            shape: x.shape().to_vec(),
            reason: "empty channels".into(),
        });
    }
    Ok(dims)
}

fn check_channels(op: &'static str, x: &Tensor, params: &[&Tensor], c: usize) -> Result<()> {
    for p in params {
        x.check_peer(op, p)?;
        if p.shape() != [c] {
            return Err(Error::ShapeMismatch { op, lhs: p.shape().to_vec(), rhs: vec![c] });
        }
    }
    Ok(())
}

/// The grid of a batch-norm launch: (channels, slices per channel), aiming at
/// `BATCHNORM_BLOCKS_PER_SM` blocks per SM with at least one full unrolled step per thread.
fn batch_norm_launch(
    op: &'static str,
    x: &Tensor,
    stream: &Stream,
    (n, c, hw): (usize, usize, usize),
) -> Result<LaunchConfig> {
    if c > i32::MAX as usize {
        return Err(Error::InvalidArgument {
            op,
            shape: x.shape().to_vec(),
            reason: "more than 2^31-1 channels".into(),
        });
    }
    let units = n * if hw % 4 == 0 { hw / 4 } else { hw };
    let wanted = (stream.device.info.sm_count as usize * BATCHNORM_BLOCKS_PER_SM).div_ceil(c);
    let slices = wanted.min(units.div_ceil(BATCHNORM_BLOCK * BATCHNORM_UNROLL)).clamp(1, u16::MAX as usize);
    Ok(LaunchConfig {
        grid: (c as u32, slices as u32, 1),
        block: (BATCHNORM_BLOCK as u32, 1, 1),
        shared_bytes: 0,
    })
}

/// `f(plane, channel, out)` for each `(sample, channel)` plane of `hw` elements of `out`.
fn cpu_channel_planes(out: &mut [f32], c: usize, hw: usize, f: impl Fn(usize, usize, &mut [f32]) + Sync) {
    out.par_chunks_mut(hw)
        .with_min_len((CPU_CHUNK / hw).max(1))
        .enumerate()
        .for_each(|(plane, o)| f(plane, plane % c, o));
}

/// Per-channel `Σ f(plane, value index in plane)` over the `(n, c, hw)` layout, in f64.
fn cpu_channel_sums(n: usize, c: usize, hw: usize, f: impl Fn(usize, usize) -> f64 + Sync) -> Vec<f64> {
    (0..c)
        .into_par_iter()
        .map(|ch| (0..n).map(|s| (0..hw).map(|k| f(s * c + ch, k)).sum::<f64>()).sum())
        .collect()
}

/// Batch norm in training mode over an NCHW (or `[N, C]`) tensor: each channel normalized with
/// its mean and biased variance over N, H, W, then `· γ + β`. Updates `running_mean` and
/// `running_var` in place (`(1 - momentum)·old + momentum·new`, the variance unbiased, as
/// PyTorch); a running tensor whose buffer a clone shares is copied first. Returns the output and
/// what [`batch_norm2d_backward`] needs.
pub fn batch_norm2d_train(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &mut Tensor,
    running_var: &mut Tensor,
    momentum: f32,
    eps: f32,
) -> Result<(Tensor, BatchNormSaved)> {
    const OP: &str = "batch_norm2d_train";
    let (n, c, hw) = batch_norm_dims(OP, x)?;
    check_channels(OP, x, &[gamma, beta, running_mean, running_var], c)?;
    let count = n * hw;
    if count < 2 {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: x.shape().to_vec(),
            reason: "training needs more than one value per channel".into(),
        });
    }
    let ctx = x.context().clone();
    match x.storage() {
        Storage::Cpu(v) => {
            let m = count as f64;
            let mean = cpu_channel_sums(n, c, hw, |p, k| v[p * hw + k] as f64);
            let mean: Vec<f64> = mean.into_iter().map(|s| s / m).collect();
            let var = cpu_channel_sums(n, c, hw, |p, k| (v[p * hw + k] as f64 - mean[p % c]).powi(2));
            let var: Vec<f64> = var.into_iter().map(|s| s / m).collect();
            let rstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps as f64).sqrt()).collect();
            let (g, b) = (gamma.to_vec()?, beta.to_vec()?);
            let mut y = vec![0.0f32; v.len()];
            cpu_channel_planes(&mut y, c, hw, |plane, ch, out| {
                for (o, &e) in out.iter_mut().zip(&v[plane * hw..(plane + 1) * hw]) {
                    *o = ((e as f64 - mean[ch]) * rstd[ch] * g[ch] as f64 + b[ch] as f64) as f32;
                }
            });
            let mom = momentum as f64;
            if let Some(rm) = running_mean.make_unique()? {
                for (r, &mu) in rm.iter_mut().zip(&mean) {
                    *r = ((1.0 - mom) * *r as f64 + mom * mu) as f32;
                }
            }
            if let Some(rv) = running_var.make_unique()? {
                for (r, &var) in rv.iter_mut().zip(&var) {
                    *r = ((1.0 - mom) * *r as f64 + mom * var * m / (m - 1.0)) as f32;
                }
            }
            let to32 = |v: &[f64]| v.iter().map(|&e| e as f32).collect();
            let saved = BatchNormSaved {
                mean: Tensor::from_cpu(&ctx, &[c], to32(&mean)),
                rstd: Tensor::from_cpu(&ctx, &[c], to32(&rstd)),
            };
            Ok((Tensor::from_cpu(&ctx, x.shape(), y), saved))
        }
        Storage::Cuda(_) => {
            running_mean.make_unique()?;
            running_var.make_unique()?;
            let stream = ctx.stream(OP)?;
            let cfg = batch_norm_launch(OP, x, stream, (n, c, hw))?;
            let partials = stream.device.pool.alloc(stream, c * cfg.grid.1 as usize * 2 * 4, OP)?;
            let y = Tensor::uninit(&ctx, x.shape(), OP)?;
            let (mean, rstd) = (Tensor::uninit(&ctx, &[c], OP)?, Tensor::uninit(&ctx, &[c], OP)?);
            // SAFETY: `batchnorm_stats_f32(x, partials, n, c, hw)`: x holds n·c·hw floats
            // (16-byte aligned planes when hw % 4 == 0), partials 2 floats per block of the
            // (c, slices) grid.
            unsafe {
                kernels::batchnorm_stats_f32.launch(
                    stream,
                    cfg,
                    (x.ptr(), partials.dev_ptr_mut(), n, c, hw),
                )?
            };
            // SAFETY: `batchnorm_fwd_f32(x, gamma, beta, partials, y, mean, rstd, running_mean,
            // running_var, n, c, hw, momentum, eps)`: the same grid as the stats launch before
            // it on this stream; y holds n·c·hw floats, the others c floats; the running
            // buffers are uniquely owned (made so above), so updating them in place is unseen.
            let args = (
                x.ptr(),
                gamma.ptr(),
                beta.ptr(),
                partials.dev_ptr(),
                y.ptr_mut(),
                mean.ptr_mut(),
                rstd.ptr_mut(),
                running_mean.ptr_mut(),
                running_var.ptr_mut(),
                n,
                c,
                hw,
                momentum,
                eps,
            );
            unsafe { kernels::batchnorm_fwd_f32.launch(stream, cfg, args)? };
            Ok((y, BatchNormSaved { mean, rstd }))
        }
    }
}

/// Batch norm in inference mode: each channel normalized with the running statistics, then
/// `· γ + β`.
pub fn batch_norm2d_eval(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    eps: f32,
) -> Result<Tensor> {
    const OP: &str = "batch_norm2d_eval";
    let (n, c, hw) = batch_norm_dims(OP, x)?;
    check_channels(OP, x, &[gamma, beta, running_mean, running_var], c)?;
    let ctx = x.context();
    match x.storage() {
        Storage::Cpu(v) => {
            let (g, b, rm, rv) =
                (gamma.to_vec()?, beta.to_vec()?, running_mean.to_vec()?, running_var.to_vec()?);
            let mut y = vec![0.0f32; v.len()];
            cpu_channel_planes(&mut y, c, hw, |plane, ch, out| {
                let rstd = 1.0 / (rv[ch] as f64 + eps as f64).sqrt();
                for (o, &e) in out.iter_mut().zip(&v[plane * hw..(plane + 1) * hw]) {
                    *o = ((e as f64 - rm[ch] as f64) * rstd * g[ch] as f64 + b[ch] as f64) as f32;
                }
            });
            Ok(Tensor::from_cpu(ctx, x.shape(), y))
        }
        Storage::Cuda(_) => {
            let stream = ctx.stream(OP)?;
            let cfg = batch_norm_launch(OP, x, stream, (n, c, hw))?;
            let y = Tensor::uninit(ctx, x.shape(), OP)?;
            let args = (
                x.ptr(),
                gamma.ptr(),
                beta.ptr(),
                running_mean.ptr(),
                running_var.ptr(),
                y.ptr_mut(),
                n,
                c,
                hw,
                eps,
            );
            // SAFETY: `batchnorm_eval_f32(x, gamma, beta, running_mean, running_var, y, n, c, hw,
            // eps)`: x and y hold n·c·hw floats, the others c floats; grid (c, slices).
            unsafe { kernels::batchnorm_eval_f32.launch(stream, cfg, args)? };
            Ok(y)
        }
    }
}

/// Gradients of [`batch_norm2d_train`]: `(dx, dγ, dβ)`, with
/// `dx = γ·rstd·(dy - mean(dy) - x̂·mean(dy·x̂))` per channel.
pub fn batch_norm2d_backward(
    dy: &Tensor,
    x: &Tensor,
    gamma: &Tensor,
    saved: &BatchNormSaved,
) -> Result<(Tensor, Tensor, Tensor)> {
    const OP: &str = "batch_norm2d_backward";
    let (n, c, hw) = batch_norm_dims(OP, x)?;
    x.check_pair(OP, dy)?;
    check_channels(OP, x, &[gamma, &saved.mean, &saved.rstd], c)?;
    let ctx = x.context();
    match x.storage() {
        Storage::Cpu(v) => {
            let (d, g, mean, rstd) =
                (dy.to_vec()?, gamma.to_vec()?, saved.mean.to_vec()?, saved.rstd.to_vec()?);
            let xhat = |p: usize, k: usize| (v[p * hw + k] as f64 - mean[p % c] as f64) * rstd[p % c] as f64;
            let sum_dy = cpu_channel_sums(n, c, hw, |p, k| d[p * hw + k] as f64);
            let sum_dy_xhat = cpu_channel_sums(n, c, hw, |p, k| d[p * hw + k] as f64 * xhat(p, k));
            let m = (n * hw) as f64;
            let mut dx = vec![0.0f32; v.len()];
            cpu_channel_planes(&mut dx, c, hw, |plane, ch, out| {
                let gr = g[ch] as f64 * rstd[ch] as f64;
                for (k, o) in out.iter_mut().enumerate() {
                    let dyk = d[plane * hw + k] as f64;
                    *o = (gr * (dyk - sum_dy[ch] / m - xhat(plane, k) * sum_dy_xhat[ch] / m)) as f32;
                }
            });
            let to32 = |v: Vec<f64>| v.into_iter().map(|e| e as f32).collect();
            Ok((
                Tensor::from_cpu(ctx, x.shape(), dx),
                Tensor::from_cpu(ctx, &[c], to32(sum_dy_xhat)),
                Tensor::from_cpu(ctx, &[c], to32(sum_dy)),
            ))
        }
        Storage::Cuda(_) => {
            let stream = ctx.stream(OP)?;
            let cfg = batch_norm_launch(OP, x, stream, (n, c, hw))?;
            let partials = stream.device.pool.alloc(stream, c * cfg.grid.1 as usize * 2 * 4, OP)?;
            let dx = Tensor::uninit(ctx, x.shape(), OP)?;
            let (dgamma, dbeta) = (Tensor::uninit(ctx, &[c], OP)?, Tensor::uninit(ctx, &[c], OP)?);
            let (mean, rstd) = (saved.mean.ptr(), saved.rstd.ptr());
            // SAFETY: `batchnorm_bwd_reduce_f32(dy, x, mean, rstd, partials, n, c, hw)`: dy and x
            // hold n·c·hw floats, mean/rstd c floats, partials 2 floats per block of the grid.
            let args = (dy.ptr(), x.ptr(), mean, rstd, partials.dev_ptr_mut(), n, c, hw);
            unsafe { kernels::batchnorm_bwd_reduce_f32.launch(stream, cfg, args)? };
            // SAFETY: `batchnorm_bwd_dx_f32(dy, x, gamma, mean, rstd, partials, dx, dgamma,
            // dbeta, n, c, hw)`: the reduce launch's grid and partials; dx holds n·c·hw floats,
            // dgamma/dbeta c floats.
            let args = (
                dy.ptr(),
                x.ptr(),
                gamma.ptr(),
                mean,
                rstd,
                partials.dev_ptr(),
                dx.ptr_mut(),
                dgamma.ptr_mut(),
                dbeta.ptr_mut(),
                n,
                c,
                hw,
            );
            unsafe { kernels::batchnorm_bwd_dx_f32.launch(stream, cfg, args)? };
            Ok((dx, dgamma, dbeta))
        }
    }
}
