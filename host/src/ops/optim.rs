//! Optimizers: [`Sgd`] (momentum, Nesterov, weight decay) and [`Adam`] (Adam / AdamW, f32 or
//! mixed precision), each step one fused launch over every parameter tensor; global-norm gradient
//! clipping ([`clip_grad_norm`]) and learning-rate schedules ([`LrSchedule`]). Kernels:
//! `gpu-kernels/src/optim/`.
//!
//! Parameters are updated in place: a parameter tensor whose buffer a clone shares is copied first
//! (so clones keep their values), like `Arc::make_mut`.
//!
//! The state (momentum, Adam's moments and master weights) is made at the first step for those
//! parameters, on their context. Every later step checks each parameter against its state:
//! another count, shape or dtype is `ShapeMismatch`/`DTypeMismatch`/`InvalidArgument`, another
//! stream, device or backend `DeviceMismatch` (make a new optimizer to start on other parameters).
//! A step that fails leaves the step count (Adam's bias correction, the schedule) where it was.
//!
//! Mixed precision ([`Adam`] only): a bf16 or f16 parameter (its gradient of the same dtype) gets
//! an f32 master copy, made from its values at the first step; each step updates the master in f32
//! and writes it, rounded to nearest even, into the parameter. Parameters of one step may mix
//! dtypes (still one launch). The master is the truth from then on: writing the 16-bit parameter
//! yourself between steps is overwritten by the next step (load new weights into a new optimizer,
//! or through [`Adam::load_state`]).
//!
//! Clipping: [`clip_grad_norm`] computes the global norm and the factor
//! `min(1, max_norm / (norm + 1e-6))` on the device (two launches, no host round trip) and returns
//! a [`GradNorm`]; [`Optimizer::step_clipped`] multiplies every gradient by that factor inside the
//! fused step (the clipped gradients are never written), [`GradNorm::scale_grads`] scales them in
//! place instead (PyTorch's `clip_grad_norm_`).
//!
//! In a CUDA graph capture ([`Context::capture`]): the first step (which makes the state) is
//! refused, since a replay would zero the state again; so is Adam unless
//! [`Adam::capturable`], since its step count (and the scheduled learning rate) is otherwise a
//! kernel argument a replay repeats; so is SGD with a schedule, for the same reason.
use crate::kernels;
use crate::runtime::capture::Access;
use crate::runtime::context::{Backend, Context};
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::DevPtr;
use crate::runtime::kernel::DevPtrMut;
use crate::runtime::launch::LaunchConfig;
use crate::runtime::pool::DeviceBuffer;
use crate::runtime::stream::Stream;
use crate::shapes::{
    adam_bias_correction, optimizer_chunk_units, optimizer_slot_meta, optimizer_slot_parts, GRAD_NORM_EPS,
    OPTIMIZER_BF16, OPTIMIZER_BLOCK, OPTIMIZER_F16, OPTIMIZER_F32, OPTIMIZER_MAX_LEN,
    OPTIMIZER_PIECES_MAX_TOTAL, OPTIMIZER_PIECE_FLAG, OPTIMIZER_SLOT_WORDS,
};
use crate::tensor::{DType, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

const _: () = assert!(
    DType::F32 as u64 == OPTIMIZER_F32
        && DType::F16 as u64 == OPTIMIZER_F16
        && DType::BF16 as u64 == OPTIMIZER_BF16,
    "the slot element types follow DType's order"
);

/// A learning rate per step (counted from 0: the first step is step 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LrSchedule {
    Constant(f32),
    /// Linear warm-up to `peak` over `warmup` steps (`peak·(step+1)/warmup`), then cosine decay
    /// from `peak` to `min` at step `total`, and `min` after it.
    WarmupCosine {
        peak: f32,
        min: f32,
        warmup: usize,
        total: usize,
    },
}

impl LrSchedule {
    /// The learning rate of `step`. Computed in f64 in the order of `lr_at` in
    /// `gpt_char_ref.py` (from the shortest decimals of `peak` and `min`, so that `1e-3` is
    /// Python's `1e-3`), then rounded to f32: the same value for every step up to `total`; after
    /// it `min` (where the Python formula, which never gets there, would rise again).
    pub fn lr_at(&self, step: usize) -> f32 {
        match *self {
            LrSchedule::Constant(lr) => lr,
            LrSchedule::WarmupCosine { peak, min, warmup, total } => {
                let (peak, min) = (decimal(peak), decimal(min));
                if step < warmup {
                    return (peak * (step + 1) as f64 / warmup as f64) as f32;
                }
                let r = ((step - warmup) as f64 / total.saturating_sub(warmup).max(1) as f64).min(1.0);
                (min + 0.5 * (1.0 + (std::f64::consts::PI * r).cos()) * (peak - min)) as f32
            }
        }
    }

    /// The learning rates of steps `0..n`, where every later step has the last one's.
    fn table(&self) -> Vec<f32> {
        let n = match *self {
            LrSchedule::Constant(_) => 1,
            LrSchedule::WarmupCosine { warmup, total, .. } => warmup.max(total).saturating_add(2),
        };
        (0..n).map(|step| self.lr_at(step)).collect()
    }
}

/// Longest warm-up or decay of a schedule on [`Adam::capturable`] (its table of rates: 64 MB).
const MAX_CAPTURABLE_SCHEDULE: usize = 1 << 24;

