//! Neural-network ops along the last axis: softmax, log-softmax, cross-entropy with logits, layer
//! norm; forward and backward. Kernels: `gpu-kernels/src/nn/`.
use super::CPU_CHUNK;
use crate::runtime::error::{DriverResultExt, Error, Result};
use crate::runtime::launch::{kernel_args, launch, LaunchConfig};
use crate::shapes::NN_ROW_BLOCK;
use crate::tensor::{Storage, Tensor};
use cudarc::driver::result;
use rayon::prelude::*;

/// `(rows, cols)` of a tensor viewed as rows of its last axis; rank ≥ 1, f32.
fn rows_cols(op: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    x.require_f32(op)?;
    match x.shape().split_last() {
        Some((&cols, lead)) => Ok((lead.iter().product(), cols)),
        None => Err(Error::InvalidArgument { op, shape: vec![], reason: "needs rank ≥ 1".into() }),
    }
}

/// One block of `NN_ROW_BLOCK` threads per row.
fn per_row(op: &'static str, shape: &[usize], rows: usize) -> Result<LaunchConfig> {
    if rows > i32::MAX as usize {
        return Err(Error::InvalidArgument {
            op,
            shape: shape.to_vec(),
            reason: "more than 2^31-1 rows".into(),
        });
    }
    Ok(LaunchConfig { grid: (rows as u32, 1, 1), block: (NN_ROW_BLOCK as u32, 1, 1), shared_bytes: 0 })
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
    let (rows, cols) = rows_cols(op, x)?;
    match x.storage() {
        Storage::Cpu(v) => Ok(Tensor::from_cpu(
            x.context(),
            x.shape(),
            cpu_rows(v, cols, |_, row, out| {
                let (m, lse) = max_and_log_sum_exp(row);
                for (o, &e) in out.iter_mut().zip(row) {
                    let l = e as f64 - m - lse;
                    *o = if log { l as f32 } else { l.exp() as f32 };
                }
            }),
        )),
        Storage::Cuda(_) => {
            let out = Tensor::uninit(x.context(), x.shape(), op)?;
            if out.is_empty() {
                return Ok(out);
            }
            let stream = x.context().stream(op)?;
            let (px, po) = (x.device_ptr(), out.device_ptr());
            let kernel = if log { "log_softmax_f32" } else { "softmax_f32" };
            // SAFETY: `<log_>softmax_f32(x, out, cols)`: both hold rows·cols floats, one block of
            // NN_ROW_BLOCK threads per row.
            unsafe {
                launch(stream, kernel, per_row(op, x.shape(), rows)?, &mut kernel_args![&px, &po, &cols])?
            };
            Ok(out)
        }
    }
}

