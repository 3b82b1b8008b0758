//! [`TransformerBlock`]: GPT-2's pre-LayerNorm block.
use super::{layer_error, saved, Dropout, InLayer, Layer, LayerNorm, Linear, MultiHeadAttention, Param};
use crate::ops::matmul::Activation;
use crate::runtime::error::Result;
use crate::tensor::{DType, Tensor};
use crate::Context;

/// `x + drop(attn(ln1(x)))`, then `+ drop(W₂ gelu(W₁ ln2(·)))` with a 4× wider MLP whose first
/// product has GELU fused into its epilogue; input and output `[batch, seq, embed]` in the
/// block's dtype. The residual stream stays in that dtype (16-bit for a mixed-precision model;
/// every op accumulates in f32).
pub struct TransformerBlock {
    ln1: LayerNorm,
    attn: MultiHeadAttention,
    drop1: Dropout,
    ln2: LayerNorm,
    fc: Linear,
    out: Linear,
    drop2: Dropout,
    /// `[batch, seq]` of the last training-mode forward.
    kept: Option<(usize, usize)>,
    training: bool,
}

impl TransformerBlock {
    /// `heads` causal heads over `embed` features (`embed` a multiple of `heads`), residual
    /// dropout `dropout`, weights `N(0, 0.02)` and zero biases from `seed`, parameters in
    /// `dtype`.
    pub fn new(
        ctx: &Context,
        embed: usize,
        heads: usize,
        dropout: f32,
        seed: u64,
        dtype: DType,
    ) -> Result<Self> {
        const STD: f32 = 0.02;
        let head_dim = embed / heads.max(1);
        let seeds = |i: u64| seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(i);
        Ok(TransformerBlock {
            ln1: LayerNorm::new(ctx, embed)?.to_dtype(dtype)?,
            attn: MultiHeadAttention::new(ctx, embed, (heads, heads, head_dim), true, seeds(1))?
                .normal_init(STD, seeds(2))?
                .to_dtype(dtype)?,
            drop1: Dropout::new(dropout, seeds(3)),
            ln2: LayerNorm::new(ctx, embed)?.to_dtype(dtype)?,
            fc: Linear::new(ctx, embed, 4 * embed, seeds(4))?
                .activation(Activation::Gelu)
                .normal_init(STD, seeds(5))?
                .to_dtype(dtype)?,
            out: Linear::new(ctx, 4 * embed, embed, seeds(6))?.normal_init(STD, seeds(7))?.to_dtype(dtype)?,
            drop2: Dropout::new(dropout, seeds(8)),
            kept: None,
            training: true,
        })
    }

    fn embed(&self) -> usize {
        self.fc.weight().value().shape()[1]
    }

    fn forward_parts(&mut self, x: &Tensor) -> Result<Tensor> {
        let (b, s, e) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let a = self.attn.forward(&self.ln1.forward(x)?)?;
        let x1 = self.drop1.forward_add(&a, x)?;
        let h = self.ln2.forward(&x1.reshape(&[b * s, e])?)?;
        let m = self.out.forward(&self.fc.forward(&h)?)?;
        self.drop2.forward_add(&m.reshape(&[b, s, e])?, &x1)
    }

    fn backward_parts(&mut self, (b, s): (usize, usize), dy: &Tensor) -> Result<Tensor> {
        let e = self.embed();
        let dm = self.drop2.backward(&dy.reshape(&[b * s, e])?)?;
        let dh = self.fc.backward(&self.out.backward(&dm)?)?;
        let dx1 = self.ln2.backward_add(&dh, &dy.reshape(&[b * s, e])?)?.reshape(&[b, s, e])?;
        let da = self.attn.backward(&self.drop1.backward(&dx1)?)?;
        self.ln1.backward_add(&da, &dx1)
    }
}

impl Layer for TransformerBlock {
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let embed = self.embed();
        if x.rank() != 3 || x.shape()[2] != embed {
            return Err(layer_error(self, x.shape(), format!("expects [batch, seq, {embed}]")));
        }
        let y = self.forward_parts(x).in_layer(self)?;
        self.kept = self.training.then_some((x.shape()[0], x.shape()[1]));
        Ok(y)
    }
    fn backward(&mut self, dy: &Tensor) -> Result<Tensor> {
        let (b, s) = saved(self.kept.take(), self, dy)?;
        if dy.shape() != [b, s, self.embed()] {
            return Err(layer_error(self, dy.shape(), "dy must have the last forward output's shape"));
        }
        self.backward_parts((b, s), dy).in_layer(self)
    }
    fn params_mut(&mut self) -> Vec<&mut Param> {
        let mut p = self.ln1.params_mut();
        p.extend(self.attn.params_mut());
        p.extend(self.ln2.params_mut());
        p.extend(self.fc.params_mut());
        p.extend(self.out.params_mut());
        p
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
        for layer in [
            &mut self.ln1 as &mut dyn Layer,
            &mut self.attn,
            &mut self.drop1,
            &mut self.ln2,
            &mut self.fc,
            &mut self.out,
            &mut self.drop2,
        ] {
            layer.set_training(training);
        }
    }
    fn describe(&self) -> String {
        format!("TransformerBlock({}, {:?})", self.embed(), self.fc.weight().value().dtype())
    }
}