/// `x` as the f64 of its shortest decimal representation (the literal it was most likely written as).
fn decimal(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

/// Check the parameter/gradient lists and make every parameter uniquely owned. 16-bit parameters
/// are refused unless `half_ok`.
fn prepare(
    op: &'static str,
    params: &mut [&mut Tensor],
    grads: &[&Tensor],
    states: usize,
    half_ok: bool,
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
        if !half_ok {
            p.require_f32(op)?;
        }
        if !ctx.same_queue(p.context()) {
            return Err(ctx.mismatch(op, p.context()));
        }
        p.make_unique()?;
    }
    Ok(ctx)
}

/// Check a state tensor kept for `p` since the first step: the kernels index the state with the
/// parameter's length and the CPU path reads both as host data, so a state of another shape,
/// stream, device or backend is refused (make a new optimizer to start afresh on the new
/// parameters).
fn check_state(op: &'static str, p: &Tensor, s: &Tensor) -> Result<()> {
    if !s.context().same_queue(p.context()) {
        return Err(s.context().mismatch(op, p.context()));
    }
    if s.shape() != p.shape() {
        return Err(Error::ShapeMismatch { op, lhs: p.shape().to_vec(), rhs: s.shape().to_vec() });
    }
    Ok(())
}

/// The host data of a CPU-backend tensor, made unique (`prepare` and `check_state` put every
/// tensor of a step on the backend of the first parameter).
fn cpu_data<'a>(op: &'static str, t: &'a mut Tensor) -> Result<&'a mut Vec<f32>> {
    t.make_unique()?.ok_or_else(|| Error::DeviceMismatch { op, lhs: "cpu".into(), rhs: "cuda".into() })
}

/// A slot of the multi-tensor kernels: parameter, gradient, two state buffers, master (addresses,
/// 0 when unused), and the meta word (length, decay, the gradient's element type).
fn slot(op: &'static str, words: [u64; 5], g: &Tensor, decay: bool) -> Result<[u64; OPTIMIZER_SLOT_WORDS]> {
    if g.len() > OPTIMIZER_MAX_LEN {
        return Err(Error::InvalidArgument {
            op,
            shape: g.shape().to_vec(),
            reason: format!("more than {OPTIMIZER_MAX_LEN} elements in one tensor"),
        });
    }
    let [p, grad, s0, s1, master] = words;
    Ok([p, grad, s0, s1, master, optimizer_slot_meta(g.len(), decay, g.dtype() as u64)])
}

/// An optimizer's slot table and chunk list on the device, in one buffer (one upload), kept
/// between steps: the addresses only change when a parameter is copied on share or the context
/// changes.
struct DeviceTables {
    slots: Vec<[u64; OPTIMIZER_SLOT_WORDS]>,
    /// The slot words, then one u64 per block: its tensor's index in the low half, its unit
    /// (`optimizer_chunk_units`) in the high half (the kernels read it as two u32, little-endian).
    buffer: DeviceBuffer,
    blocks: usize,
}

impl std::fmt::Debug for DeviceTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceTables({} tensors, {} chunks)", self.slots.len(), self.blocks)
    }
}

/// `NotCapturable` for a step that cannot be replayed (`refuse`) while `ctx`'s stream is being
/// captured.
fn refuse_in_capture(ctx: &Context, refuse: bool, op: &'static str) -> Result<()> {
    match &ctx.backend {
        Backend::Cuda(stream) if refuse => stream.refuse_in_capture(op),
        _ => Ok(()),
    }
}

/// Make sure `cached` holds the tables of `slots` on `ctx`'s stream (uploading them when they
/// changed), then hand their addresses, with the launch shape, to `run` (not called for an empty
/// list).
fn launch_multi_tensor(
    op: &'static str,
    ctx: &Context,
    cached: &mut Option<DeviceTables>,
    slots: Vec<[u64; OPTIMIZER_SLOT_WORDS]>,
    run: impl FnOnce(LaunchConfig, DevPtr<u64>, DevPtr<u32>, &[Access]) -> Result<()>,
) -> Result<()> {
    let stream = ctx.stream(op)?;
    let fresh = cached.as_ref().is_some_and(|t| t.slots == slots && Arc::ptr_eq(t.buffer.stream(), stream));
    if !fresh {
        let lens: Vec<usize> =
            slots.iter().map(|s| optimizer_slot_parts(s[OPTIMIZER_SLOT_WORDS - 1]).0).collect();
        let pieces = lens.iter().sum::<usize>() <= OPTIMIZER_PIECES_MAX_TOTAL;
        let mut words: Vec<u64> = slots.iter().flatten().copied().collect();
        for (i, &len) in lens.iter().enumerate() {
            // An empty tensor still gets a (no-op) block, so every list of tensors has one.
            words.extend(optimizer_chunk_units(len, pieces).map(|u| i as u64 | (u as u64) << 32));
        }
        let blocks = words.len() - slots.len() * OPTIMIZER_SLOT_WORDS;
        if blocks > i32::MAX as usize
            || slots.len() > u32::MAX as usize
            || lens.iter().any(|&len| len / OPTIMIZER_BLOCK >= OPTIMIZER_PIECE_FLAG)
        {
            return Err(Error::InvalidArgument {
                op,
                shape: vec![blocks],
                reason: "too many parameters for one launch".into(),
            });
        }
        let buffer = stream.device.pool.alloc(stream, words.len() * 8, op)?;
        if blocks > 0 {
            // SAFETY: the fresh buffer of this stream holds exactly the words copied into it (see
            // `copy_htod` on pageable sources; u64 has no padding); later launches on this stream
            // are ordered after.
            unsafe { stream.copy_htod_const(buffer.ptr(), &words)? };
        }
        *cached = Some(DeviceTables { slots, buffer, blocks });
    }
    let tables = cached.as_ref().expect("filled above");
    if tables.blocks == 0 {
        return Ok(());
    }
    let table = tables.buffer.ptr();
    // Every address of the table, as written (the kernels write some of them): what a capture
    // orders the launch by.
    let reached: Vec<Access> = tables
        .slots
        .iter()
        .flat_map(|s| s[..OPTIMIZER_SLOT_WORDS - 1].iter())
        .filter(|&&addr| addr != 0)
        .map(|&addr| Access::written(addr))
        .collect();
    run(
        LaunchConfig {
            grid: (tables.blocks as u32, 1, 1),
            block: (OPTIMIZER_BLOCK as u32, 1, 1),
            shared_bytes: 0,
        },
        DevPtr::new(table),
        DevPtr::new(table + (tables.slots.len() * OPTIMIZER_SLOT_WORDS * 8) as u64),
        &reached,
    )
}

