//! [`Embedding`]: a token table, optionally with learned positions added, that can also serve as
//! the tied output head of a language model.
use super::{described_error, normal_init, InLayer, Param};
use crate::ops::embedding::{embedding, embedding_backward};
use crate::ops::nn::Labels;
use crate::runtime::error::Result;
use crate::tensor::{DType, Tensor};
use crate::Context;

/// `table[id] (+ positions[i mod T])` for each token id: `[vocab, dim]` and `[max_seq, dim]`
/// tables. As a tied output head, [`logits`](Embedding::logits) gives `x · tableᵀ`.
///
/// The table's gradient is the sum of the lookup's and the head's: each backward adds its part
/// (in either order) until the next training-mode forward starts a new step.
pub struct Embedding {
    table: Param,
    positions: Option<Param>,
    /// The sequence length of the last training-mode lookup.
    kept_seq: Option<usize>,
    head_input: Option<Tensor>,
    /// This step's table gradient so far (the lookup's and the head's parts, as they arrive).
    table_grad: Option<Tensor>,
    training: bool,
}

impl Embedding {
    /// `vocab` rows of `dim`, normal(0, `std`) from `seed`, in `dtype`.
    pub fn new(ctx: &Context, vocab: usize, dim: usize, std: f32, seed: u64, dtype: DType) -> Result<Self> {
        let table = Param::new(normal_init(ctx, &[vocab, dim], std, seed, dtype)?);
        Ok(Embedding {
            table,
            positions: None,
            kept_seq: None,
            head_input: None,
            table_grad: None,
            training: true,
        })
    }
    /// With a learned position table of `max_seq` rows (normal(0, `std`) from `seed`).
    pub fn with_positions(mut self, max_seq: usize, std: f32, seed: u64) -> Result<Self> {
        let (ctx, dim, dtype) =
            (self.table.value().context().clone(), self.dim(), self.table.value().dtype());
        self.positions = Some(Param::new(normal_init(&ctx, &[max_seq, dim], std, seed, dtype)?));
        Ok(self)
    }
    pub fn vocab(&self) -> usize {
        self.table.value().shape()[0]
    }
    pub fn dim(&self) -> usize {
        self.table.value().shape()[1]
    }
    pub fn table(&self) -> &Param {
        &self.table
    }
    pub fn positions(&self) -> Option<&Param> {
        self.positions.as_ref()
    }
    /// The parameters: the table, then the position table if there is one.
    pub fn params_mut(&mut self) -> Vec<&mut Param> {
        let mut p = vec![&mut self.table];
        p.extend(self.positions.as_mut());
        p
    }
    /// Training (the default) or evaluation mode (nothing kept).
    pub fn set_training(&mut self, training: bool) {
        self.training = training;
        self.kept_seq = None;
        self.head_input = None;
    }
    pub fn describe(&self) -> String {
        let positions = self
            .positions
            .as_ref()
            .map_or(String::new(), |p| format!(", {} positions", p.value().shape()[0]));
        format!("Embedding({} × {}{positions})", self.vocab(), self.dim())
    }

    /// Look up `ids` (sequences of `seq` tokens each, `ids.len()` a multiple of it): `[ids.len(),
    /// dim]`. Positions `0..seq` are added when the layer has a position table.
    pub fn forward(&mut self, ids: &Labels, seq: usize) -> Result<Tensor> {
        if ids.classes() != self.vocab() {
            return Err(described_error(
                self.describe(),
                &[ids.len()],
                format!("ids are bounded by {} classes, the table has {} rows", ids.classes(), self.vocab()),
            ));
        }
        if let Some(p) = self.positions.as_ref().filter(|p| seq > p.value().shape()[0]) {
            let reason = format!("sequences of {seq} exceed the {} positions", p.value().shape()[0]);
            return Err(described_error(self.describe(), &[ids.len(), seq], reason));
        }
        // The lookup adds rows 0..seq of the position table.
        let window = self
            .positions
            .as_ref()
            .map(|p| p.value().rows(0..seq))
            .transpose()
            .in_described(|| self.describe())?;
        let y = embedding(self.table.value(), ids, window.as_ref()).in_described(|| self.describe())?;
        if self.training {
            self.kept_seq = Some(seq);
            self.table_grad = None;
        }
        Ok(y)
    }

    /// Store the lookup's gradients from `dy` `[ids.len(), dim]` (the ids of the last forward).
    pub fn backward(&mut self, dy: &Tensor, ids: &Labels) -> Result<()> {
        let seq = self.kept_seq.take().ok_or_else(|| {
            described_error(
                self.describe(),
                dy.shape(),
                "no saved forward pass (call forward in training mode first)",
            )
        })?;
        let (vocab, has_positions) = (self.vocab(), self.positions.is_some());
        let (dtable, dpos) = embedding_backward(dy, ids, vocab, has_positions.then_some(seq))
            .in_described(|| self.describe())?;
        self.add_table_grad(dtable)?;
        if let (Some(p), Some(dpos)) = (self.positions.as_mut(), dpos) {
            p.set_grad(pad_rows(&dpos, p.value().shape()[0])?);
        }
        Ok(())
    }

    /// The tied output head: `x · tableᵀ`, `[rows, dim]` → `[rows, vocab]`.
    pub fn logits(&mut self, x: &Tensor) -> Result<Tensor> {
        let y = x.matmul_t(self.table.value()).in_described(|| self.describe())?;
        self.head_input = self.training.then(|| x.clone());
        Ok(y)
    }

    /// Backward of [`logits`](Embedding::logits): adds the head's part of the table gradient and
    /// returns dL/dx.
    pub fn logits_backward(&mut self, dlogits: &Tensor) -> Result<Tensor> {
        let x = self.head_input.take().ok_or_else(|| {
            described_error(
                self.describe(),
                dlogits.shape(),
                "no saved head input (call logits in training mode first)",
            )
        })?;
        let describe = || self.describe();
        let grads = (|| {
            let dtable = crate::ops::matmul::Gemm::new(dlogits, &x).transpose_a(true).run()?;
            Ok((dlogits.matmul(self.table.value())?, dtable))
        })();
        let (dx, dtable) = grads.in_described(describe)?;
        self.add_table_grad(dtable)?;
        Ok(dx)
    }

    fn add_table_grad(&mut self, part: Tensor) -> Result<()> {
        let sum = match self.table_grad.take() {
            Some(g) => g.add(&part)?,
            None => part,
        };
        self.table.set_grad(sum.clone());
        self.table_grad = Some(sum);
        Ok(())
    }
}

/// `t` `[r, c]` followed by zero rows up to `rows`.
fn pad_rows(t: &Tensor, rows: usize) -> Result<Tensor> {
    let (r, c) = (t.shape()[0], t.shape()[1]);
    if r == rows {
        return Ok(t.clone());
    }
    let mut out = t.context().full_as(&[rows, c], 0.0, t.dtype())?;
    out.write_rows(0, t)?;
    Ok(out)
}
