//! Optimizers: [`Sgd`] (momentum, Nesterov, weight decay) and [`Adam`] (Adam / AdamW), each step
//! one fused launch over every parameter tensor. Kernels: `gpu-kernels/src/optim/`.
//!
//! Parameters are updated in place: a parameter tensor whose buffer a clone shares is copied first
//! (so clones keep their values), like `Arc::make_mut`.
//!
//! The state (momentum, Adam's moments) is made at the first step for those parameters, on their
//! context. Every later step checks each parameter against its state: another count, shape or
//! dtype is `ShapeMismatch`/`DTypeMismatch`/`InvalidArgument`, another stream, device or backend
//! `DeviceMismatch` (make a new optimizer to start on other parameters). A step that fails leaves
//! Adam's step count (its bias correction) where it was.
//!
//! In a CUDA graph capture ([`Context::capture`]): the first step (which makes the state) is
//! refused, since a replay would zero the state again; so is Adam unless
//! [`Adam::capturable`], since its step count is otherwise a kernel argument a replay repeats.
use crate::kernels;
use crate::runtime::context::{Backend, Context};
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::DevPtr;
use crate::runtime::kernel::DevPtrMut;
use crate::runtime::launch::LaunchConfig;
use crate::runtime::pool::DeviceBuffer;
use crate::shapes::{adam_bias_correction, OPTIMIZER_BLOCK, OPTIMIZER_CHUNK, OPTIMIZER_SLOT_WORDS};
use crate::tensor::Tensor;
use std::sync::Arc;

/// Check the parameter/gradient lists and make every parameter uniquely owned.
fn prepare(
    op: &'static str,
    params: &mut [&mut Tensor],
    grads: &[&Tensor],
    states: usize,
) -> Result<Context> {
    if params.len() != grads.len() || params.is_empty() {
        return Err(Error::InvalidArgument {
            op,
            shape: vec![params.len(), grads.len()],
            reason: "needs one gradient per parameter, and at least one parameter".into(),
        });
    }
    if states != 0 && states != params.len() {
        return Err(Error::InvalidArgument {
            op,
            shape: vec![states, params.len()],
            reason: "the parameter list changed since the first step".into(),
        });
    }
    let ctx = params[0].context().clone();
    for (p, g) in params.iter_mut().zip(grads) {
        p.check_pair(op, g)?;
        p.require_f32(op)?;
        if !ctx.same_queue(p.context()) {
            return Err(ctx.mismatch(op, p.context()));
        }
        p.make_unique()?;
    }
    Ok(ctx)
}

/// Check each parameter against the state kept for it since the first step: the kernels index the
/// state with the parameter's length and the CPU path reads both as host data, so a state of
/// another shape, dtype, stream, device or backend is refused (make a new optimizer to start
/// afresh on the new parameters).
fn check_state<'a>(
    op: &'static str,
    params: &[&mut Tensor],
    state: impl IntoIterator<Item = &'a Tensor>,
) -> Result<()> {
    for (p, s) in params.iter().zip(state) {
        if !s.context().same_queue(p.context()) {
            return Err(s.context().mismatch(op, p.context()));
        }
        if s.shape() != p.shape() {
            return Err(Error::ShapeMismatch { op, lhs: p.shape().to_vec(), rhs: s.shape().to_vec() });
        }
        if s.dtype() != p.dtype() {
            return Err(Error::DTypeMismatch { op, lhs: p.dtype(), rhs: s.dtype() });
        }
    }
    Ok(())
}

/// The host data of a CPU-backend tensor, made unique (`prepare` and `check_state` put every
/// tensor of a step on the backend of the first parameter).
fn cpu_data<'a>(op: &'static str, t: &'a mut Tensor) -> Result<&'a mut Vec<f32>> {
    t.make_unique()?.ok_or_else(|| Error::DeviceMismatch { op, lhs: "cpu".into(), rhs: "cuda".into() })
}

/// An optimizer's slot table and chunk list on the device, kept between steps: the addresses
/// only change when a parameter is copied on share or the context changes.
struct DeviceTables {
    slots: Vec<[u64; OPTIMIZER_SLOT_WORDS]>,
    table: DeviceBuffer,
    chunks: DeviceBuffer,
    blocks: usize,
}

impl std::fmt::Debug for DeviceTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceTables({} tensors, {} chunks)", self.slots.len(), self.blocks)
    }
}

/// `NotCapturable` for a first step (it makes the optimizer's state, which a replay would reset)
/// while `ctx`'s stream is being captured.
fn refuse_first_step_in_capture(ctx: &Context, first: bool, op: &'static str) -> Result<()> {
    match &ctx.backend {
        Backend::Cuda(stream) if first => stream.refuse_in_capture(op),
        _ => Ok(()),
    }
}

