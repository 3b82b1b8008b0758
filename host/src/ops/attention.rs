//! Attention: [`attention`] (forward) and [`attention_backward`], exact
//! `softmax(Q Kᵀ · scale) V` without ever writing the Sq × Sk score matrix. Kernels:
//! `gpu-kernels/src/attention/`.
//!
//! Layout (contiguous, row-major): q `[B, Hq, Sq, D]`, k and v `[B, Hkv, Sk, D]`, out like q,
//! lse f32 `[B, Hq, Sq]`. `Hkv` divides `Hq` (grouped-query / multi-query attention: query head
//! `h` reads kv head `h / (Hq / Hkv)`). Inputs are f16 or bf16 (all of one dtype), accumulation
//! is f32, outputs are in the input dtype. Head dims 32, 64, 96, 128 and 256 (256 runs in two
//! passes over the output columns). Under `causal`, query `i` sees key `j` iff
//! `j ≤ i + Sk − Sq` (the mask aligned to the bottom right, as FlashAttention-2); a row that sees
//! no key (only when Sq > Sk) gets output 0 and log-sum-exp +∞.
//!
//! [`attention_qkv_packed`] and its backward take self-attention's q, k and v where a fused QKV
//! projection leaves them (token-major `[B, S, Hq + 2·Hkv, D]`) and give the output token-major
//! `[B, S, Hq, D]` (the output projection's input) and dQKV like the input: the Hopper kernels
//! read and write heads through strided 4-D tensor maps and addresses (`Heads`), so a layer
//! needs no copies between its projections and attention.
//!
//! The CPU twin computes in f64 (softmax and both products) and rounds once to the dtype; it is
//! the tests' oracle. The GPU backward is deterministic in every mode: dQ and dK/dV come from two
//! kernels that each sum in a fixed order (no atomics), see `backward.rs`; where the sm_90a
//! modules are loaded (compute capability 9.0, `FERROCUDA_DISABLE_SM90A` unset) the backward at
//! D = 64 and 128 runs the `wgmma` kernels of `backward_wgmma.rs`, with the same contract.
use crate::kernels;
use crate::ops::matmul::{tensor_map_tiled, tensor_maps};
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{DevPtr, DevPtrMut, Kernel};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::stream::Stream;
use crate::shapes::{
    attn_dkdv_shared_bytes, attn_dq_shared_bytes, attn_fwd_rows, attn_fwd_shared_bytes,
    attn_wg_bwd_shared_bytes, attn_wg_padded_rows, attn_wgmma_shared_bytes, TensorMaps, ATTN_AUX_BLOCK,
    ATTN_BLOCK_M, ATTN_BLOCK_N, ATTN_MAX_OUT_COLS, ATTN_THREADS, ATTN_WGMMA_BLOCK_M, ATTN_WGMMA_BLOCK_N,
    ATTN_WGMMA_THREADS, ATTN_WG_CONSUMERS, ATTN_WG_ROWS, ATTN_WG_THREADS,
};
use crate::tensor::{DType, Storage, Tensor};
use cudarc::driver::sys;
use rayon::prelude::*;
use std::sync::Arc;

/// Options of [`attention`] and [`attention_backward`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttentionParams {
    /// Mask keys after the (bottom-right aligned) diagonal.
    pub causal: bool,
    /// The softmax scale; `None` is 1/√D.
    pub scale: Option<f32>,
    /// Ask for a backward pass whose result does not depend on scheduling. The current kernels
    /// are deterministic whatever this says (they use no atomics); the flag is kept so that a
    /// faster atomic dQ can be added without changing what callers who need it get.
    pub deterministic: bool,
}

impl AttentionParams {
    pub fn causal(mut self, yes: bool) -> Self {
        self.causal = yes;
        self
    }
    pub fn scale(mut self, scale: f32) -> Self {
        self.scale = Some(scale);
        self
    }
    pub fn deterministic(mut self, yes: bool) -> Self {
        self.deterministic = yes;
        self
    }
}

/// Head dims with kernels, in the order of the kernel tables.
const HEAD_DIMS: [usize; 5] = [32, 64, 96, 128, 256];

/// Sizes of one attention call after validation.
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    sk: usize,
    d: usize,
}

impl Dims {
    fn scale(&self, params: &AttentionParams) -> f32 {
        params.scale.unwrap_or(1.0 / (self.d as f32).sqrt())
    }
    fn group(&self) -> usize {
        self.hq / self.hkv
    }
    /// Passes over the output columns (head dims above `ATTN_MAX_OUT_COLS`).
    fn passes(&self) -> usize {
        self.d.div_ceil(ATTN_MAX_OUT_COLS)
    }
    fn d_index(&self) -> usize {
        HEAD_DIMS.iter().position(|&x| x == self.d).expect("checked by dims()")
    }
    fn lse_shape(&self) -> [usize; 3] {
        [self.b, self.hq, self.sq]
    }
}

/// Check q, k, v (dtype, ranks, shapes, head counts, head dim) and return their sizes.
fn dims(op: &'static str, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Dims> {
    q.check_peer(op, k)?;
    q.check_peer(op, v)?;
    if !matches!(q.dtype(), DType::F16 | DType::BF16) {
        return Err(Error::UnsupportedDType { op, dtype: q.dtype() });
    }
    let rank4 = |t: &Tensor, what: &str| -> Result<[usize; 4]> {
        <[usize; 4]>::try_from(t.shape()).map_err(|_| Error::InvalidArgument {
            op,
            shape: t.shape().to_vec(),
            reason: format!("{what} must be [batch, heads, seq, head_dim]"),
        })
    };
    let [b, hq, sq, d] = rank4(q, "q")?;
    let [bk, hkv, sk, dk] = rank4(k, "k")?;
    if k.shape() != v.shape() {
        return Err(Error::ShapeMismatch { op, lhs: k.shape().to_vec(), rhs: v.shape().to_vec() });
    }
    if bk != b || dk != d {
        return Err(Error::ShapeMismatch { op, lhs: q.shape().to_vec(), rhs: k.shape().to_vec() });
    }
    if hkv == 0 || hq % hkv != 0 {
        return Err(Error::InvalidArgument {
            op,
            shape: vec![hq, hkv],
            reason: format!("the kv heads ({hkv}) must divide the query heads ({hq})"),
        });
    }
    if !HEAD_DIMS.contains(&d) {
        return Err(Error::InvalidArgument {
            op,
            shape: q.shape().to_vec(),
            reason: format!("head dim {d} is not supported (one of {HEAD_DIMS:?})"),
        });
    }
    Ok(Dims { b, hq, hkv, sq, sk, d })
}