/// The global L2 norm of a list of gradients and the clip factor `min(1, max_norm / (norm +
/// 1e-6))`, kept on the device (a 2-element f32 tensor: norm, factor): made by
/// [`clip_grad_norm`], used by [`Optimizer::step_clipped`] and [`GradNorm::scale_grads`] without a
/// host round trip.
#[derive(Debug, Clone)]
pub struct GradNorm {
    values: Tensor,
}

impl GradNorm {
    /// The norm (waits for the work that computes it; refused during a capture).
    pub fn norm(&self) -> Result<f32> {
        Ok(self.values.to_vec()?[0])
    }
    /// The clip factor (waits, like [`GradNorm::norm`]).
    pub fn factor(&self) -> Result<f32> {
        Ok(self.values.to_vec()?[1])
    }
    /// The `[norm, factor]` tensor on the device.
    pub fn tensor(&self) -> &Tensor {
        &self.values
    }

    /// Multiply every gradient by the clip factor in place (rounded to its dtype), one launch:
    /// PyTorch's `clip_grad_norm_` after [`clip_grad_norm`]. Gradients shared with clones are
    /// copied first (the clones keep their values).
    pub fn scale_grads(&self, grads: &mut [&mut Tensor]) -> Result<()> {
        const OP: &str = "GradNorm::scale_grads";
        let ctx = self.values.context();
        for g in grads.iter_mut() {
            if !ctx.same_queue(g.context()) {
                return Err(ctx.mismatch(OP, g.context()));
            }
            g.make_unique()?;
        }
        match &ctx.backend {
            Backend::Cpu => {
                let factor = self.factor()?;
                for g in grads.iter_mut() {
                    let dtype = g.dtype();
                    for x in cpu_data(OP, g)? {
                        *x = dtype.round((*x * factor) as f64);
                    }
                }
                Ok(())
            }
            Backend::Cuda(stream) => {
                let slots = grads
                    .iter()
                    .map(|g| slot(OP, [0, g.device_ptr(), 0, 0, 0], g, false))
                    .collect::<Result<_>>()?;
                let norm = self.values.ptr::<f32>();
                launch_multi_tensor(OP, ctx, &mut None, slots, |cfg, table, chunks, reached| {
                    // SAFETY: `grad_scale(slots, chunks, norm)`: the table holds, per tensor, a
                    // uniquely owned gradient of the meta word's length and element type; the
                    // chunks cover each tensor once; `norm` is this 2-float tensor on this stream;
                    // `reached` lists the table's addresses.
                    unsafe {
                        kernels::grad_scale.launch_reaching(stream, cfg, (table, chunks, norm), reached)
                    }
                })
            }
        }
    }
}

/// The global L2 norm of `grads` (f32, f16 or bf16, one context) and the clip factor for
/// `max_norm` (> 0), on the device, in one launch: each block writes its chunk's sum of squares
/// (f32), the last block to finish folds them in a fixed order (bit-identical across runs) into
/// the norm and the factor. Nothing is read back: pass the result to [`Optimizer::step_clipped`] or
/// [`GradNorm::scale_grads`]; [`GradNorm::norm`] reads it for logging. Works inside a CUDA graph
/// capture. On the CPU backend the sum is accumulated in f64. (The slot table is uploaded at every
/// call; [`Adam::max_grad_norm`] reuses the optimizer's.)
pub fn clip_grad_norm(grads: &[&Tensor], max_norm: f32) -> Result<GradNorm> {
    const OP: &str = "clip_grad_norm";
    let Some(first) = grads.first() else {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: vec![],
            reason: "needs at least one gradient".into(),
        });
    };
    check_max_norm(OP, max_norm)?;
    let ctx = first.context();
    for g in grads {
        if !ctx.same_queue(g.context()) {
            return Err(ctx.mismatch(OP, g.context()));
        }
    }
    let Backend::Cuda(stream) = &ctx.backend else {
        let mut sum = 0.0f64;
        for g in grads {
            sum += g.to_vec()?.iter().map(|&x| x as f64 * x as f64).sum::<f64>();
        }
        let norm = sum.sqrt() as f32;
        let factor = max_norm / (norm + GRAD_NORM_EPS);
        let values = ctx.from_slice(&[norm, if factor > 1.0 { 1.0 } else { factor }], &[2])?;
        return Ok(GradNorm { values });
    };
    let slots =
        grads.iter().map(|g| slot(OP, [0, g.device_ptr(), 0, 0, 0], g, false)).collect::<Result<_>>()?;
    let mut values = None;
    launch_multi_tensor(OP, ctx, &mut None, slots, |cfg, table, chunks, reached| {
        values = Some(launch_grad_norm(OP, ctx, stream, cfg, (table, chunks, reached), max_norm)?);
        Ok(())
    })?;
    Ok(GradNorm { values: values.expect("every gradient list has a chunk") })
}