fn softmax_backward_impl(y: &Tensor, dy: &Tensor, log: bool) -> Result<Tensor> {
    let op = if log { "log_softmax_backward" } else { "softmax_backward" };
    y.check_pair(op, dy)?;
    let (rows, cols) = rows_cols(op, y)?;
    match (y.storage(), dy.storage()) {
        (Storage::Cpu(yv), Storage::Cpu(gv)) => Ok(Tensor::from_cpu(
            y.context(),
            y.shape(),
            cpu_rows(yv, cols, |r, yr, out| {
                let gr = &gv[r * cols..(r + 1) * cols];
                let total: f64 = if log {
                    gr.iter().map(|&g| g as f64).sum()
                } else {
                    yr.iter().zip(gr).map(|(&p, &g)| p as f64 * g as f64).sum()
                };
                for ((o, &p), &g) in out.iter_mut().zip(yr).zip(gr) {
                    let (p, g) = (p as f64, g as f64);
                    *o = if log { g - p.exp() * total } else { p * (g - total) } as f32;
                }
            }),
        )),
        _ => {
            let dx = Tensor::uninit(y.context(), y.shape(), op)?;
            if dx.is_empty() {
                return Ok(dx);
            }
            let stream = y.context().stream(op)?;
            let (py, pg, pd) = (y.device_ptr(), dy.device_ptr(), dx.device_ptr());
            let kernel = if log { "log_softmax_bwd_f32" } else { "softmax_bwd_f32" };
            // SAFETY: `<log_>softmax_bwd_f32(y, dy, dx, cols)`: three buffers of rows·cols floats
            // (shapes checked equal), one block per row.
            unsafe {
                launch(
                    stream,
                    kernel,
                    per_row(op, y.shape(), rows)?,
                    &mut kernel_args![&py, &pg, &pd, &cols],
                )?
            };
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

/// Mean cross-entropy of `logits` `[.., classes]` against one class index per row, with its
/// gradient w.r.t. the logits (softmax − one-hot, divided by the rows), in one pass.
/// Returns `(loss of shape [], gradient of the logits' shape)`.
pub fn cross_entropy(logits: &Tensor, labels: &[u32]) -> Result<(Tensor, Tensor)> {
    const OP: &str = "cross_entropy";
    let (rows, cols) = rows_cols(OP, logits)?;
    if labels.len() != rows {
        return Err(Error::ShapeMismatch { op: OP, lhs: logits.shape().to_vec(), rhs: vec![labels.len()] });
    }
    if let Some(bad) = labels.iter().find(|&&l| l as usize >= cols) {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: logits.shape().to_vec(),
            reason: format!("label {bad} out of range for {cols} classes"),
        });
    }
    if rows == 0 {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: logits.shape().to_vec(),
            reason: "no rows".into(),
        });
    }
    let scale = (1.0 / rows as f64) as f32;
    match logits.storage() {
        Storage::Cpu(v) => {
            let mut losses = vec![0.0f64; rows];
            let grad = cpu_rows(v, cols, |r, row, out| {
                let (m, lse) = max_and_log_sum_exp(row);
                for (i, (o, &e)) in out.iter_mut().zip(row).enumerate() {
                    let p = (e as f64 - m - lse).exp();
                    *o = (scale as f64 * (p - f64::from(i == labels[r] as usize))) as f32;
                }
            });
            for (r, l) in losses.iter_mut().enumerate() {
                let row = &v[r * cols..(r + 1) * cols];
                let (m, lse) = max_and_log_sum_exp(row);
                *l = lse + m - row[labels[r] as usize] as f64;
            }
            let loss = (losses.iter().sum::<f64>() / rows as f64) as f32;
            Ok((
                Tensor::from_cpu(logits.context(), &[], vec![loss]),
                Tensor::from_cpu(logits.context(), logits.shape(), grad),
            ))
        }
        Storage::Cuda(_) => {
            let ctx = logits.context();
            let stream = ctx.stream(OP)?;
            let labels_dev = stream.device.pool.alloc(stream, rows * 4, OP)?;
            // SAFETY: the buffer holds `rows` u32; pageable source is staged before return.
            unsafe { result::memcpy_htod_async(labels_dev.ptr(), labels, stream.raw()) }
                .call("cuMemcpyHtoDAsync")?;
            let losses = Tensor::uninit(ctx, &[rows], OP)?;
            let grad = Tensor::uninit(ctx, logits.shape(), OP)?;
            let (px, pl, ploss, pg) =
                (logits.device_ptr(), labels_dev.ptr(), losses.device_ptr(), grad.device_ptr());
            // SAFETY: `cross_entropy_f32(logits, labels, loss, grad, cols, scale)`: logits and grad
            // hold rows·cols floats, labels rows u32 < cols (checked above), loss rows floats; one
            // block per row. The labels buffer returns to the pool in stream order after the launch.
            unsafe {
                launch(
                    stream,
                    "cross_entropy_f32",
                    per_row(OP, logits.shape(), rows)?,
                    &mut kernel_args![&px, &pl, &ploss, &pg, &cols, &scale],
                )?
            };
            Ok((losses.mean()?, grad))
        }
    }
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
/// optional). Returns the output and what the backward pass needs.
pub fn layer_norm(
    x: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    eps: f32,
) -> Result<(Tensor, LayerNormSaved)> {
    const OP: &str = "layer_norm";
    let (rows, cols) = rows_cols(OP, x)?;
    check_param(OP, x, gamma, cols)?;
    check_param(OP, x, beta, cols)?;
    if cols == 0 {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: x.shape().to_vec(),
            reason: "empty rows".into(),
        });
    }
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
                    *o = ((e as f64 - mean) * rstd * w + c) as f32;
                }
            });
            let ctx = x.context();
            let mean = Tensor::from_cpu(ctx, &[rows], stats.iter().map(|s| s.0 as f32).collect());
            let rstd = Tensor::from_cpu(ctx, &[rows], stats.iter().map(|s| s.1 as f32).collect());
            Ok((Tensor::from_cpu(ctx, x.shape(), y), LayerNormSaved { mean, rstd }))
        }
        Storage::Cuda(_) => {
            let ctx = x.context();
            let y = Tensor::uninit(ctx, x.shape(), OP)?;
            let (mean, rstd) = (Tensor::uninit(ctx, &[rows], OP)?, Tensor::uninit(ctx, &[rows], OP)?);
            if rows > 0 {
                let stream = ctx.stream(OP)?;
                let (px, pg, pb) =
                    (x.device_ptr(), gamma.map_or(0, Tensor::device_ptr), beta.map_or(0, Tensor::device_ptr));
                let (py, pm, pr) = (y.device_ptr(), mean.device_ptr(), rstd.device_ptr());
                // SAFETY: `layernorm_fwd_f32(x, gamma, beta, y, mean, rstd, cols, eps)`: x and y
                // hold rows·cols floats, gamma/beta cols floats or null, mean/rstd rows floats;
                // one block per row.
                unsafe {
                    launch(
                        stream,
                        "layernorm_fwd_f32",
                        per_row(OP, x.shape(), rows)?,
                        &mut kernel_args![&px, &pg, &pb, &py, &pm, &pr, &cols, &eps],
                    )?
                };
            }
            Ok((y, LayerNormSaved { mean, rstd }))
        }
    }
}