/// `softmax(q kᵀ · scale) v` and the per-row log-sum-exp (natural log, f32 `[B, Hq, Sq]`) that
/// [`attention_backward`] needs; see the module documentation for layouts and dtypes.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, params: AttentionParams) -> Result<(Tensor, Tensor)> {
    const OP: &str = "attention";
    let d = dims(OP, q, k, v)?;
    let ctx = q.context();
    match q.storage() {
        Storage::Cpu(_) => cpu_forward(d, q, k, v, &params),
        Storage::Cuda(_) => {
            let out = Tensor::uninit_as(ctx, q.shape(), q.dtype(), OP)?;
            let lse = Tensor::uninit(ctx, &d.lse_shape(), OP)?;
            if out.is_empty() {
                return Ok((out, lse));
            }
            if d.sk == 0 {
                return Ok((
                    ctx.full_as(q.shape(), 0.0, q.dtype())?,
                    ctx.full(&d.lse_shape(), f32::INFINITY)?,
                ));
            }
            let stream = ctx.stream(OP)?;
            let views = (Heads::head_major(q), Heads::head_major(k), Heads::head_major(v));
            if uses_wgmma_forward(stream, &d, views, &params) {
                forward_wgmma(stream, d, views, (Heads::head_major(&out), &lse), &params)?;
                return Ok((out, lse));
            }
            let cfg = block_grid(OP, &d, d.sq.div_ceil(attn_fwd_rows(d.d)), attn_fwd_shared_bytes(d.d))?;
            let kernel = FWD_KERNELS[q.dtype().index() - 1][d.d_index()];
            let scale_log2 = d.scale(&params) * std::f32::consts::LOG2_E;
            let causal = u32::from(params.causal);
            // SAFETY: `attention_fwd_<dtype>_d<D>(q, k, v, out, lse, sq, sk, hq, hkv, scale_log2,
            // causal)`: q, k, v are live buffers of this stream whose shapes `dims()` checked
            // ([B, Hq, Sq, D], [B, Hkv, Sk, D], Hkv dividing Hq, D the kernel's), out and lse are
            // fresh buffers of [B, Hq, Sq, D] and [B, Hq, Sq]; block, grid (z = B · passes) and
            // dynamic shared memory are the kernel's; Sq, Sk > 0.
            let args = (
                q.ptr(),
                k.ptr(),
                v.ptr(),
                out.ptr_mut(),
                lse.ptr_mut(),
                d.sq,
                d.sk,
                d.hq,
                d.hkv,
                scale_log2,
                causal,
            );
            unsafe { kernel.launch(stream, cfg, args)? };
            Ok((out, lse))
        }
    }
}

/// Whether the forward runs on the Hopper kernels (`forward_wgmma.rs`): the sm_90a module is
/// loaded, D is 64 or 128, the softmax scale is positive (the kernel folds it into the
/// exponent after taking the row maxima of the raw scores), TMA can read q, k and v (16-byte
/// aligned) and the lengths fit the kernel's 32-bit row and key indices (TMA coordinates are
/// 32-bit too).
fn uses_wgmma_forward(
    stream: &Stream,
    d: &Dims,
    views: (Heads, Heads, Heads),
    params: &AttentionParams,
) -> bool {
    let scale = d.scale(params);
    stream.device.modules.sm90a
        && matches!(d.d, 64 | 128)
        && scale > 0.0
        && scale.is_finite()
        && [views.0, views.1, views.2].iter().all(|t| t.address() % 16 == 0)
        && d.sq.max(d.sk) < i32::MAX as usize / 2
}

/// Where a 16-bit tensor's heads lie for the Hopper kernels, in elements: the strides between
/// consecutive rows, heads and batches (the kernels' `HeadStrides`; TMA's map strides) and the
/// offset of the first head.
#[derive(Clone, Copy, Debug)]
struct HeadLayout {
    row: usize,
    head: usize,
    batch: usize,
    first: usize,
}

/// `heads` heads of `seq` rows of D values in `t`, placed as `at` says.
#[derive(Clone, Copy)]
struct Heads<'a> {
    t: &'a Tensor,
    at: HeadLayout,
    heads: usize,
    seq: usize,
}

impl<'a> Heads<'a> {
    /// A head-major `[B, H, S, D]` tensor, the layout of [`attention`]'s.
    fn head_major(t: &'a Tensor) -> Self {
        let (h, s, d) = (t.shape()[1], t.shape()[2], t.shape()[3]);
        let at = HeadLayout { row: d, head: s * d, batch: h * s * d, first: 0 };
        Heads { t, at, heads: h, seq: s }
    }

    /// Heads `h0..h0 + h` of a token-major `[B, S, Htot, D]` tensor (a projection's output).
    fn token_major(t: &'a Tensor, (h0, h): (usize, usize)) -> Self {
        let (s, htot, d) = (t.shape()[1], t.shape()[2], t.shape()[3]);
        let at = HeadLayout { row: htot * d, head: d, batch: s * htot * d, first: h0 * d };
        Heads { t, at, heads: h, seq: s }
    }

    /// The device address of the first head's first row.
    fn address(&self) -> u64 {
        self.t.device_ptr() + (self.at.first * self.t.dtype().size_bytes()) as u64
    }

    fn ptr(&self) -> DevPtr<u16> {
        self.t.ptr::<u16>().offset(self.at.first)
    }

    fn ptr_mut(&self) -> DevPtrMut<u16> {
        self.t.ptr_mut::<u16>().offset(self.at.first)
    }

    /// The kernels' `HeadStrides`: (row, head, batch).
    fn strides(&self) -> (usize, usize, usize) {
        (self.at.row, self.at.head, self.at.batch)
    }

    /// Whether the heads and batches collapse into one dimension (a head-major tensor's do).
    fn flat(&self) -> bool {
        self.at.batch == self.heads * self.at.head
    }

    /// A TMA map of `batch` batches, boxes of 64 columns × `rows` rows, 128-byte swizzle: 3-D (D,
    /// rows, batches · heads) with `flat` (which `Heads::flat` must allow), else 4-D (D, rows,
    /// heads, batches); the kernels' `load_head_box` reads either.
    fn map(&self, (batch, d): (usize, usize), rows: usize, flat: bool) -> Result<sys::CUtensorMap> {
        let size = self.t.dtype().size_bytes() as u64;
        let (row, head, batch_stride) = self.strides();
        if flat {
            return tensor_map_tiled(
                self.t.dtype(),
                self.address(),
                &[d as u64, self.seq as u64, (self.heads * batch) as u64],
                &[row as u64 * size, head as u64 * size],
                &[64, rows as u32, 1],
            );
        }
        tensor_map_tiled(
            self.t.dtype(),
            self.address(),
            &[d as u64, self.seq as u64, self.heads as u64, batch as u64],
            &[row as u64 * size, head as u64 * size, batch_stride as u64 * size],
            &[64, rows as u32, 1, 1],
        )
    }
}