/// Make sure `cached` holds the tables of `slots` (parameter, gradient, state addresses, length)
/// on `ctx`'s stream (uploading them when they changed), then hand their addresses, with the
/// launch shape, to `run`.
fn launch_multi_tensor(
    op: &'static str,
    ctx: &Context,
    cached: &mut Option<DeviceTables>,
    slots: Vec<[u64; OPTIMIZER_SLOT_WORDS]>,
    run: impl FnOnce(LaunchConfig, DevPtr<u64>, DevPtr<u32>) -> Result<()>,
) -> Result<()> {
    let stream = ctx.stream(op)?;
    let fresh = cached.as_ref().is_some_and(|t| t.slots == slots && Arc::ptr_eq(t.table.stream(), stream));
    if !fresh {
        let table: Vec<u64> = slots.iter().flatten().copied().collect();
        let mut chunks: Vec<u32> = Vec::new();
        for (i, s) in slots.iter().enumerate() {
            for c in 0..(s[OPTIMIZER_SLOT_WORDS - 1] as usize).div_ceil(OPTIMIZER_CHUNK) {
                chunks.extend([i as u32, c as u32]);
            }
        }
        let blocks = chunks.len() / 2;
        if blocks > i32::MAX as usize {
            return Err(Error::InvalidArgument {
                op,
                shape: vec![blocks],
                reason: "too many parameters for one launch".into(),
            });
        }
        let table_dev = stream.device.pool.alloc(stream, table.len() * 8, op)?;
        let chunks_dev = stream.device.pool.alloc(stream, chunks.len() * 4, op)?;
        if blocks > 0 {
            // SAFETY: each fresh buffer of this stream holds exactly the slice copied into it (see
            // `copy_htod` on pageable sources; u64 and u32 have no padding); later launches on this stream are ordered after.
            unsafe {
                stream.copy_htod_const(table_dev.ptr(), &table)?;
                stream.copy_htod_const(chunks_dev.ptr(), &chunks)?;
            }
        }
        *cached = Some(DeviceTables { slots, table: table_dev, chunks: chunks_dev, blocks });
    }
    let tables = cached.as_ref().expect("filled above");
    if tables.blocks == 0 {
        return Ok(());
    }
    run(
        LaunchConfig {
            grid: (tables.blocks as u32, 1, 1),
            block: (OPTIMIZER_BLOCK as u32, 1, 1),
            shared_bytes: 0,
        },
        tables.table.dev_ptr(),
        tables.chunks.dev_ptr(),
    )
}

/// A fused multi-tensor optimizer: one launch updates every parameter.
pub trait Optimizer {
    /// Update `params` in place from `grads` (one per parameter, same shapes), in one launch.
    fn update(&mut self, params: &mut [&mut Tensor], grads: &[&Tensor]) -> Result<()>;

    /// [`update`](Optimizer::update) over owned tensors or references.
    fn step<P: AsMut<Tensor>, G: AsRef<Tensor>>(&mut self, params: &mut [P], grads: &[G]) -> Result<()>
    where
        Self: Sized,
    {
        let mut params: Vec<&mut Tensor> = params.iter_mut().map(AsMut::as_mut).collect();
        let grads: Vec<&Tensor> = grads.iter().map(AsRef::as_ref).collect();
        self.update(&mut params, &grads)
    }
}

/// Stochastic gradient descent, PyTorch's semantics (dampening 0).
#[derive(Debug)]
pub struct Sgd {
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
    pub nesterov: bool,
    buffers: Vec<Tensor>,
    tables: Option<DeviceTables>,
}

impl Sgd {
    pub fn new(lr: f32) -> Self {
        Sgd { lr, momentum: 0.0, weight_decay: 0.0, nesterov: false, buffers: Vec::new(), tables: None }
    }
    pub fn momentum(mut self, momentum: f32) -> Self {
        self.momentum = momentum;
        self
    }
    pub fn weight_decay(mut self, weight_decay: f32) -> Self {
        self.weight_decay = weight_decay;
        self
    }
    pub fn nesterov(mut self, nesterov: bool) -> Self {
        self.nesterov = nesterov;
        self
    }
}