/// `InvalidArgument` unless `max_norm` > 0.
fn check_max_norm(op: &'static str, max_norm: f32) -> Result<()> {
    if max_norm.is_nan() || max_norm <= 0.0 {
        return Err(Error::InvalidArgument {
            op,
            shape: vec![],
            reason: format!("max_norm must be positive, got {max_norm}"),
        });
    }
    Ok(())
}

/// Queue `grad_norm` over the gradients (slot word 1) of a multi-tensor table; returns the
/// `[norm, factor]` tensor it writes.
fn launch_grad_norm(
    op: &'static str,
    ctx: &Context,
    stream: &Arc<Stream>,
    cfg: LaunchConfig,
    (table, chunks, reached): (DevPtr<u64>, DevPtr<u32>, &[Access]),
    max_norm: f32,
) -> Result<Tensor> {
    let partials = stream.device.pool.alloc(stream, cfg.grid.0 as usize * 4, op)?;
    let counter = DevPtrMut::<u32>::new(stream.reduce_counter()?);
    let values = Tensor::uninit(ctx, &[2], op)?;
    let args =
        (table, chunks, DevPtrMut::<f32>::new(partials.ptr()), counter, max_norm, values.ptr_mut::<f32>());
    // SAFETY: `grad_norm(slots, chunks, partials, counter, max_norm, out)`: the table holds, per
    // tensor, a gradient of the meta word's length and element type; the chunks cover each tensor
    // once, one block per chunk (`cfg` is the table's launch shape); `partials` holds a float per
    // block; `counter` is this stream's zeroed reduction counter (launches that write it are
    // ordered: on a stream by its order, in a capture by that write; every kernel using it leaves
    // it zero); `out` is the fresh 2-float tensor; `reached` lists the table's addresses.
    unsafe { kernels::grad_norm.launch_reaching(stream, cfg, args, reached)? };
    Ok(values)
}

/// A fused multi-tensor optimizer: one launch updates every parameter.
pub trait Optimizer {
    /// Update `params` in place from `grads` (one per parameter, same shapes and dtypes), each
    /// gradient multiplied by `clip`'s factor when given, in one launch.
    fn update_clipped(
        &mut self,
        params: &mut [&mut Tensor],
        grads: &[&Tensor],
        clip: Option<&GradNorm>,
    ) -> Result<()>;

    /// [`update_clipped`](Optimizer::update_clipped) without clipping.
    fn update(&mut self, params: &mut [&mut Tensor], grads: &[&Tensor]) -> Result<()> {
        self.update_clipped(params, grads, None)
    }

    /// [`update`](Optimizer::update) over owned tensors or references.
    fn step<P: AsMut<Tensor>, G: AsRef<Tensor>>(&mut self, params: &mut [P], grads: &[G]) -> Result<()>
    where
        Self: Sized,
    {
        let mut params: Vec<&mut Tensor> = params.iter_mut().map(AsMut::as_mut).collect();
        let grads: Vec<&Tensor> = grads.iter().map(AsRef::as_ref).collect();
        self.update_clipped(&mut params, &grads, None)
    }

    /// [`step`](Optimizer::step) with every gradient multiplied by the clip factor of `norm`
    /// ([`clip_grad_norm`] of these gradients) inside the fused kernel: the same update as
    /// [`GradNorm::scale_grads`] then [`step`](Optimizer::step), without writing the gradients.
    fn step_clipped<P: AsMut<Tensor>, G: AsRef<Tensor>>(
        &mut self,
        params: &mut [P],
        grads: &[G],
        norm: &GradNorm,
    ) -> Result<()>
    where
        Self: Sized,
    {
        let mut params: Vec<&mut Tensor> = params.iter_mut().map(AsMut::as_mut).collect();
        let grads: Vec<&Tensor> = grads.iter().map(AsRef::as_ref).collect();
        self.update_clipped(&mut params, &grads, Some(norm))
    }
}

/// The clip factor for a step: `None` without clipping, else checked to be on `ctx`'s queue.
fn clip_on(op: &'static str, ctx: &Context, clip: Option<&GradNorm>) -> Result<Option<Tensor>> {
    clip.map(|c| {
        let values = c.tensor();
        if !ctx.same_queue(values.context()) {
            return Err(ctx.mismatch(op, values.context()));
        }
        Ok(values.clone())
    })
    .transpose()
}

/// The host value of a clip factor (the CPU backend), 1 without clipping.
fn host_factor(clip: Option<&Tensor>) -> Result<f32> {
    clip.map_or(Ok(1.0), |c| Ok(c.to_vec()?[1]))
}

/// Stochastic gradient descent, PyTorch's semantics (dampening 0), f32 parameters (16-bit ones
/// are `UnsupportedDType`).
#[derive(Debug)]
pub struct Sgd {
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
    pub nesterov: bool,
    schedule: Option<LrSchedule>,
    steps: usize,
    buffers: Vec<Tensor>,
    tables: Option<DeviceTables>,
}