/// The Hopper forward: q's, k's and v's tensor maps, then the launch.
fn forward_wgmma(
    stream: &Arc<Stream>,
    d: Dims,
    (q, k, v): (Heads, Heads, Heads),
    (out, lse): (Heads, &Tensor),
    params: &AttentionParams,
) -> Result<()> {
    const OP: &str = "attention";
    let dtype = q.t.dtype();
    let flat = [q, k, v].iter().all(Heads::flat);
    let map_q = q.map((d.b, d.d), ATTN_WGMMA_BLOCK_M, flat)?;
    let map_k = k.map((d.b, d.d), ATTN_WGMMA_BLOCK_N, flat)?;
    let map_v = v.map((d.b, d.d), ATTN_WGMMA_BLOCK_N, flat)?;
    let mut cfg = block_grid(OP, &d, d.sq.div_ceil(ATTN_WGMMA_BLOCK_M), attn_wgmma_shared_bytes(d.d))?;
    cfg.block = (ATTN_WGMMA_THREADS as u32, 1, 1);
    let kernel = FWD_WGMMA_KERNELS[dtype.index() - 1][usize::from(d.d == 128)];
    let scale_log2 = d.scale(params) * std::f32::consts::LOG2_E;
    let (row, head, batch) = out.strides();
    let args = (
        tensor_maps(&[map_q, map_k, map_v]),
        out.ptr_mut(),
        row,
        head,
        batch,
        lse.ptr_mut(),
        d.sq,
        d.sk,
        d.hq,
        d.hkv,
        scale_log2,
        u32::from(params.causal),
        u32::from(flat),
    );
    // SAFETY: `attention_fwd_wgmma_<dtype>_d<D>(maps, out, out_row, out_head, out_batch, lse, sq,
    // sk, hq, hkv, scale_log2, causal, flat)`: `maps` holds the tensor maps (3-D where `flat`,
    // else 4-D) of q (Hq heads of Sq rows), k and v (Hkv heads of Sk rows) over B batches, made
    // above for their live, 16-byte aligned buffers from views whose shapes the caller checked (Hkv dividing Hq, D the
    // kernel's); `out` with its strides places B·Hq·Sq rows of D inside a fresh (or the caller's
    // unshared) buffer of the dtype, lse is a fresh f32 [B, Hq, Sq]; block, grid (B ≤ 65535
    // checked by `block_grid`) and dynamic shared memory are the kernel's; Sq, Sk > 0;
    // scale_log2 > 0. The maps travel by value in the launch's parameters, which the launch
    // copies.
    unsafe { kernel.launch(stream, cfg, args) }
}

/// The gradients `(dq, dk, dv)` of [`attention`] from `dout` (like `out`), the forward's `out`
/// and `lse`, and the same `params`.
pub fn attention_backward(
    dout: &Tensor,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    out: &Tensor,
    lse: &Tensor,
    params: AttentionParams,
) -> Result<(Tensor, Tensor, Tensor)> {
    const OP: &str = "attention_backward";
    let d = dims(OP, q, k, v)?;
    q.check_pair(OP, dout)?;
    q.check_pair(OP, out)?;
    if !q.context().same_queue(lse.context()) {
        return Err(q.context().mismatch(OP, lse.context()));
    }
    if lse.dtype() != DType::F32 {
        return Err(Error::DTypeMismatch { op: OP, lhs: lse.dtype(), rhs: DType::F32 });
    }
    if lse.shape() != d.lse_shape() {
        return Err(Error::ShapeMismatch { op: OP, lhs: lse.shape().to_vec(), rhs: d.lse_shape().to_vec() });
    }
    let ctx = q.context();
    match q.storage() {
        Storage::Cpu(_) => cpu_backward(d, (dout, q, k, v, out, lse), &params),
        Storage::Cuda(_) => {
            let dtype = q.dtype();
            if d.b * d.hq == 0 || d.sq == 0 || d.sk == 0 {
                return Ok((
                    ctx.full_as(q.shape(), 0.0, dtype)?,
                    ctx.full_as(k.shape(), 0.0, dtype)?,
                    ctx.full_as(v.shape(), 0.0, dtype)?,
                ));
            }
            let stream = ctx.stream(OP)?;
            gpu_backward(stream, d, (dout, q, k, v, out, lse), &params)
        }
    }
}

/// Check a packed projection output `qkv` `[B, S, Hq + 2·Hkv, D]` for [`attention_qkv_packed`]
/// and return its sizes (self-attention: Sq = Sk = S).
fn packed_dims(op: &'static str, qkv: &Tensor, (hq, hkv): (usize, usize)) -> Result<Dims> {
    if !matches!(qkv.dtype(), DType::F16 | DType::BF16) {
        return Err(Error::UnsupportedDType { op, dtype: qkv.dtype() });
    }
    let bad = |reason: String| Error::InvalidArgument { op, shape: qkv.shape().to_vec(), reason };
    let &[b, s, htot, d] = qkv.shape() else {
        return Err(bad("qkv must be [batch, seq, q_heads + 2·kv_heads, head_dim]".into()));
    };
    if hkv == 0 || hq % hkv != 0 {
        return Err(bad(format!("the kv heads ({hkv}) must divide the query heads ({hq})")));
    }
    if htot != hq + 2 * hkv {
        return Err(bad(format!("{htot} heads in qkv, not {hq} query + 2 × {hkv} kv heads")));
    }
    if !HEAD_DIMS.contains(&d) {
        return Err(bad(format!("head dim {d} is not supported (one of {HEAD_DIMS:?})")));
    }
    Ok(Dims { b, hq, hkv, sq: s, sk: s, d })
}

/// The heads `(first, count)` of q, k and v in a packed projection output: the query heads, then
/// the key heads, then the value heads.
fn qkv_heads((hq, hkv): (usize, usize)) -> [(usize, usize); 3] {
    [(0, hq), (hq, hkv), (hq + hkv, hkv)]
}

/// q, k and v of a packed projection output, each copied to [`attention`]'s head-major layout
/// (the path off the Hopper kernels).
fn split_heads(qkv: &Tensor, heads: (usize, usize)) -> Result<(Tensor, Tensor, Tensor)> {
    let [q, k, v] = qkv_heads(heads);
    Ok((to_heads(qkv, q)?, to_heads(qkv, k)?, to_heads(qkv, v)?))
}

/// Self-attention over the output of a fused QKV projection, read where it lies: `qkv` is
/// token-major `[B, S, Hq + 2·Hkv, D]` (the query heads, then the key heads, then the value
/// heads: `x · Wqkvᵀ` reshaped), the output token-major `[B, S, Hq, D]` (the output projection's
/// input as `[B·S, Hq·D]`), the log-sum-exp f32 `[B, Hq, S]`. The math, dtypes, head dims and
/// options are [`attention`]'s (Sq = Sk = S). The Hopper kernels (D = 64 or 128) read q, k and v
/// from `qkv` and write the output in place through strided tensor maps and addresses; elsewhere
/// the heads are copied to and from [`attention`]'s head-major layout.
pub fn attention_qkv_packed(
    qkv: &Tensor,
    (hq, hkv): (usize, usize),
    params: AttentionParams,
) -> Result<(Tensor, Tensor)> {
    const OP: &str = "attention_qkv_packed";
    let d = packed_dims(OP, qkv, (hq, hkv))?;
    let ctx = qkv.context();
    let out_shape = [d.b, d.sq, hq, d.d];
    if matches!(qkv.storage(), Storage::Cuda(_)) && d.b * hq * d.sq > 0 {
        let stream = ctx.stream(OP)?;
        let [q, k, v] = qkv_heads((hq, hkv)).map(|h| Heads::token_major(qkv, h));
        let views = (q, k, v);
        if uses_wgmma_forward(stream, &d, views, &params) {
            let out = Tensor::uninit_as(ctx, &out_shape, qkv.dtype(), OP)?;
            let lse = Tensor::uninit(ctx, &d.lse_shape(), OP)?;
            forward_wgmma(stream, d, views, (Heads::token_major(&out, (0, hq)), &lse), &params)?;
            return Ok((out, lse));
        }
    }
    let (q, k, v) = split_heads(qkv, (hq, hkv))?;
    let (heads_out, lse) = attention(&q, &k, &v, params)?;
    // Every head of `out` is written by `from_heads`.
    let mut out = Tensor::uninit_as(ctx, &out_shape, qkv.dtype(), OP)?;
    from_heads(&heads_out, &mut out, 0)?;
    Ok((out, lse))
}