impl Optimizer for Sgd {
    fn update(&mut self, params: &mut [&mut Tensor], grads: &[&Tensor]) -> Result<()> {
        const OP: &str = "sgd";
        let ctx = prepare(OP, params, grads, self.buffers.len())?;
        check_state(OP, params, &self.buffers)?;
        let first = self.buffers.is_empty();
        if self.momentum != 0.0 {
            refuse_first_step_in_capture(
                &ctx,
                first,
                "sgd (first step with momentum; take it before the capture)",
            )?;
        }
        if first && self.momentum != 0.0 {
            self.buffers = params.iter().map(|p| ctx.zeros(p.shape())).collect::<Result<_>>()?;
        }
        let (lr, momentum, wd) = (self.lr, self.momentum, self.weight_decay);
        match &ctx.backend {
            Backend::Cpu => {
                for (i, (p, g)) in params.iter_mut().zip(grads).enumerate() {
                    let g = g.to_vec()?;
                    let mut buf = self.buffers.get_mut(i).map(|b| cpu_data(OP, b)).transpose()?;
                    let p = cpu_data(OP, p)?;
                    for (j, x) in p.iter_mut().enumerate() {
                        let mut d = g[j] as f64 + wd as f64 * *x as f64;
                        if let Some(buf) = buf.as_deref_mut() {
                            let b = if first { d } else { momentum as f64 * buf[j] as f64 + d };
                            buf[j] = b as f32;
                            d = if self.nesterov { d + momentum as f64 * b } else { b };
                        }
                        *x = (*x as f64 - lr as f64 * d) as f32;
                    }
                }
                Ok(())
            }
            Backend::Cuda(stream) => {
                let slots: Vec<[u64; OPTIMIZER_SLOT_WORDS]> = params
                    .iter()
                    .zip(grads)
                    .enumerate()
                    .map(|(i, (p, g))| {
                        let buf = self.buffers.get(i).map_or(0, Tensor::device_ptr);
                        [p.device_ptr(), g.device_ptr(), buf, 0, p.len() as u64]
                    })
                    .collect();
                let (nesterov, first_step) = (u32::from(self.nesterov), u32::from(first));
                launch_multi_tensor(OP, &ctx, &mut self.tables, slots, |cfg, table, chunks| {
                    // SAFETY: `sgd_f32(slots, chunks, lr, momentum, weight_decay, nesterov,
                    // first_step)`: the table holds, per tensor, a uniquely owned parameter, its
                    // gradient of the same length, a momentum buffer (or 0 without momentum) and
                    // the length; the chunks cover each tensor once; one block per chunk.
                    let args = (table, chunks, lr, momentum, wd, nesterov, first_step);
                    unsafe { kernels::sgd_f32.launch(stream, cfg, args) }
                })
            }
        }
    }
}

/// Adam with bias correction; AdamW when the weight decay is decoupled.
#[derive(Debug)]
pub struct Adam {
    pub lr: f32,
    pub betas: (f32, f32),
    pub eps: f32,
    pub weight_decay: f32,
    /// AdamW: decay the weights directly instead of adding `weight_decay·p` to the gradient.
    pub decoupled: bool,
    state: Vec<(Tensor, Tensor)>,
    steps: i32,
    tables: Option<DeviceTables>,
    /// The device-side step count of [`Adam::capturable`]: `[t, c1 bits, c2 bits]` as u32 (in an
    /// f32 tensor of 3, zeroed by the first step).
    device_step: Option<Tensor>,
    capturable: bool,
}

impl Adam {
    pub fn new(lr: f32) -> Self {
        Adam {
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            state: Vec::new(),
            steps: 0,
            tables: None,
            device_step: None,
            capturable: false,
        }
    }
    /// Keep the step count (the bias correction) on the device, advanced by a kernel at each
    /// step, so that a step captured into a CUDA graph counts at every replay (PyTorch's
    /// `capturable=True`). Same results as the default, bit for bit; one extra tiny launch per
    /// step. No effect on the CPU backend. Set it before the first step.
    pub fn capturable(mut self, capturable: bool) -> Self {
        self.capturable = capturable;
        self
    }
    /// AdamW (decoupled weight decay), PyTorch's default decay 0.01.
    pub fn adamw(lr: f32, weight_decay: f32) -> Self {
        Adam { weight_decay, decoupled: true, ..Self::new(lr) }
    }
    pub fn betas(mut self, beta1: f32, beta2: f32) -> Self {
        self.betas = (beta1, beta2);
        self
    }
    pub fn eps(mut self, eps: f32) -> Self {
        self.eps = eps;
        self
    }
    pub fn weight_decay(mut self, weight_decay: f32) -> Self {
        self.weight_decay = weight_decay;
        self
    }
}