impl Sgd {
    pub fn new(lr: f32) -> Self {
        Sgd {
            lr,
            momentum: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            schedule: None,
            steps: 0,
            buffers: Vec::new(),
            tables: None,
        }
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
    /// Take each step's learning rate from `schedule` (by the count of steps taken), ignoring
    /// `lr`. Not capturable into a graph (the rate is a kernel argument).
    pub fn schedule(mut self, schedule: LrSchedule) -> Self {
        self.schedule = Some(schedule);
        self
    }
}

impl Optimizer for Sgd {
    fn update_clipped(
        &mut self,
        params: &mut [&mut Tensor],
        grads: &[&Tensor],
        clip: Option<&GradNorm>,
    ) -> Result<()> {
        const OP: &str = "sgd";
        let ctx = prepare(OP, params, grads, self.buffers.len(), false)?;
        for (p, b) in params.iter().zip(&self.buffers) {
            check_state(OP, p, b)?;
        }
        let clip = clip_on(OP, &ctx, clip)?;
        let first = self.buffers.is_empty();
        refuse_in_capture(
            &ctx,
            first && self.momentum != 0.0,
            "sgd (first step with momentum; take it before the capture)",
        )?;
        refuse_in_capture(&ctx, self.schedule.is_some(), "sgd (scheduled learning rate)")?;
        if first && self.momentum != 0.0 {
            self.buffers = params.iter().map(|p| ctx.zeros(p.shape())).collect::<Result<_>>()?;
        }
        let lr = self.schedule.map_or(self.lr, |s| s.lr_at(self.steps));
        let (momentum, wd) = (self.momentum, self.weight_decay);
        let stepped = match &ctx.backend {
            Backend::Cpu => {
                let factor = host_factor(clip.as_ref())?;
                for (i, (p, g)) in params.iter_mut().zip(grads).enumerate() {
                    let g = g.to_vec()?;
                    let mut buf = self.buffers.get_mut(i).map(|b| cpu_data(OP, b)).transpose()?;
                    let p = cpu_data(OP, p)?;
                    for (j, x) in p.iter_mut().enumerate() {
                        let mut d = (g[j] * factor) as f64 + wd as f64 * *x as f64;
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
                let slots = params
                    .iter()
                    .zip(grads)
                    .enumerate()
                    .map(|(i, (p, g))| {
                        let buf = self.buffers.get(i).map_or(0, Tensor::device_ptr);
                        slot(OP, [p.device_ptr(), g.device_ptr(), buf, 0, 0], g, true)
                    })
                    .collect::<Result<_>>()?;
                let (nesterov, first_step) = (u32::from(self.nesterov), u32::from(first));
                let clip = Tensor::ptr_or_null::<f32>(clip.as_ref());
                launch_multi_tensor(OP, &ctx, &mut self.tables, slots, |cfg, table, chunks, reached| {
                    // SAFETY: `sgd_step(slots, chunks, lr, momentum, weight_decay, nesterov,
                    // first_step, clip)`: the table holds, per tensor, a uniquely owned f32
                    // parameter, its gradient of the same length, a momentum buffer (or 0 without
                    // momentum) and the meta word; the chunks cover each tensor once; one block
                    // per chunk; `clip` is null or a 2-float tensor of this stream; `reached` lists
                    // the table's addresses.
                    let args = (table, chunks, lr, momentum, wd, nesterov, first_step, clip);
                    unsafe { kernels::sgd_step.launch_reaching(stream, cfg, args, reached) }
                })
            }
        };
        if stepped.is_ok() {
            self.steps += 1;
        }
        stepped
    }
}

/// Adam's state for one parameter: the moments, and the f32 master copy of a 16-bit parameter.
#[derive(Debug)]
struct AdamState {
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    master: Option<Tensor>,
    /// The parameter's dtype when the state was made.
    dtype: DType,
}

/// Adam with bias correction; AdamW when the weight decay is decoupled. f32, bf16 and f16
/// parameters (mixed precision: see the module documentation).
#[derive(Debug)]
pub struct Adam {
    pub lr: f32,
    pub betas: (f32, f32),
    pub eps: f32,
    pub weight_decay: f32,
    /// AdamW: decay the weights directly instead of adding `weight_decay·p` to the gradient.
    pub decoupled: bool,
    /// Weight decay only for parameters of rank ≥ 2 (not biases and norm gains).
    pub decay_matrices_only: bool,
    schedule: Option<LrSchedule>,
    state: Vec<AdamState>,
    steps: i32,
    tables: Option<DeviceTables>,
    /// The device-side step count of [`Adam::capturable`]: `[t, c1 bits, c2 bits, lr bits]` as
    /// u32 (in an f32 tensor of 4, zeroed by the first step).
    device_step: Option<Tensor>,
    /// [`Adam::capturable`]'s learning rates by step on the device, and the schedule they are of.
    lr_table: Option<(LrSchedule, Tensor)>,
    capturable: bool,
    /// [`Adam::max_grad_norm`], and the norm of the last step it clipped.
    max_grad_norm: Option<f32>,
    grad_norm: Option<GradNorm>,
}

impl Adam {
    pub fn new(lr: f32) -> Self {
        Adam {
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            decay_matrices_only: false,
            schedule: None,
            state: Vec::new(),
            steps: 0,
            tables: None,
            device_step: None,
            lr_table: None,
            capturable: false,
            max_grad_norm: None,
            grad_norm: None,
        }
    }
    /// Keep the step count (the bias correction and the scheduled learning rate) on the device,
    /// advanced by a kernel at each step, so that a step captured into a CUDA graph counts at
    /// every replay (PyTorch's `capturable=True`). Same results as the default, bit for bit; one
    /// extra tiny launch per step. No effect on the CPU backend. Set it before the first step.
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
    /// Weight decay for parameters of rank ≥ 2 only (PyTorch's parameter-group practice for
    /// transformers: no decay on biases and norm gains).
    pub fn decay_matrices_only(mut self, yes: bool) -> Self {
        self.decay_matrices_only = yes;
        self
    }
    /// Take each step's learning rate from `schedule` (by the count of steps taken; with
    /// [`Adam::capturable`], the count on the device), ignoring `lr`.
    pub fn schedule(mut self, schedule: LrSchedule) -> Self {
        self.schedule = Some(schedule);
        self
    }

    /// Clip the gradients to a global L2 norm of `max_norm` (> 0) inside every step: PyTorch's
    /// `clip_grad_norm_` then `step`, without writing the gradients. The norm is computed over the
    /// optimizer's own device tables (no upload once they are made) by one launch before the
    /// update (two in all, three with [`Adam::capturable`]); [`Adam::last_grad_norm`] has it. The
    /// same update as [`clip_grad_norm`] + [`Optimizer::step_clipped`], which it cannot be combined
    /// with (`InvalidArgument`).
    pub fn max_grad_norm(mut self, max_norm: f32) -> Self {
        self.max_grad_norm = Some(max_norm);
        self
    }

    /// The gradient norm and clip factor of the last step taken with [`Adam::max_grad_norm`], on
    /// the device (after graph replays: the latest replay's).
    pub fn last_grad_norm(&self) -> Option<&GradNorm> {
        self.grad_norm.as_ref()
    }

    /// Steps taken (read from the device for [`Adam::capturable`], whose graph replays count
    /// there; refused during a capture).
    pub fn steps(&self) -> Result<u32> {
        match &self.device_step {
            Some(d) => Ok(d.to_vec()?[0].to_bits()),
            None => Ok(self.steps as u32),
        }
    }

    /// The state for a checkpoint, as copies: `"{i}.exp_avg"`, `"{i}.exp_avg_sq"` (f32, the
    /// shape of parameter i), `"{i}.master"` (f32, for 16-bit parameters) and `"step"` (an f32
    /// scalar of shape `[]`, exact up to 2^24 steps). Empty before the first step.
    pub fn state_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        let Some(first) = self.state.first() else { return Ok(Vec::new()) };
        let mut out = Vec::with_capacity(3 * self.state.len() + 1);
        for (i, s) in self.state.iter().enumerate() {
            out.push((format!("{i}.exp_avg"), s.exp_avg.copy()?));
            out.push((format!("{i}.exp_avg_sq"), s.exp_avg_sq.copy()?));
            if let Some(master) = &s.master {
                out.push((format!("{i}.master"), master.copy()?));
            }
        }
        out.push(("step".into(), first.exp_avg.context().from_slice(&[self.steps()? as f32], &[])?));
        Ok(out)
    }

    /// Replace the state with `state` (as [`Adam::state_tensors`] names it) for `params`, the
    /// parameters the next steps will update: each tensor is checked against its parameter
    /// (`ShapeMismatch`, `DTypeMismatch`: moments and masters are f32; a master exactly for the
    /// 16-bit parameters), missing, unknown or repeated names and a step that is not a
    /// whole number ≥ 0 are `InvalidArgument`. The tensors are copied onto the parameters'
    /// context. Refused during a capture.
    pub fn load_state(&mut self, params: &[&Tensor], state: &[(String, Tensor)]) -> Result<()> {
        const OP: &str = "Adam::load_state";
        let invalid = |shape: Vec<usize>, reason: String| Error::InvalidArgument { op: OP, shape, reason };
        let Some(first) = params.first() else {
            return Err(invalid(vec![], "needs at least one parameter".into()));
        };
        let ctx = first.context();
        refuse_in_capture(ctx, true, OP)?;
        let mut named: HashMap<&str, &Tensor> = HashMap::new();
        for (name, t) in state {
            if named.insert(name, t).is_some() {
                return Err(invalid(t.shape().to_vec(), format!("`{name}` given twice")));
            }
        }
        let mut take = |name: String, p: &Tensor| -> Result<Tensor> {
            let t = named
                .remove(name.as_str())
                .ok_or_else(|| invalid(p.shape().to_vec(), format!("no `{name}`")))?;
            if t.shape() != p.shape() {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    lhs: p.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
            if t.dtype() != DType::F32 {
                return Err(Error::DTypeMismatch { op: OP, lhs: DType::F32, rhs: t.dtype() });
            }
            if ctx.same_queue(t.context()) {
                t.copy()
            } else {
                t.to_context(ctx)
            }
        };
        let mut loaded = Vec::with_capacity(params.len());
        for (i, p) in params.iter().enumerate() {
            if !ctx.same_queue(p.context()) {
                return Err(ctx.mismatch(OP, p.context()));
            }
            let exp_avg = take(format!("{i}.exp_avg"), p)?;
            let exp_avg_sq = take(format!("{i}.exp_avg_sq"), p)?;
            let master = match p.dtype() {
                DType::F32 => None,
                _ => Some(take(format!("{i}.master"), p)?),
            };
            loaded.push(AdamState { exp_avg, exp_avg_sq, master, dtype: p.dtype() });
        }
        let step = named.remove("step").ok_or_else(|| invalid(vec![], "no `step`".into()))?;
        if let Some(name) = named.keys().next() {
            return Err(invalid(
                vec![],
                format!("`{name}` is not a state of these {} parameters", params.len()),
            ));
        }
        if step.len() != 1 || step.dtype() != DType::F32 {
            return Err(invalid(
                step.shape().to_vec(),
                format!("`step` must be one f32, got {:?}", step.dtype()),
            ));
        }
        let t = step.to_vec()?[0];
        if !((0.0..=i32::MAX as f32).contains(&t) && t.fract() == 0.0) {
            return Err(invalid(vec![], format!("`step` must be a whole number ≥ 0, got {t}")));
        }
        let t = t as u32;
        self.device_step = match (self.capturable, ctx.is_cuda()) {
            (true, true) => Some(ctx.from_slice(&[f32::from_bits(t), 0.0, 0.0, 0.0], &[4])?),
            _ => None,
        };
        self.state = loaded;
        self.steps = t as i32;
        self.tables = None;
        Ok(())
    }

    /// The capturable step's learning-rate table on `ctx`, (re)made when the schedule changed.
    fn lr_table(&mut self, ctx: &Context) -> Result<&Tensor> {
        let schedule = self.schedule.unwrap_or(LrSchedule::Constant(self.lr));
        if self.lr_table.as_ref().is_none_or(|(s, t)| *s != schedule || !t.context().same_queue(ctx)) {
            if let LrSchedule::WarmupCosine { warmup, total, .. } = schedule {
                if warmup.max(total) > MAX_CAPTURABLE_SCHEDULE {
                    return Err(Error::InvalidArgument {
                        op: "adam",
                        shape: vec![warmup, total],
                        reason: format!(
                            "a capturable schedule keeps a rate per step on the device: at most {MAX_CAPTURABLE_SCHEDULE} steps"
                        ),
                    });
                }
            }
            let table = schedule.table();
            self.lr_table = Some((schedule, ctx.from_slice(&table, &[table.len()])?));
        }
        Ok(&self.lr_table.as_ref().expect("made above").1)
    }
}

impl Optimizer for Adam {
    fn update_clipped(
        &mut self,
        params: &mut [&mut Tensor],
        grads: &[&Tensor],
        clip: Option<&GradNorm>,
    ) -> Result<()> {
        const OP: &str = "adam";
        let ctx = prepare(OP, params, grads, self.state.len(), true)?;
        for (p, s) in params.iter().zip(&self.state) {
            if p.dtype() != s.dtype {
                return Err(Error::DTypeMismatch { op: OP, lhs: p.dtype(), rhs: s.dtype });
            }
            for t in [&s.exp_avg, &s.exp_avg_sq].into_iter().chain(&s.master) {
                check_state(OP, p, t)?;
            }
        }
        let clip = clip_on(OP, &ctx, clip)?;
        if let Some(max_norm) = self.max_grad_norm {
            check_max_norm(OP, max_norm)?;
            if clip.is_some() {
                return Err(Error::InvalidArgument {
                    op: OP,
                    shape: vec![],
                    reason: "step_clipped with a GradNorm on an optimizer that clips itself (max_grad_norm)"
                        .into(),
                });
            }
        }
        refuse_in_capture(&ctx, self.state.is_empty(), "adam (first step; take it before the capture)")?;
        refuse_in_capture(&ctx, !self.capturable, "adam (host-side step count; use Adam::capturable)")?;
        if self.state.is_empty() {
            self.state = params
                .iter()
                .map(|p| {
                    let master = match p.dtype() {
                        DType::F32 => None,
                        _ => Some(p.to_dtype(DType::F32)?),
                    };
                    let (exp_avg, exp_avg_sq) = (ctx.zeros(p.shape())?, ctx.zeros(p.shape())?);
                    Ok(AdamState { exp_avg, exp_avg_sq, master, dtype: p.dtype() })
                })
                .collect::<Result<_>>()?;
            if self.capturable && ctx.is_cuda() {
                self.device_step = Some(ctx.zeros(&[4])?);
            }
        }
        // Counted only once the step has happened: a failed launch must not shift the bias
        // correction of every later step.
        let steps = self.steps.checked_add(1).ok_or_else(|| Error::InvalidArgument {
            op: OP,
            shape: vec![],
            reason: "step counter overflow".into(),
        })?;
        let lr = self.schedule.map_or(self.lr, |s| s.lr_at(self.steps as usize));
        let ((b1, b2), eps, wd) = (self.betas, self.eps, self.weight_decay);
        let c1 = adam_bias_correction(b1, steps as u32);
        let c2 = adam_bias_correction(b2, steps as u32);
        let matrices_only = self.decay_matrices_only;
        let decays = move |p: &Tensor| !matrices_only || p.rank() >= 2;
        let max_grad_norm = self.max_grad_norm;
        let mut own_norm = None;
        let stepped = match &ctx.backend {
            Backend::Cpu => {
                own_norm = max_grad_norm.map(|m| clip_grad_norm(grads, m).map(|n| n.values)).transpose()?;
                let factor = host_factor(own_norm.as_ref().or(clip.as_ref()))?;
                for ((p, g), s) in params.iter_mut().zip(grads).zip(self.state.iter_mut()) {
                    let wd = if decays(p) { wd as f64 } else { 0.0 };
                    let (g, dtype) = (g.to_vec()?, p.dtype());
                    let (m, v) = (cpu_data(OP, &mut s.exp_avg)?, cpu_data(OP, &mut s.exp_avg_sq)?);
                    let mut master = s.master.as_mut().map(|t| cpu_data(OP, t)).transpose()?;
                    for (j, x) in cpu_data(OP, p)?.iter_mut().enumerate() {
                        let weight = master.as_deref().map_or(*x, |w| w[j]);
                        let (mut param, mut grad) = (weight as f64, (g[j] * factor) as f64);
                        if self.decoupled {
                            param *= 1.0 - lr as f64 * wd;
                        } else {
                            grad += wd * param;
                        }
                        let mj = b1 as f64 * m[j] as f64 + (1.0 - b1 as f64) * grad;
                        let vj = b2 as f64 * v[j] as f64 + (1.0 - b2 as f64) * grad * grad;
                        m[j] = mj as f32;
                        v[j] = vj as f32;
                        let updated =
                            (param - lr as f64 * (mj / c1) / ((vj / c2).sqrt() + eps as f64)) as f32;
                        match master.as_deref_mut() {
                            Some(w) => {
                                w[j] = updated;
                                *x = dtype.round(updated as f64);
                            }
                            None => *x = updated,
                        }
                    }
                }
                Ok(())
            }
            Backend::Cuda(stream) => {
                let slots = params
                    .iter()
                    .zip(grads)
                    .zip(&self.state)
                    .map(|((p, g), s)| {
                        let master = s.master.as_ref().map_or(0, Tensor::device_ptr);
                        let (m, v) = (s.exp_avg.device_ptr(), s.exp_avg_sq.device_ptr());
                        slot(OP, [p.device_ptr(), g.device_ptr(), m, v, master], g, decays(p))
                    })
                    .collect::<Result<_>>()?;
                let (c1, c2, decoupled) = (c1 as f32, c2 as f32, u32::from(self.decoupled));
                let clip = Tensor::ptr_or_null::<f32>(clip.as_ref());
                let lr_table = match self.device_step.is_some() {
                    true => Some(self.lr_table(&ctx)?.clone()),
                    false => None,
                };
                let device_step = self.device_step.as_ref();
                launch_multi_tensor(OP, &ctx, &mut self.tables, slots, |cfg, table, chunks, reached| {
                    let clip = match max_grad_norm {
                        Some(m) => own_norm
                            .insert(launch_grad_norm(OP, &ctx, stream, cfg, (table, chunks, reached), m)?)
                            .ptr(),
                        None => clip,
                    };
                    let (Some(step), Some(lrs)) = (device_step, lr_table) else {
                        // SAFETY: `adam_step(slots, chunks, lr, beta1, beta2, eps, weight_decay,
                        // c1, c2, decoupled, clip)`: the table holds, per tensor, a uniquely owned
                        // parameter, its gradient (same length and dtype), this optimizer's f32 m
                        // and v of that length, an f32 master of that length for a 16-bit
                        // parameter (checked against its dtype above), and the meta word; the
                        // chunks cover each tensor once; one block per chunk; `clip` is null or
                        // a 2-float tensor of this stream; `reached` lists the table's addresses.
                        let args = (table, chunks, lr, b1, b2, eps, wd, c1, c2, decoupled, clip);
                        return unsafe { kernels::adam_step.launch_reaching(stream, cfg, args, reached) };
                    };
                    let state = DevPtrMut::<u32>::new(step.device_ptr());
                    let lr_steps = lrs.len() as u32;
                    // SAFETY: `adam_advance(state, beta1, beta2, lrs, lr_steps)`: `state` is this
                    // optimizer's 4-word buffer (16 bytes, u32-aligned), `lrs` its table of
                    // `lr_steps` ≥ 1 floats (a schedule's table is short: `warmup.max(total) + 2`
                    // entries, far below u32::MAX for any table that fits in memory), any launch shape.
                    unsafe {
                        kernels::adam_advance.launch(
                            stream,
                            LaunchConfig::covering(1, 32),
                            (state, b1, b2, lrs.ptr::<f32>(), lr_steps),
                        )?
                    };
                    // SAFETY: `adam_step_dev(...)`: as `adam_step` above, with the bias
                    // corrections and the rate read from `state`, written by `adam_advance`
                    // queued before on this stream.
                    let args = (table, chunks, b1, b2, eps, wd, DevPtr::from(state), decoupled, clip);
                    unsafe { kernels::adam_step_dev.launch_reaching(stream, cfg, args, reached) }
                })
            }
        };
        if stepped.is_ok() {
            self.steps = steps;
            if let Some(values) = own_norm {
                self.grad_norm = Some(GradNorm { values });
            }
        }
        stepped
    }
}

#[cfg(test)]
mod tests {
    use crate::shapes::{optimizer_chunk_range, optimizer_chunk_units, OPTIMIZER_BLOCK, OPTIMIZER_CHUNK};

    #[test]
    fn chunk_units_cover_each_tensor_once() {
        for pieces in [false, true] {
            for len in [0, 1, 10, 255, 256, 257, 1280, 4095, 4096, 4097, 9610, 3 * 4096 + 4000, (1 << 20) + 3]
            {
                let ranges: Vec<_> =
                    optimizer_chunk_units(len, pieces).map(|u| optimizer_chunk_range(u, len)).collect();
                let size = if pieces { OPTIMIZER_BLOCK } else { OPTIMIZER_CHUNK };
                let mut next = 0;
                for &(start, end) in &ranges {
                    assert_eq!(start, next, "len {len}: {ranges:?}");
                    assert!(end - start <= size, "len {len}");
                    next = end;
                }
                assert_eq!(next, len, "len {len}");
                assert_eq!(ranges.len(), len.div_ceil(size).max(1), "len {len}");
            }
        }
    }
}