/// The gradient of [`attention_qkv_packed`]'s `qkv` (a tensor like it) from `dout` (like `out`),
/// the forward's `qkv`, `out` and `lse`, and the same heads and `params`. The Hopper kernels
/// write dQ, dK and dV into their heads of the result directly.
pub fn attention_qkv_packed_backward(
    dout: &Tensor,
    qkv: &Tensor,
    out: &Tensor,
    lse: &Tensor,
    (hq, hkv): (usize, usize),
    params: AttentionParams,
) -> Result<Tensor> {
    const OP: &str = "attention_qkv_packed_backward";
    let d = packed_dims(OP, qkv, (hq, hkv))?;
    let out_shape = [d.b, d.sq, hq, d.d];
    for t in [dout, out] {
        qkv.check_peer(OP, t)?;
        if t.shape() != out_shape {
            return Err(Error::ShapeMismatch { op: OP, lhs: t.shape().to_vec(), rhs: out_shape.to_vec() });
        }
    }
    if !qkv.context().same_queue(lse.context()) {
        return Err(qkv.context().mismatch(OP, lse.context()));
    }
    if lse.dtype() != DType::F32 {
        return Err(Error::DTypeMismatch { op: OP, lhs: lse.dtype(), rhs: DType::F32 });
    }
    if lse.shape() != d.lse_shape() {
        return Err(Error::ShapeMismatch { op: OP, lhs: lse.shape().to_vec(), rhs: d.lse_shape().to_vec() });
    }
    let ctx = qkv.context();
    let dtype = qkv.dtype();
    let aligned = [qkv, dout, out].iter().all(|t| t.device_ptr() % 16 == 0);
    if matches!(qkv.storage(), Storage::Cuda(_)) && d.b * hq * d.sq > 0 && aligned {
        let stream = ctx.stream(OP)?;
        if stream.device.modules.sm90a && matches!(d.d, 64 | 128) {
            // Every head of `dqkv` is written: dQ, dK and dV by the kernels, or dK and dV of
            // grouped heads by `from_heads`.
            let mut dqkv = Tensor::uninit_as(ctx, qkv.shape(), dtype, OP)?;
            let tm = Heads::token_major;
            let heads = qkv_heads((hq, hkv));
            let [q, k, v] = heads.map(|h| tm(qkv, h));
            let inputs = (tm(dout, (0, hq)), q, k, v, tm(out, (0, hq)), lse);
            if d.group() == 1 {
                let [dq, dk, dv] = heads.map(|h| tm(&dqkv, h));
                gpu_backward_wgmma(stream, d, inputs, (dq, dk, dv), &params)?;
            } else {
                // Grouped kv heads: dK and dV are sums over query heads into head-major tensors.
                let kv_shape = [d.b, hkv, d.sk, d.d];
                let (dk, dv) = (
                    Tensor::uninit_as(ctx, &kv_shape, dtype, OP)?,
                    Tensor::uninit_as(ctx, &kv_shape, dtype, OP)?,
                );
                let grads = (tm(&dqkv, heads[0]), Heads::head_major(&dk), Heads::head_major(&dv));
                gpu_backward_wgmma(stream, d, inputs, grads, &params)?;
                from_heads(&dk, &mut dqkv, heads[1].0)?;
                from_heads(&dv, &mut dqkv, heads[2].0)?;
            }
            return Ok(dqkv);
        }
    }
    let (q, k, v) = split_heads(qkv, (hq, hkv))?;
    let (heads_dout, heads_out) = (to_heads(dout, (0, hq))?, to_heads(out, (0, hq))?);
    let (dq, dk, dv) = attention_backward(&heads_dout, &q, &k, &v, &heads_out, lse, params)?;
    // Every head of `dqkv` is written by `from_heads`.
    let mut dqkv = Tensor::uninit_as(ctx, qkv.shape(), dtype, OP)?;
    for (grad, (first, _)) in [dq, dk, dv].iter().zip(qkv_heads((hq, hkv))) {
        from_heads(grad, &mut dqkv, first)?;
    }
    Ok(dqkv)
}

/// Grid `(tiles, Hq, B · passes)` of 128-thread blocks with `shared` bytes.
fn block_grid(op: &'static str, d: &Dims, tiles: usize, shared: usize) -> Result<LaunchConfig> {
    let z = d.b * d.passes();
    if d.hq > 65_535 || z > 65_535 || tiles > i32::MAX as usize {
        return Err(Error::InvalidArgument {
            op,
            shape: vec![d.b, d.hq, d.sq, d.sk, d.d],
            reason: "too many heads, batches or rows for one launch".into(),
        });
    }
    Ok(LaunchConfig {
        grid: (tiles as u32, d.hq as u32, z as u32),
        block: (ATTN_THREADS as u32, 1, 1),
        shared_bytes: shared as u32,
    })
}