/// Gradients of [`layer_norm`]: `(dx, dγ, dβ)`; `dγ`/`dβ` are computed for shape `[cols]` whether
/// or not the forward pass had them.
pub fn layer_norm_backward(
    x: &Tensor,
    gamma: Option<&Tensor>,
    dy: &Tensor,
    saved: &LayerNormSaved,
) -> Result<(Tensor, Tensor, Tensor)> {
    const OP: &str = "layer_norm_backward";
    let (rows, cols) = rows_cols(OP, x)?;
    x.check_pair(OP, dy)?;
    check_param(OP, x, gamma, cols)?;
    for s in [&saved.mean, &saved.rstd] {
        x.check_peer(OP, s)?;
        if s.shape() != [rows] {
            return Err(Error::ShapeMismatch { op: OP, lhs: s.shape().to_vec(), rhs: vec![rows] });
        }
    }
    match x.storage() {
        Storage::Cpu(v) => {
            let (g, gv, mean, rstd) = (
                gamma.map(Tensor::to_vec).transpose()?,
                dy.to_vec()?,
                saved.mean.to_vec()?,
                saved.rstd.to_vec()?,
            );
            let w = |i: usize| g.as_ref().map_or(1.0, |g| g[i] as f64);
            let dx = cpu_rows(v, cols, |r, row, out| {
                let (mu, rs) = (mean[r] as f64, rstd[r] as f64);
                let dyr = &gv[r * cols..(r + 1) * cols];
                let xhat: Vec<f64> = row.iter().map(|&e| (e as f64 - mu) * rs).collect();
                let gs: Vec<f64> = dyr.iter().enumerate().map(|(i, &d)| d as f64 * w(i)).collect();
                let mean_g = gs.iter().sum::<f64>() / cols as f64;
                let mean_gx = gs.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / cols as f64;
                for (i, o) in out.iter_mut().enumerate() {
                    *o = (rs * (gs[i] - mean_g - xhat[i] * mean_gx)) as f32;
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
            let to32 = |v: Vec<f64>| v.into_iter().map(|e| e as f32).collect();
            Ok((
                Tensor::from_cpu(ctx, x.shape(), dx),
                Tensor::from_cpu(ctx, &[cols], to32(dgamma)),
                Tensor::from_cpu(ctx, &[cols], to32(dbeta)),
            ))
        }
        Storage::Cuda(_) => {
            let ctx = x.context();
            let dx = Tensor::uninit(ctx, x.shape(), OP)?;
            let (dgamma, dbeta) = (Tensor::uninit(ctx, &[cols], OP)?, Tensor::uninit(ctx, &[cols], OP)?);
            if cols > 0 {
                let stream = ctx.stream(OP)?;
                let (px, pg, pdy) = (x.device_ptr(), gamma.map_or(0, Tensor::device_ptr), dy.device_ptr());
                let (pm, pr, pdx) = (saved.mean.device_ptr(), saved.rstd.device_ptr(), dx.device_ptr());
                if rows > 0 {
                    // SAFETY: `layernorm_bwd_dx_f32(x, gamma, dy, mean, rstd, dx, cols)`: x, dy, dx
                    // hold rows·cols floats, gamma cols or null, mean/rstd rows; one block per row.
                    unsafe {
                        launch(
                            stream,
                            "layernorm_bwd_dx_f32",
                            per_row(OP, x.shape(), rows)?,
                            &mut kernel_args![&px, &pg, &pdy, &pm, &pr, &pdx, &cols],
                        )?
                    };
                }
                let (pdg, pdb) = (dgamma.device_ptr(), dbeta.device_ptr());
                // SAFETY: `layernorm_bwd_params_f32(x, dy, mean, rstd, dgamma, dbeta, rows, cols)`:
                // one thread per column (threads past `cols` return), buffers as above.
                unsafe {
                    launch(
                        stream,
                        "layernorm_bwd_params_f32",
                        LaunchConfig::covering(cols, NN_ROW_BLOCK),
                        &mut kernel_args![&px, &pdy, &pm, &pr, &pdg, &pdb, &rows, &cols],
                    )?
                };
            }
            Ok((dx, dgamma, dbeta))
        }
    }
}