impl Optimizer for Adam {
    fn update(&mut self, params: &mut [&mut Tensor], grads: &[&Tensor]) -> Result<()> {
        const OP: &str = "adam";
        let ctx = prepare(OP, params, grads, self.state.len())?;
        check_state(OP, params, self.state.iter().map(|(m, _)| m))?;
        check_state(OP, params, self.state.iter().map(|(_, v)| v))?;
        refuse_first_step_in_capture(
            &ctx,
            self.state.is_empty(),
            "adam (first step; take it before the capture)",
        )?;
        if !self.capturable {
            refuse_first_step_in_capture(&ctx, true, "adam (host-side step count; use Adam::capturable)")?;
        }
        if self.state.is_empty() {
            self.state = params
                .iter()
                .map(|p| Ok((ctx.zeros(p.shape())?, ctx.zeros(p.shape())?)))
                .collect::<Result<_>>()?;
            if self.capturable && ctx.is_cuda() {
                self.device_step = Some(ctx.zeros(&[3])?);
            }
        }
        // Counted only once the step has happened: a failed launch must not shift the bias
        // correction of every later step.
        let steps = self.steps.checked_add(1).ok_or_else(|| Error::InvalidArgument {
            op: OP,
            shape: vec![],
            reason: "step counter overflow".into(),
        })?;
        let (lr, (b1, b2), eps, wd) = (self.lr, self.betas, self.eps, self.weight_decay);
        let c1 = adam_bias_correction(b1, steps as u32);
        let c2 = adam_bias_correction(b2, steps as u32);
        let stepped = match &ctx.backend {
            Backend::Cpu => {
                for ((p, g), (m, v)) in params.iter_mut().zip(grads).zip(self.state.iter_mut()) {
                    let g = g.to_vec()?;
                    let (m, v, p) = (cpu_data(OP, m)?, cpu_data(OP, v)?, cpu_data(OP, p)?);
                    for (j, x) in p.iter_mut().enumerate() {
                        let (mut param, mut grad) = (*x as f64, g[j] as f64);
                        if self.decoupled {
                            param *= 1.0 - lr as f64 * wd as f64;
                        } else {
                            grad += wd as f64 * param;
                        }
                        let mj = b1 as f64 * m[j] as f64 + (1.0 - b1 as f64) * grad;
                        let vj = b2 as f64 * v[j] as f64 + (1.0 - b2 as f64) * grad * grad;
                        m[j] = mj as f32;
                        v[j] = vj as f32;
                        *x = (param - lr as f64 * (mj / c1) / ((vj / c2).sqrt() + eps as f64)) as f32;
                    }
                }
                Ok(())
            }
            Backend::Cuda(stream) => {
                let slots: Vec<[u64; OPTIMIZER_SLOT_WORDS]> = params
                    .iter()
                    .zip(grads)
                    .zip(&self.state)
                    .map(|((p, g), (m, v))| {
                        [p.device_ptr(), g.device_ptr(), m.device_ptr(), v.device_ptr(), p.len() as u64]
                    })
                    .collect();
                let (c1, c2, decoupled) = (c1 as f32, c2 as f32, u32::from(self.decoupled));
                let device_step = self.device_step.as_ref();
                launch_multi_tensor(OP, &ctx, &mut self.tables, slots, |cfg, table, chunks| {
                    let Some(step) = device_step else {
                        // SAFETY: `adam_f32(slots, chunks, lr, beta1, beta2, eps, weight_decay, c1,
                        // c2, decoupled)`: the table holds, per tensor, a uniquely owned parameter,
                        // its gradient, and this optimizer's m and v, all of the same length, and
                        // that length; the chunks cover each tensor once; one block per chunk.
                        let args = (table, chunks, lr, b1, b2, eps, wd, c1, c2, decoupled);
                        return unsafe { kernels::adam_f32.launch(stream, cfg, args) };
                    };
                    let state = DevPtrMut::<u32>::new(step.device_ptr());
                    // SAFETY: `adam_advance(state, beta1, beta2)`: `state` is this optimizer's
                    // 3-word buffer (12 bytes, u32-aligned), any launch shape.
                    unsafe {
                        kernels::adam_advance.launch(
                            stream,
                            LaunchConfig::covering(1, 32),
                            (state, b1, b2),
                        )?
                    };
                    // SAFETY: `adam_dev_f32(...)`: as `adam_f32` above, with the bias corrections
                    // read from `state`, written by `adam_advance` queued before on this stream.
                    let args = (table, chunks, lr, b1, b2, eps, wd, DevPtr::from(state), decoupled);
                    unsafe { kernels::adam_dev_f32.launch(stream, cfg, args) }
                })
            }
        };
        if stepped.is_ok() {
            self.steps = steps;
        }
        stepped
    }
}