fn gpu_backward(
    stream: &Arc<Stream>,
    d: Dims,
    (dout, q, k, v, out, lse): (&Tensor, &Tensor, &Tensor, &Tensor, &Tensor, &Tensor),
    params: &AttentionParams,
) -> Result<(Tensor, Tensor, Tensor)> {
    const OP: &str = "attention_backward";
    let ctx = q.context();
    let dtype = q.dtype();
    if stream.device.modules.sm90a && matches!(d.d, 64 | 128) {
        let (dq, dk, dv) = (
            Tensor::uninit_as(ctx, q.shape(), dtype, OP)?,
            Tensor::uninit_as(ctx, k.shape(), dtype, OP)?,
            Tensor::uninit_as(ctx, v.shape(), dtype, OP)?,
        );
        let hm = Heads::head_major;
        let inputs = (hm(dout), hm(q), hm(k), hm(v), hm(out), lse);
        gpu_backward_wgmma(stream, d, inputs, (hm(&dq), hm(&dk), hm(&dv)), params)?;
        return Ok((dq, dk, dv));
    }
    let di = dtype.index() - 1;
    let rows = d.b * d.hq * d.sq;
    let delta = Tensor::uninit(ctx, &d.lse_shape(), OP)?;
    let dq = Tensor::uninit_as(ctx, q.shape(), dtype, OP)?;
    let part_shape = [d.b, d.hq, d.sk, d.d];
    let (dk_part, dv_part) = (Tensor::uninit(ctx, &part_shape, OP)?, Tensor::uninit(ctx, &part_shape, OP)?);
    let (dk, dv) =
        (Tensor::uninit_as(ctx, k.shape(), dtype, OP)?, Tensor::uninit_as(ctx, v.shape(), dtype, OP)?);
    let scale = d.scale(params);
    let scale_log2 = scale * std::f32::consts::LOG2_E;
    let causal = u32::from(params.causal);

    let cfg = LaunchConfig::grid_stride(&stream.device.info, rows * 32, ATTN_AUX_BLOCK, 4);
    // SAFETY: `attention_bwd_dot_<dtype>(dout, out, delta, rows, d)`: dout and out hold `rows`
    // rows of D elements of the dtype (checked against q), delta is a fresh f32 buffer of `rows`;
    // any 1-D grid of whole warps is valid (the block is 256 threads).
    unsafe { DOT_KERNELS[di].launch(stream, cfg, (dout.ptr(), out.ptr(), delta.ptr_mut(), rows, d.d))? };

    let cfg = block_grid(OP, &d, d.sq.div_ceil(ATTN_BLOCK_M), attn_dq_shared_bytes(d.d))?;
    // SAFETY: `attention_bwd_dq_<dtype>_d<D>(q, k, v, dout, lse, delta, dq, sq, sk, hq, hkv,
    // scale, scale_log2, causal)`: q, dout and the fresh dq are [B, Hq, Sq, D], k and v
    // [B, Hkv, Sk, D], lse and delta f32 [B, Hq, Sq], all checked live buffers of this stream;
    // block, grid and shared memory are the kernel's; Sq, Sk > 0.
    let args = (
        q.ptr(),
        k.ptr(),
        v.ptr(),
        dout.ptr(),
        lse.ptr(),
        delta.ptr(),
        dq.ptr_mut(),
        d.sq,
        d.sk,
        d.hq,
        d.hkv,
        scale,
        scale_log2,
        causal,
    );
    unsafe { DQ_KERNELS[di][d.d_index()].launch(stream, cfg, args)? };

    let cfg = block_grid(OP, &d, d.sk.div_ceil(ATTN_BLOCK_N), attn_dkdv_shared_bytes(d.d))?;
    // SAFETY: `attention_bwd_dkdv_<dtype>_d<D>(q, k, v, dout, lse, delta, dk, dv, sq, sk, hq, hkv,
    // scale, scale_log2, causal)`: as the dQ launch, with dk and dv fresh f32 [B, Hq, Sk, D]
    // buffers; block, grid and shared memory are the kernel's.
    let args = (
        q.ptr(),
        k.ptr(),
        v.ptr(),
        dout.ptr(),
        lse.ptr(),
        delta.ptr(),
        dk_part.ptr_mut(),
        dv_part.ptr_mut(),
        d.sq,
        d.sk,
        d.hq,
        d.hkv,
        scale,
        scale_log2,
        causal,
    );
    unsafe { DKDV_KERNELS[di][d.d_index()].launch(stream, cfg, args)? };

    sum_heads(stream, &d, [&dk_part, &dv_part], [&dk, &dv])?;
    Ok((dq, dk, dv))
}

/// dK and dV of each kv head from the f32 per-query-head parts `[B, Hq, Sk, D]`, in the dtype.
fn sum_heads(stream: &Arc<Stream>, d: &Dims, parts: [&Tensor; 2], grads: [&Tensor; 2]) -> Result<()> {
    let n = d.b * d.hkv * d.sk * d.d;
    let per_head = d.sk * d.d;
    let group = d.group();
    let cfg = LaunchConfig::grid_stride(&stream.device.info, n, ATTN_AUX_BLOCK, 4);
    for (part, grad) in parts.into_iter().zip(grads) {
        // SAFETY: `attention_bwd_heads_<dtype>(part, out, n, per_head, hkv, group)`: part is an
        // f32 [B, Hq, Sk, D] buffer written by a dK/dV kernel, out a fresh [B, Hkv, Sk, D]
        // buffer of the dtype, n its length, Hq = Hkv · group; any 1-D grid.
        let args = (part.ptr(), grad.ptr_mut(), n, per_head, d.hkv, group);
        unsafe { HEADS_KERNELS[grad.dtype().index() - 1].launch(stream, cfg, args)? };
    }
    Ok(())
}

