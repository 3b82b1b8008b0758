//! [`MultiHeadAttention`]: a fused QKV projection, flash attention, an output projection.
use super::{layer_error, saved, uniform_init, InLayer, Layer, Param, WeightBias};
use crate::ops::attention::{attention, attention_backward, from_heads, to_heads, AttentionParams};
use crate::ops::matmul::{linear, Activation, Gemm};
use crate::runtime::error::Result;
use crate::tensor::{DType, Tensor};
use crate::Context;

/// Self-attention over `[batch, seq, embed]`: `x·Wqkvᵀ + b` gives Hq query heads and Hkv key
/// and value heads of `head_dim` each (Hkv dividing Hq: grouped-query attention), attention
/// (optionally causal, softmax scale 1/√head_dim) runs in bf16 with f32 accumulation, and
/// `·Woᵀ + b` maps the Hq heads back to `embed`. Parameters and projections are f32; the
/// attention's inputs are rounded to bf16 (its kernels take 16-bit inputs).
pub struct MultiHeadAttention {
    qkv: WeightBias,
    proj: WeightBias,
    heads: (usize, usize, usize),
    params: AttentionParams,
    kept: Option<Kept>,
    training: bool,
}

/// What backward needs from a training-mode forward.
struct Kept {
    x: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    merged: Tensor,
}

const ATTENTION_DTYPE: DType = DType::BF16;

impl MultiHeadAttention {
    /// `embed` features in and out, `q_heads` query heads and `kv_heads` key/value heads of
    /// `head_dim`; PyTorch's initialisation (uniform ±1/√fan_in) from `seed`.
    pub fn new(
        ctx: &Context,
        embed: usize,
        (q_heads, kv_heads, head_dim): (usize, usize, usize),
        causal: bool,
        seed: u64,
    ) -> Result<Self> {
        let width = (q_heads + 2 * kv_heads) * head_dim;
        let inner = q_heads * head_dim;
        let qkv = WeightBias::new(
            uniform_init(ctx, &[width, embed], embed, seed)?,
            Some(uniform_init(ctx, &[width], embed, seed ^ 0x9e37_79b9)?),
        );
        let proj = WeightBias::new(
            uniform_init(ctx, &[embed, inner], inner, seed ^ 0x7f4a_7c15)?,
            Some(uniform_init(ctx, &[embed], inner, seed ^ 0x94d0_49bb)?),
        );
        Ok(MultiHeadAttention {
            qkv,
            proj,
            heads: (q_heads, kv_heads, head_dim),
            params: AttentionParams::default().causal(causal),
            kept: None,
            training: true,
        })
    }

    fn embed(&self) -> usize {
        self.qkv.weight.value().shape()[1]
    }

    fn forward_parts(&self, x: &Tensor) -> Result<(Tensor, Kept)> {
        let (hq, hkv, d) = self.heads;
        let (b, s, e) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let x2 = x.reshape(&[b * s, e])?;
        let qkv = linear(&x2, self.qkv.weight.value(), self.qkv.bias_value(), Activation::None)?;
        let qkv = qkv.reshape(&[b, s, hq + 2 * hkv, d])?.to_dtype(ATTENTION_DTYPE)?;
        let (q, k, v) =
            (to_heads(&qkv, (0, hq))?, to_heads(&qkv, (hq, hkv))?, to_heads(&qkv, (hq + hkv, hkv))?);
        let (out, lse) = attention(&q, &k, &v, self.params)?;
        let mut merged = x.context().full_as(&[b, s, hq, d], 0.0, ATTENTION_DTYPE)?;
        from_heads(&out, &mut merged, 0)?;
        let merged = merged.to_dtype(DType::F32)?.reshape(&[b * s, hq * d])?;
        let y = linear(&merged, self.proj.weight.value(), self.proj.bias_value(), Activation::None)?;
        Ok((y.reshape(&[b, s, e])?, Kept { x: x2, q, k, v, out, lse, merged }))
    }

    fn backward_parts(&mut self, kept: Kept, dy: &Tensor) -> Result<Tensor> {
        let (hq, hkv, d) = self.heads;
        let (b, s, e) = (dy.shape()[0], dy.shape()[1], dy.shape()[2]);
        let ctx = dy.context();
        let dy2 = dy.reshape(&[b * s, e])?;
        let ones = ctx.full(&[1, b * s], 1.0)?;
        let dwo = Gemm::new(&dy2, &kept.merged).transpose_a(true).run()?;
        let dbo = ones.matmul(&dy2)?;
        let dmerged = dy2.matmul(self.proj.weight.value())?;
        let dmerged = dmerged.reshape(&[b, s, hq, d])?.to_dtype(ATTENTION_DTYPE)?;
        let dout = to_heads(&dmerged, (0, hq))?;
        let (dq, dk, dv) =
            attention_backward(&dout, &kept.q, &kept.k, &kept.v, &kept.out, &kept.lse, self.params)?;
        let mut dqkv = ctx.full_as(&[b, s, hq + 2 * hkv, d], 0.0, ATTENTION_DTYPE)?;
        from_heads(&dq, &mut dqkv, 0)?;
        from_heads(&dk, &mut dqkv, hq)?;
        from_heads(&dv, &mut dqkv, hq + hkv)?;
        let dqkv = dqkv.to_dtype(DType::F32)?.reshape(&[b * s, (hq + 2 * hkv) * d])?;
        let dw = Gemm::new(&dqkv, &kept.x).transpose_a(true).run()?;
        let db = ones.matmul(&dqkv)?;
        let dx = dqkv.matmul(self.qkv.weight.value())?;
        self.proj.set_grads(dwo, Some(dbo))?;
        self.qkv.set_grads(dw, Some(db))?;
        dx.reshape(&[b, s, e])
    }
}

impl Layer for MultiHeadAttention {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let embed = self.embed();
        if x.rank() != 3 || x.shape()[2] != embed {
            return Err(layer_error(self, x.shape(), format!("expects [batch, seq, {embed}]")));
        }
        let (y, kept) = self.forward_parts(x).in_layer(self)?;
        self.kept = self.training.then_some(kept);
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let kept = saved(self.kept.take(), self, dy)?;
        if dy.shape() != [kept.q.shape()[0], kept.q.shape()[2], self.embed()] {
            return Err(layer_error(self, dy.shape(), "dy must have the last forward output's shape"));
        }
        self.backward_parts(kept, dy).in_layer(self)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        let mut p = self.qkv.params_mut();
        p.extend(self.proj.params_mut());
        p
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
    }
    fn describe(&self) -> String {
        let (hq, hkv, d) = self.heads;
        format!(
            "MultiHeadAttention({} → {hq}×{d} query, {hkv} kv heads{})",
            self.embed(),
            if self.params.causal { ", causal" } else { "" }
        )
    }
}
