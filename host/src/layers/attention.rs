//! [`MultiHeadAttention`]: a fused QKV projection, flash attention, an output projection.
use super::{bias_grad, layer_error, saved, uniform_init, InLayer, Layer, Param, WeightBias};
use crate::ops::attention::{attention_qkv_packed, attention_qkv_packed_backward, AttentionParams};
use crate::ops::matmul::{linear, Activation, Gemm};
use crate::runtime::error::Result;
use crate::tensor::{DType, Tensor};
use crate::Context;

/// Self-attention over `[batch, seq, embed]`: `x·Wqkvᵀ + b` gives Hq query heads and Hkv key
/// and value heads of `head_dim` each (Hkv dividing Hq: grouped-query attention), attention
/// (optionally causal, softmax scale 1/√head_dim) runs with f32 accumulation, and `·Woᵀ + b`
/// maps the Hq heads back to `embed`. The layer computes in its parameters' dtype (f32 unless
/// [`to_dtype`](MultiHeadAttention::to_dtype)); an f32 layer rounds the attention's inputs to
/// bf16, since its kernels take 16-bit inputs.
pub struct MultiHeadAttention {
    qkv: WeightBias,
    proj: WeightBias,
    heads: (usize, usize, usize),
    params: AttentionParams,
    kept: Option<Kept>,
    training: bool,
}

/// What backward needs from a training-mode forward: the input, the projection's output
/// `[B, S, Hq + 2·Hkv, D]` and the attention's `[B, S, Hq, D]` in the attention dtype, the
/// log-sum-exp, and the output projection's input in the layer's dtype.
struct Kept {
    x: Tensor,
    qkv: Tensor,
    out: Tensor,
    lse: Tensor,
    merged: Tensor,
}

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

    /// Weights from `N(0, std)`, zero biases, from `seed` (GPT-2's initialisation).
    pub fn normal_init(mut self, std: f32, seed: u64) -> Result<Self> {
        self.qkv.normal_init(std, seed)?;
        self.proj.normal_init(std, seed ^ 0x7f4a_7c15)?;
        Ok(self)
    }

    fn embed(&self) -> usize {
        self.qkv.weight.value().shape()[1]
    }

    fn dtype(&self) -> DType {
        self.qkv.weight.value().dtype()
    }

    /// The dtype the attention kernels run in: the layer's, or bf16 for an f32 layer.
    fn attention_dtype(&self) -> DType {
        match self.dtype() {
            DType::F32 => DType::BF16,
            d => d,
        }
    }

    fn forward_parts(&self, x: &Tensor) -> Result<(Tensor, Kept)> {
        let (hq, hkv, d) = self.heads;
        let (b, s, e) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let x2 = x.reshape(&[b * s, e])?;
        let qkv = linear(&x2, self.qkv.weight.value(), self.qkv.bias_value(), Activation::None)?;
        let qkv = qkv.reshape(&[b, s, hq + 2 * hkv, d])?.into_dtype(self.attention_dtype())?;
        let (out, lse) = attention_qkv_packed(&qkv, (hq, hkv), self.params)?;
        let merged = out.clone().into_dtype(self.dtype())?.reshape(&[b * s, hq * d])?;
        let y = linear(&merged, self.proj.weight.value(), self.proj.bias_value(), Activation::None)?;
        Ok((y.reshape(&[b, s, e])?, Kept { x: x2, qkv, out, lse, merged }))
    }

    fn backward_parts(&mut self, kept: Kept, dy: &Tensor) -> Result<Tensor> {
        let (hq, hkv, d) = self.heads;
        let (b, s, e) = (dy.shape()[0], dy.shape()[1], dy.shape()[2]);
        let dy2 = dy.reshape(&[b * s, e])?;
        let dwo = Gemm::new(&dy2, &kept.merged).transpose_a(true).run()?;
        let dbo = bias_grad(&dy2)?;
        let dmerged = dy2.matmul(self.proj.weight.value())?;
        let dmerged = dmerged.reshape(&[b, s, hq, d])?.into_dtype(self.attention_dtype())?;
        let dqkv =
            attention_qkv_packed_backward(&dmerged, &kept.qkv, &kept.out, &kept.lse, (hq, hkv), self.params)?;
        let dqkv = dqkv.into_dtype(self.dtype())?.reshape(&[b * s, (hq + 2 * hkv) * d])?;
        let dw = Gemm::new(&dqkv, &kept.x).transpose_a(true).run()?;
        let db = bias_grad(&dqkv)?;
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
        if dy.shape() != [kept.qkv.shape()[0], kept.qkv.shape()[1], self.embed()] {
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
            "MultiHeadAttention({} → {hq}×{d} query, {hkv} kv heads{}{})",
            self.embed(),
            if self.params.causal { ", causal" } else { "" },
            if self.dtype() == DType::F32 { String::new() } else { format!(", {:?}", self.dtype()) }
        )
    }
}