/// The Hopper backward (`backward_wgmma.rs`, sm_90a module, D = 64 or 128) into `grads` (dq like
/// q, dk and dv like k and v, each written whole): the padded statistics, q, k, v and dout's
/// tensor maps, the dQ and dK/dV kernels, and the GQA head sum when a kv head serves several
/// query heads (then dk and dv must be whole head-major tensors), else dK/dV land in the dtype
/// directly. dout and out must share a layout (the statistics kernel places them alike), and so
/// must dk and dv.
fn gpu_backward_wgmma(
    stream: &Arc<Stream>,
    d: Dims,
    (dout, q, k, v, out, lse): (Heads, Heads, Heads, Heads, Heads, &Tensor),
    (dq, dk, dv): (Heads, Heads, Heads),
    params: &AttentionParams,
) -> Result<()> {
    const OP: &str = "attention_backward";
    debug_assert!(dout.strides() == out.strides() && dk.strides() == dv.strides());
    let ctx = q.t.context();
    let dtype = q.t.dtype();
    let (di, dd) = (dtype.index() - 1, usize::from(d.d == 128));
    let (heads, padded) = (d.b * d.hq, attn_wg_padded_rows(d.sq));
    let (delta, lse2) =
        (Tensor::uninit(ctx, &[heads, padded], OP)?, Tensor::uninit(ctx, &[heads, padded], OP)?);
    let block_rows = ATTN_WG_ROWS * ATTN_WG_CONSUMERS;
    // `keys`: the dQ kernel (keys streamed), else the dK/dV kernel.
    let wg_cfg = |rows: usize, keys: bool| -> Result<LaunchConfig> {
        let mut cfg = block_grid(OP, &d, rows.div_ceil(block_rows), attn_wg_bwd_shared_bytes(d.d, keys))?;
        cfg.block = (ATTN_WG_THREADS as u32, 1, 1);
        Ok(cfg)
    };
    // Both launch shapes first: `block_grid` checks B and Hq for the statistics' grid too.
    let (dq_cfg, dkdv_cfg) = (wg_cfg(d.sq, true)?, wg_cfg(d.sk, false)?);
    // d/8 threads a row (16-byte vectors), a head per (y, z) of the grid.
    let rows_per_block = ATTN_AUX_BLOCK * 8 / d.d;
    let cfg = LaunchConfig {
        grid: (padded.div_ceil(rows_per_block) as u32, d.hq as u32, d.b as u32),
        block: (ATTN_AUX_BLOCK as u32, 1, 1),
        shared_bytes: 0,
    };
    let (row, head, batch) = out.strides();
    // SAFETY: `attention_bwd_stats_<dtype>(dout, out, row, head, batch, lse, delta, lse2, sq,
    // padded, hq, d)`: dout and out place B·Hq·Sq rows of D elements of the dtype alike by those
    // strides (views of checked, 16-byte aligned live buffers whose rows start at 128- or
    // 256-byte multiples), lse holds `heads · Sq` f32, delta and lse2 are fresh f32 buffers of
    // `heads · padded` rows, D is 64 or 128; the grid is (any, Hq, B) of 256-thread blocks (Hq
    // and B ≤ 65535, checked by `block_grid` above).
    let args = (
        dout.ptr(),
        out.ptr(),
        row,
        head,
        batch,
        lse.ptr(),
        delta.ptr_mut(),
        lse2.ptr_mut(),
        d.sq,
        padded,
        d.hq,
        d.d,
    );
    unsafe { STATS_KERNELS[di].launch(stream, cfg, args)? };

    // q, k, v, dout: (D, sequence, heads, batches), or (D, sequence, batches · heads) where all
    // are head-major, boxes of 64 columns × 64 rows.
    let rows = ATTN_WG_ROWS;
    let flat = [q, k, v, dout].iter().all(Heads::flat);
    let map = |t: Heads| t.map((d.b, d.d), rows, flat);
    let maps = [map(q)?, map(k)?, map(v)?, map(dout)?];
    let maps = tensor_maps(&maps);

    let scale = d.scale(params);
    let scale_log2 = scale * std::f32::consts::LOG2_E;
    let causal = u32::from(params.causal);
    let (row, head, batch) = dq.strides();
    // SAFETY (this launch and the next): `maps` holds the tensor maps (3-D where `flat`, else
    // 4-D) of q, dout (Hq heads of Sq rows) and k, v (Hkv heads of Sk rows) over B batches, views
    // of live buffers of this stream whose shapes the caller checked, made above with 64 × 64
    // boxes and 128-byte swizzle, by value in the launch's parameters. lse2 and delta hold
    // `padded` rows per (batch, query head), Hkv divides Hq, D is the kernel's; block, grid (x
    // over 128-row tiles) and dynamic shared memory are the kernel's. Here
    // `attention_bwd_wgmma_dq_<dtype>_d<D>(maps, lse2, delta, dq, dq_row, dq_head, dq_batch, sq,
    // sk, hq, hkv, scale, scale_log2, causal, flat)` with dq and its strides placing B·Hq·Sq rows
    // of D in a fresh (or the caller's unshared) buffer, apart from every other output.
    let args = (
        maps,
        lse2.ptr(),
        delta.ptr(),
        dq.ptr_mut(),
        row,
        head,
        batch,
        d.sq,
        d.sk,
        d.hq,
        d.hkv,
        scale,
        scale_log2,
        causal,
        u32::from(flat),
    );
    unsafe { WGMMA_DQ_KERNELS[di][dd].launch(stream, dq_cfg, args)? };

    let parts = if d.group() == 1 {
        None
    } else {
        let shape = [d.b, d.hq, d.sk, d.d];
        Some((Tensor::uninit(ctx, &shape, OP)?, Tensor::uninit(ctx, &shape, OP)?))
    };
    let (dk_f32, dv_f32, dk16, dv16) = match &parts {
        Some((pk, pv)) => (pk.ptr_mut(), pv.ptr_mut(), DevPtrMut::null(), DevPtrMut::null()),
        None => (DevPtrMut::null(), DevPtrMut::null(), dk.ptr_mut(), dv.ptr_mut()),
    };
    let (row, head, batch) = dk.strides();
    // SAFETY: as above, `attention_bwd_wgmma_dkdv_<dtype>_d<D>(maps, lse2, delta, dk, dv, dk16,
    // dv16, kv_row, kv_head, kv_batch, sq, sk, hq, hkv, scale, scale_log2, causal, flat)`: with
    // GQA, dk and dv are fresh f32 [B, Hq, Sk, D] buffers and dk16, dv16 null; else dk, dv null
    // and dk16, dv16 place B·Hkv·Sk rows of D each by the strides, in fresh (or the caller's unshared)
    // buffers, apart from each other and from dq.
    let args = (
        maps,
        lse2.ptr(),
        delta.ptr(),
        dk_f32,
        dv_f32,
        dk16,
        dv16,
        row,
        head,
        batch,
        d.sq,
        d.sk,
        d.hq,
        d.hkv,
        scale,
        scale_log2,
        causal,
        u32::from(flat),
    );
    unsafe { WGMMA_DKDV_KERNELS[di][dd].launch(stream, dkdv_cfg, args)? };
    if let Some((pk, pv)) = &parts {
        debug_assert!(dk.at.first == 0 && dk.at.row == d.d && dk.at.head == d.sk * d.d);
        sum_heads(stream, &d, [pk, pv], [dk.t, dv.t])?;
    }
    Ok(())
}

type ForwardArgs = (
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtrMut<u16>,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    usize,
    f32,
    u32,
);
/// q, k, v, dout, lse, delta, dq, sq, sk, hq, hkv, scale, scale_log2, causal.
type DqArgs = (
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtrMut<u16>,
    usize,
    usize,
    usize,
    usize,
    f32,
    f32,
    u32,
);
/// q, k, v, dout, lse, delta, dk, dv, sq, sk, hq, hkv, scale, scale_log2, causal.
type DkDvArgs = (
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtr<u16>,
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtrMut<f32>,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    usize,
    f32,
    f32,
    u32,
);

/// maps, out, out's strides (row, head, batch), lse, sq, sk, hq, hkv, scale_log2, causal, flat
/// (the maps 3-D).
type WgmmaForwardArgs = (
    TensorMaps,
    DevPtrMut<u16>,
    usize,
    usize,
    usize,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    usize,
    f32,
    u32,
    u32,
);
/// `[f16, bf16][D = 64, 128]`.
const FWD_WGMMA_KERNELS: [[Kernel<WgmmaForwardArgs>; 2]; 2] = [
    [kernels::attention_fwd_wgmma_f16_d64, kernels::attention_fwd_wgmma_f16_d128],
    [kernels::attention_fwd_wgmma_bf16_d64, kernels::attention_fwd_wgmma_bf16_d128],
];

/// `[f16, bf16][head dim]`.
const FWD_KERNELS: [[Kernel<ForwardArgs>; 5]; 2] = [
    [
        kernels::attention_fwd_f16_d32,
        kernels::attention_fwd_f16_d64,
        kernels::attention_fwd_f16_d96,
        kernels::attention_fwd_f16_d128,
        kernels::attention_fwd_f16_d256,
    ],
    [
        kernels::attention_fwd_bf16_d32,
        kernels::attention_fwd_bf16_d64,
        kernels::attention_fwd_bf16_d96,
        kernels::attention_fwd_bf16_d128,
        kernels::attention_fwd_bf16_d256,
    ],
];
const DQ_KERNELS: [[Kernel<DqArgs>; 5]; 2] = [
    [
        kernels::attention_bwd_dq_f16_d32,
        kernels::attention_bwd_dq_f16_d64,
        kernels::attention_bwd_dq_f16_d96,
        kernels::attention_bwd_dq_f16_d128,
        kernels::attention_bwd_dq_f16_d256,
    ],
    [
        kernels::attention_bwd_dq_bf16_d32,
        kernels::attention_bwd_dq_bf16_d64,
        kernels::attention_bwd_dq_bf16_d96,
        kernels::attention_bwd_dq_bf16_d128,
        kernels::attention_bwd_dq_bf16_d256,
    ],
];
const DKDV_KERNELS: [[Kernel<DkDvArgs>; 5]; 2] = [
    [
        kernels::attention_bwd_dkdv_f16_d32,
        kernels::attention_bwd_dkdv_f16_d64,
        kernels::attention_bwd_dkdv_f16_d96,
        kernels::attention_bwd_dkdv_f16_d128,
        kernels::attention_bwd_dkdv_f16_d256,
    ],
    [
        kernels::attention_bwd_dkdv_bf16_d32,
        kernels::attention_bwd_dkdv_bf16_d64,
        kernels::attention_bwd_dkdv_bf16_d96,
        kernels::attention_bwd_dkdv_bf16_d128,
        kernels::attention_bwd_dkdv_bf16_d256,
    ],
];
/// dout, out, delta, rows, D.
type DotArgs = (DevPtr<u16>, DevPtr<u16>, DevPtrMut<f32>, usize, usize);
/// The f32 per-query-head gradient, the 16-bit per-KV-head one, n, per_head, hkv, group.
type HeadsArgs = (DevPtr<f32>, DevPtrMut<u16>, usize, usize, usize, usize);
/// dout, out, their strides (row, head, batch), lse, delta, lse2, sq, padded, hq, D.
type StatsArgs = (
    DevPtr<u16>,
    DevPtr<u16>,
    usize,
    usize,
    usize,
    DevPtr<f32>,
    DevPtrMut<f32>,
    DevPtrMut<f32>,
    usize,
    usize,
    usize,
    usize,
);
const STATS_KERNELS: [Kernel<StatsArgs>; 2] =
    [kernels::attention_bwd_stats_f16, kernels::attention_bwd_stats_bf16];
