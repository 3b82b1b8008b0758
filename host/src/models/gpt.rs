//! [`Gpt`]: a GPT-2-style decoder (token + learned position embeddings, pre-LayerNorm blocks of
//! causal attention and a 4× GELU MLP, a final LayerNorm, an output head tied to the token
//! embedding), the model of `../shared/baselines/gpt_char_ref.py`.
use crate::checkpoint::{self, Checkpoint};
use crate::layers::{Dropout, Embedding, InLayer, Layer, LayerNorm, Param, TransformerBlock};
use crate::ops::nn::{cross_entropy_labels, Labels};
use crate::runtime::error::{Error, Result};
use crate::tensor::{DType, Tensor};
use crate::Context;
use std::path::Path;

/// The model's sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GptConfig {
    /// Distinct tokens.
    pub vocab: usize,
    /// The longest sequence (positions).
    pub block: usize,
    pub layers: usize,
    pub heads: usize,
    /// Width of the residual stream (a multiple of `heads`).
    pub embed: usize,
    /// Dropout after the embedding and on each residual branch.
    pub dropout: f32,
    /// Parameters and activations: bf16 for mixed precision (f32 accumulation everywhere, f32
    /// master weights in the optimizer), or f32.
    pub dtype: DType,
}

impl GptConfig {
    /// `gpt_char_ref.py`'s defaults: 6 layers, 6 heads, width 384, 256 positions, dropout 0.1,
    /// bf16.
    pub fn char_level(vocab: usize) -> Self {
        GptConfig { vocab, block: 256, layers: 6, heads: 6, embed: 384, dropout: 0.1, dtype: DType::BF16 }
    }

    /// A tiny model for tests and CPU runs: 2 layers, 1 head of 32, 32 positions, f32.
    pub fn tiny(vocab: usize) -> Self {
        GptConfig { vocab, block: 32, layers: 2, heads: 1, embed: 32, dropout: 0.0, dtype: DType::F32 }
    }

    fn describe(&self) -> String {
        format!(
            "Gpt({} layers, {} heads, width {}, {} positions, vocabulary {}, {:?})",
            self.layers, self.heads, self.embed, self.block, self.vocab, self.dtype
        )
    }