/// maps, lse2, delta, dq, dq's strides (row, head, batch), sq, sk, hq, hkv, scale, scale_log2,
/// causal, flat.
type WgmmaDqArgs = (
    TensorMaps,
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtrMut<u16>,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    f32,
    f32,
    u32,
    u32,
);
/// maps, lse2, delta, dk, dv (f32), dk, dv (dtype), the latter's strides (row, head, batch), sq,
/// sk, hq, hkv, scale, scale_log2, causal, flat.
type WgmmaDkDvArgs = (
    TensorMaps,
    DevPtr<f32>,
    DevPtr<f32>,
    DevPtrMut<f32>,
    DevPtrMut<f32>,
    DevPtrMut<u16>,
    DevPtrMut<u16>,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    f32,
    f32,
    u32,
    u32,
);
/// `[f16, bf16][D = 64, 128]`.
const WGMMA_DQ_KERNELS: [[Kernel<WgmmaDqArgs>; 2]; 2] = [
    [kernels::attention_bwd_wgmma_dq_f16_d64, kernels::attention_bwd_wgmma_dq_f16_d128],
    [kernels::attention_bwd_wgmma_dq_bf16_d64, kernels::attention_bwd_wgmma_dq_bf16_d128],
];
const WGMMA_DKDV_KERNELS: [[Kernel<WgmmaDkDvArgs>; 2]; 2] = [
    [kernels::attention_bwd_wgmma_dkdv_f16_d64, kernels::attention_bwd_wgmma_dkdv_f16_d128],
    [kernels::attention_bwd_wgmma_dkdv_bf16_d64, kernels::attention_bwd_wgmma_dkdv_bf16_d128],
];
const DOT_KERNELS: [Kernel<DotArgs>; 2] = [kernels::attention_bwd_dot_f16, kernels::attention_bwd_dot_bf16];
const HEADS_KERNELS: [Kernel<HeadsArgs>; 2] =
    [kernels::attention_bwd_heads_f16, kernels::attention_bwd_heads_bf16];

/// Whether query `i` sees key `j`.
fn visible(i: usize, j: usize, d: &Dims, causal: bool) -> bool {
    !causal || j as isize <= i as isize + d.sk as isize - d.sq as isize
}

/// Per (batch, query head): the f64 probabilities `P[i][j]` of one head (0 where hidden) from
/// its scores and `lse` (f64, the forward's own where given).
fn probabilities(
    d: &Dims,
    (q, k): (&[f32], &[f32]),
    (b, h): (usize, usize),
    scale: f64,
    causal: bool,
    lse: Option<&[f32]>,
) -> (Vec<f64>, Vec<f64>) {
    let hk = h / d.group();
    let (qh, kh) = (&q[((b * d.hq + h) * d.sq) * d.d..], &k[((b * d.hkv + hk) * d.sk) * d.d..]);
    let mut p = vec![0.0f64; d.sq * d.sk];
    let mut lse_out = vec![f64::INFINITY; d.sq];
    for i in 0..d.sq {
        let row = &mut p[i * d.sk..(i + 1) * d.sk];
        let mut m = f64::NEG_INFINITY;
        for (j, s) in row.iter_mut().enumerate() {
            if visible(i, j, d, causal) {
                let dot: f64 = (0..d.d).map(|e| qh[i * d.d + e] as f64 * kh[j * d.d + e] as f64).sum();
                *s = dot * scale;
                m = m.max(*s);
            } else {
                *s = f64::NEG_INFINITY;
            }
        }
        let l = match lse {
            Some(lse) => lse[(b * d.hq + h) * d.sq + i] as f64,
            None if m == f64::NEG_INFINITY => f64::INFINITY,
            None => m + row.iter().map(|s| (s - m).exp()).sum::<f64>().ln(),
        };
        lse_out[i] = l;
        for s in row.iter_mut() {
            *s = if l.is_finite() { (*s - l).exp() } else { 0.0 };
        }
    }
    (p, lse_out)
}

/// The CPU twin of the forward: f64 scores, softmax and product, rounded once.
fn cpu_forward(
    d: Dims,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    params: &AttentionParams,
) -> Result<(Tensor, Tensor)> {
    let (qh, kh, vh) = (q.to_vec()?, k.to_vec()?, v.to_vec()?);
    let scale = d.scale(params) as f64;
    let dtype = q.dtype();
    let heads: Vec<(Vec<f32>, Vec<f32>)> = (0..d.b * d.hq)
        .into_par_iter()
        .map(|bh| {
            let (b, h) = (bh / d.hq, bh % d.hq);
            let (p, lse) = probabilities(&d, (&qh, &kh), (b, h), scale, params.causal, None);
            let vb = &vh[((b * d.hkv + h / d.group()) * d.sk) * d.d..];
            let mut out = vec![0.0f32; d.sq * d.d];
            for i in 0..d.sq {
                for e in 0..d.d {
                    let o: f64 = (0..d.sk).map(|j| p[i * d.sk + j] * vb[j * d.d + e] as f64).sum();
                    out[i * d.d + e] = dtype.round(o);
                }
            }
            (out, lse.iter().map(|&l| l as f32).collect())
        })
        .collect();
    let (out, lse): (Vec<Vec<f32>>, Vec<Vec<f32>>) = heads.into_iter().unzip();
    let ctx = q.context();
    Ok((
        Tensor::from_cpu_as(ctx, q.shape(), dtype, out.concat()),
        Tensor::from_cpu(ctx, &d.lse_shape(), lse.concat()),
    ))
}

/// The CPU twin of the backward, in f64 from the given `out` and `lse` (as the kernels).
fn cpu_backward(
    d: Dims,
    (dout, q, k, v, out, lse): (&Tensor, &Tensor, &Tensor, &Tensor, &Tensor, &Tensor),
    params: &AttentionParams,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (doh, qh, kh, vh, oh, lh) =
        (dout.to_vec()?, q.to_vec()?, k.to_vec()?, v.to_vec()?, out.to_vec()?, lse.to_vec()?);
    let scale = d.scale(params) as f64;
    let dtype = q.dtype();
    let (sq, sk, dd) = (d.sq, d.sk, d.d);
    // One task per (batch, kv head): the dQ of its group's query heads and its dK, dV.
    let per_kv: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..d.b * d.hkv)
        .into_par_iter()
        .map(|bk| {
            let (b, hk) = (bk / d.hkv, bk % d.hkv);
            let kb = &kh[bk * sk * dd..];
            let vb = &vh[bk * sk * dd..];
            let (mut dk, mut dv) = (vec![0.0f64; sk * dd], vec![0.0f64; sk * dd]);
            let mut dq_all = Vec::with_capacity(d.group() * sq * dd);
            for h in hk * d.group()..(hk + 1) * d.group() {
                let (p, _) = probabilities(&d, (&qh, &kh), (b, h), scale, params.causal, Some(&lh));
                let base = (b * d.hq + h) * sq * dd;
                let (qb, dob, ob) = (&qh[base..], &doh[base..], &oh[base..]);
                let mut dq = vec![0.0f64; sq * dd];
                for i in 0..sq {
                    let delta: f64 = (0..dd).map(|e| dob[i * dd + e] as f64 * ob[i * dd + e] as f64).sum();
                    for j in 0..sk {
                        let pij = p[i * sk + j];
                        if pij == 0.0 {
                            continue;
                        }
                        let dp: f64 = (0..dd).map(|e| dob[i * dd + e] as f64 * vb[j * dd + e] as f64).sum();
                        let ds = pij * (dp - delta) * scale;
                        for e in 0..dd {
                            dq[i * dd + e] += ds * kb[j * dd + e] as f64;
                            dk[j * dd + e] += ds * qb[i * dd + e] as f64;
                            dv[j * dd + e] += pij * dob[i * dd + e] as f64;
                        }
                    }
                }
                dq_all.extend(dq.iter().map(|&x| dtype.round(x)));
            }
            let round = |x: Vec<f64>| x.into_iter().map(|x| dtype.round(x)).collect::<Vec<f32>>();
            (dq_all, round(dk), round(dv))
        })
        .collect();
    // The tasks' dQ blocks are in (batch, kv head, group member) order = (batch, query head).
    let mut dq = Vec::with_capacity(q.len());
    let (mut dk, mut dv) = (Vec::with_capacity(k.len()), Vec::with_capacity(v.len()));
    for (a, b, c) in per_kv {
        dq.extend(a);
        dk.extend(b);
        dv.extend(c);
    }
    let ctx = q.context();
    Ok((
        Tensor::from_cpu_as(ctx, q.shape(), dtype, dq),
        Tensor::from_cpu_as(ctx, k.shape(), dtype, dk),
        Tensor::from_cpu_as(ctx, v.shape(), dtype, dv),
    ))
}

/// Heads `h0..h0 + H` of a token-major `[B, S, Htot, D]` tensor (a projection's output) as a
/// head-major `[B, H, S, D]` one.
pub(crate) fn to_heads(src: &Tensor, (h0, h): (usize, usize)) -> Result<Tensor> {
    let &[b, s, htot, d] = src.shape() else {
        return Err(heads_error(src.shape()));
    };
    let mut dst = Tensor::uninit_as(src.context(), &[b, h, s, d], src.dtype(), HEADS_OP)?;
    copy_heads(src, &mut dst, [b, s, htot, d], (h0, h), true)?;
    Ok(dst)
}

/// Write the head-major `[B, H, S, D]` `src` into heads `h0..h0 + H` of the token-major
/// `[B, S, Htot, D]` `dst` (its other heads are kept).
pub(crate) fn from_heads(src: &Tensor, dst: &mut Tensor, h0: usize) -> Result<()> {
    let (&[b, h, s, d], &[_, _, htot, _]) = (src.shape(), dst.shape()) else {
        return Err(heads_error(src.shape()));
    };
    copy_heads(src, dst, [b, s, htot, d], (h0, h), false)
}

const HEADS_OP: &str = "attention_heads";

fn heads_error(shape: &[usize]) -> Error {
    Error::InvalidArgument { op: HEADS_OP, shape: shape.to_vec(), reason: "expects rank 4".into() }
}

/// The copy of [`to_heads`] (`to_heads`) or [`from_heads`]: `[b, s, htot, d]` are the
/// token-major tensor's sizes.
fn copy_heads(
    src: &Tensor,
    dst: &mut Tensor,
    [b, s, htot, d]: [usize; 4],
    (h0, h): (usize, usize),
    to_heads: bool,
) -> Result<()> {
    let (token_shape, head_shape) = ([b, s, htot, d], [b, h, s, d]);
    let (src_want, dst_want) = if to_heads { (token_shape, head_shape) } else { (head_shape, token_shape) };
    src.check_peer(HEADS_OP, dst)?;
    if src.shape() != src_want || dst.shape() != dst_want || h0 + h > htot {
        return Err(Error::ShapeMismatch {
            op: HEADS_OP,
            lhs: src.shape().to_vec(),
            rhs: dst.shape().to_vec(),
        });
    }
    let token = |bb: usize, t: usize, hh: usize| ((bb * s + t) * htot + h0 + hh) * d;
    let head = |bb: usize, hh: usize, t: usize| ((bb * h + hh) * s + t) * d;
    let x = match src.storage() {
        Storage::Cpu(x) => Some(x.clone()),
        Storage::Cuda(_) => None,
    };
    let out = dst.make_unique()?;
    if let (Some(x), Some(out)) = (x, out) {
        for bb in 0..b {
            for hh in 0..h {
                for t in 0..s {
                    let (tk, hd) = (token(bb, t, hh), head(bb, hh, t));
                    if to_heads {
                        out[hd..hd + d].copy_from_slice(&x[tk..tk + d]);
                    } else {
                        out[tk..tk + d].copy_from_slice(&x[hd..hd + d]);
                    }
                }
            }
        }
        return Ok(());
    }
    if src.dtype() == DType::F32 {
        return Err(Error::UnsupportedDType { op: HEADS_OP, dtype: DType::F32 });
    }
    let vectors = b * h * s * d / 8;
    if d % 8 != 0 || vectors >= 1 << 32 {
        return Err(Error::InvalidArgument {
            op: HEADS_OP,
            shape: src.shape().to_vec(),
            reason: "head dim a multiple of 8 and fewer than 2^35 elements".into(),
        });
    }
    if vectors > 0 {
        let stream = src.context().stream(HEADS_OP)?;
        let cfg = LaunchConfig::grid_stride(&stream.device.info, vectors, ATTN_AUX_BLOCK, 4);
        let flag = u32::from(to_heads);
        // SAFETY: `attention_heads(src, dst, b, s, htot, h0, h, d, to_heads)`: the head-major
        // tensor is [B, H, S, D] and the token-major one [B, S, Htot, D] with h0 + H ≤ Htot
        // (checked above), both 16-bit live buffers of this stream (pool blocks, 16-byte
        // aligned; h0·D·2 bytes is a multiple of 16 as D is of 8), `dst` unshared; any 1-D grid.
        let args = (src.ptr(), dst.ptr_mut(), b, s, htot, h0, h, d, flag);
        unsafe { kernels::attention_heads.launch(stream, cfg, args)? };
    }
    Ok(())
}