    fn metadata(&self) -> Vec<(String, String)> {
        let dtype = format!("{:?}", self.dtype);
        [
            ("vocab", self.vocab.to_string()),
            ("block", self.block.to_string()),
            ("layers", self.layers.to_string()),
            ("heads", self.heads.to_string()),
            ("embed", self.embed.to_string()),
            ("dtype", dtype),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// The names PyTorch's reference model gives a block's parameters, in `params_mut` order.
const BLOCK_PARAMS: [&str; 12] = [
    "ln1.weight",
    "ln1.bias",
    "qkv.weight",
    "qkv.bias",
    "proj.weight",
    "proj.bias",
    "ln2.weight",
    "ln2.bias",
    "fc.weight",
    "fc.bias",
    "out.weight",
    "out.bias",
];

/// Token ids in, next-token logits (or the mean cross-entropy against targets) out.
pub struct Gpt {
    config: GptConfig,
    embedding: Embedding,
    drop: Dropout,
    blocks: Vec<TransformerBlock>,
    ln_f: LayerNorm,
    /// The loss's gradient w.r.t. the logits from the last training-mode [`Gpt::loss`], and the
    /// batch of sequences it came from.
    kept: Option<(Tensor, usize)>,
    training: bool,
}

impl Gpt {
    /// Weights `N(0, 0.02)`, biases 0, norms 1 and 0 (the reference's initialisation), from `seed`.
    pub fn new(ctx: &Context, config: GptConfig, seed: u64) -> Result<Self> {
        const STD: f32 = 0.02;
        if config.heads == 0 || config.embed % config.heads != 0 || config.vocab == 0 || config.block == 0 {
            return Err(Error::Layer {
                layer: config.describe(),
                source: Box::new(Error::InvalidArgument {
                    op: "Gpt::new",
                    shape: vec![config.vocab, config.block, config.embed, config.heads],
                    reason: "needs a vocabulary, positions, and a width that is a multiple of the heads"
                        .into(),
                }),
            });
        }
        let embedding = Embedding::new(ctx, config.vocab, config.embed, STD, seed, config.dtype)?
            .with_positions(config.block, STD, seed ^ 0x5851_f42d)?;
        let blocks = (0..config.layers)
            .map(|i| {
                TransformerBlock::new(
                    ctx,
                    config.embed,
                    config.heads,
                    config.dropout,
                    seed + 1 + i as u64,
                    config.dtype,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Gpt {
            config,
            embedding,
            drop: Dropout::new(config.dropout, seed ^ 0x2545_f491),
            blocks,
            ln_f: LayerNorm::new(ctx, config.embed)?.to_dtype(config.dtype)?,
            kept: None,
            training: true,
        })
    }

    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// Training mode (dropout on, activations kept for backward) or evaluation.
    pub fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept = None;
        self.embedding.set_training(training);
        self.drop.set_training(training);
        self.ln_f.set_training(training);
        self.blocks.iter_mut().for_each(|b| b.set_training(training));
    }

    fn describe(&self) -> String {
        self.config.describe()
    }

    /// Logits `[ids.len(), vocab]` for `ids`: sequences of `seq` tokens (1 ≤ seq ≤ block), one
    /// after another.
    pub fn logits(&mut self, ids: &Labels, seq: usize) -> Result<Tensor> {
        let c = self.config;
        if seq == 0 || seq > c.block || ids.len() % seq != 0 || ids.is_empty() {
            let reason =
                format!("{} ids do not make sequences of {seq} (1 to {} positions)", ids.len(), c.block);
            return Err(crate::layers::described_error(self.describe(), &[ids.len(), seq], reason));
        }
        self.logits_parts(ids, seq).in_described(|| c.describe())
    }

    fn logits_parts(&mut self, ids: &Labels, seq: usize) -> Result<Tensor> {
        let c = self.config;
        let batch = ids.len() / seq;
        let x = self.embedding.forward(ids, seq)?;
        let mut x = self.drop.forward(&x)?.reshape(&[batch, seq, c.embed])?;
        for block in &mut self.blocks {
            x = block.forward(&x)?;
        }
        let x = self.ln_f.forward(&x.reshape(&[batch * seq, c.embed])?)?;
        self.embedding.logits(&x)
    }

    /// Mean cross-entropy of predicting `targets` (the next token at each position) from `ids`
    /// (sequences of `seq`); a scalar f32 tensor. In training mode keeps its gradient for
    /// [`backward`](Gpt::backward).
    pub fn loss(&mut self, ids: &Labels, targets: &Labels, seq: usize) -> Result<Tensor> {
        let logits = self.logits(ids, seq)?;
        let (loss, dlogits) = cross_entropy_labels(&logits, targets).in_described(|| self.describe())?;
        self.kept = self.training.then_some((dlogits, ids.len() / seq));
        Ok(loss)
    }

    /// Gradients of the last training-mode [`loss`](Gpt::loss) w.r.t. every parameter (`ids`:
    /// the same ids).
    pub fn backward(&mut self, ids: &Labels) -> Result<()> {
        let (dlogits, batch) = self.kept.take().ok_or_else(|| {
            crate::layers::described_error(
                self.describe(),
                &[ids.len()],
                "no saved loss (call loss in training mode first)",
            )
        })?;
        self.backward_parts(ids, dlogits, batch).in_described(|| self.config.describe())
    }

    fn backward_parts(&mut self, ids: &Labels, dlogits: Tensor, batch: usize) -> Result<()> {
        let c = self.config;
        let seq = ids.len() / batch.max(1);
        let dx = self.embedding.logits_backward(&dlogits)?;
        let mut dx = self.ln_f.backward(&dx)?.reshape(&[batch, seq, c.embed])?;
        for block in self.blocks.iter_mut().rev() {
            dx = block.backward(&dx)?;
        }
        let dx = self.drop.backward(&dx.reshape(&[batch * seq, c.embed])?)?;
        self.embedding.backward(&dx, ids)
    }

    /// Every parameter with PyTorch's reference names (`tok.weight`, `blocks.0.qkv.weight`, …).
    pub fn named_params_mut(&mut self) -> Vec<(String, &mut Param)> {
        let mut named = Vec::new();
        let mut emb = self.embedding.params_mut().into_iter();
        named.extend(emb.next().map(|p| ("tok.weight".to_string(), p)));
        named.extend(emb.next().map(|p| ("pos.weight".to_string(), p)));
        for (i, block) in self.blocks.iter_mut().enumerate() {
            named.extend(BLOCK_PARAMS.iter().map(|n| format!("blocks.{i}.{n}")).zip(block.params_mut()));
        }
        named.extend(["ln.weight", "ln.bias"].map(String::from).into_iter().zip(self.ln_f.params_mut()));
        named
    }

    /// Every parameter, in a fixed order.
    pub fn params_mut(&mut self) -> Vec<&mut Param> {
        self.named_params_mut().into_iter().map(|(_, p)| p).collect()
    }

    pub fn parameter_count(&mut self) -> usize {
        self.params_mut().iter().map(|p| p.value().len()).sum()
    }

    /// The parameters and their last gradients, for an optimizer step.
    pub fn params_and_grads(&mut self) -> Result<(Vec<&mut Tensor>, Vec<&Tensor>)> {
        let describe = self.describe();
        crate::layers::values_and_grads(self.named_params_mut(), |name, shape| {
            crate::layers::described_error(
                describe.clone(),
                &shape,
                format!("{name} has no gradient (run backward first)"),
            )
        })
    }

    /// Write the parameters (and `extra` tensors, e.g. an optimizer's state) to a safetensors
    /// file, with the configuration in its metadata.
    pub fn save(&mut self, path: impl AsRef<Path>, extra: &[(String, Tensor)]) -> Result<()> {
        let mut tensors: Vec<(String, Tensor)> =
            self.named_params_mut().into_iter().map(|(n, p)| (n, p.value().clone())).collect();
        tensors.extend(extra.iter().cloned());
        checkpoint::save(path, &tensors, &self.config.metadata())
    }

    /// Load the parameters saved by [`save`](Gpt::save) (or by PyTorch under the same names);
    /// each must have its parameter's shape, and is converted to the model's dtype. Returns the
    /// whole checkpoint for the caller's extra tensors.
    pub fn load(&mut self, path: impl AsRef<Path>) -> Result<Checkpoint> {
        let dtype = self.config.dtype;
        let ctx = self.embedding.table().value().context().clone();
        let file = checkpoint::load(&ctx, path)?;
        for (name, param) in self.named_params_mut() {
            let t = file.get(&name)?;
            param.set_value(t.clone().into_dtype(dtype)?)?;
        }
        Ok(file)
    }

    /// `count` tokens sampled after `prompt` (each below the vocabulary): softmax of the last
    /// logits divided by `temperature`, restricted to the `top_k` likeliest, from a generator
    /// seeded with `seed`. Runs in evaluation mode and restores the previous mode.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        count: usize,
        temperature: f32,
        top_k: usize,
        seed: u64,
    ) -> Result<Vec<u32>> {
        let was_training = self.training;
        self.set_training(false);
        let ctx = self.embedding.table().value().context().clone();
        let mut tokens = prompt.to_vec();
        let mut rng = SplitMix64(seed);
        let result = (|| {
            for _ in 0..count {
                let window = &tokens[tokens.len().saturating_sub(self.config.block)..];
                let ids = ctx.labels(window, self.config.vocab)?;
                let logits = self.logits(&ids, window.len())?;
                let last = logits.rows(window.len() - 1..window.len())?.to_vec()?;
                tokens.push(sample(&last, temperature, top_k, rng.next_f64()));
            }
            Ok(tokens[prompt.len()..].to_vec())
        })();
        self.set_training(was_training);
        result
    }
}

/// Index drawn from softmax(logits / temperature) over the `top_k` largest logits, by the
/// uniform draw `u` in [0, 1).
fn sample(logits: &[f32], temperature: f32, top_k: usize, u: f64) -> u32 {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    order.truncate(top_k.clamp(1, logits.len()));
    let t = f64::from(temperature.max(1e-6));
    let top = f64::from(logits[order[0]]);
    let weights: Vec<f64> = order.iter().map(|&i| ((f64::from(logits[i]) - top) / t).exp()).collect();
    let mut r = u * weights.iter().sum::<f64>();
    for (&i, w) in order.iter().zip(&weights) {
        if r < *w {
            return i as u32;
        }
        r -= w;
    }
    order[order.len() - 1] as u32
}

/// A small seeded host generator (SplitMix64) for sampling and for drawing training windows:
/// the same stream on every machine, no dependency.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1), 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
