//! Embedding lookup (`table[ids]`, optionally plus a learned positional embedding) and its
//! deterministic backward pass, for f32, f16 and bf16 tables. Kernels:
//! `gpu-kernels/src/nn/embedding.rs`.
use super::nn::{LabelStorage, Labels};
use crate::kernels;
use crate::ops::matmul::Gemm;
use crate::runtime::error::{Error, Result};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::pool::DeviceBuffer;
use crate::shapes::{
    ELEMENTWISE_BLOCK, EMBEDDING_BLOCK, EMBEDDING_SORT_THREADS, EMBEDDING_SORT_TILE, EMBEDDING_SUM_TILE,
};
use crate::tensor::{DType, Storage, Tensor};

/// `(vocab, C)` of a `[vocab, C]` table.
fn table_dims(op: &'static str, table: &Tensor) -> Result<(usize, usize)> {
    match *table.shape() {
        [v, c] => Ok((v, c)),
        _ => Err(Error::InvalidArgument {
            op,
            shape: table.shape().to_vec(),
            reason: format!("needs a [vocab, C] table, got rank {}", table.rank()),
        }),
    }
}

/// `ids` on the context of `t`, of `vocab` classes.
fn check_ids(op: &'static str, t: &Tensor, ids: &Labels, vocab: usize) -> Result<()> {
    if !t.context().same_queue(ids.context()) {
        return Err(t.context().mismatch(op, ids.context()));
    }
    if ids.classes() != vocab {
        return Err(Error::InvalidArgument {
            op,
            shape: t.shape().to_vec(),
            reason: format!("ids of {} classes for a vocabulary of {vocab}", ids.classes()),
        });
    }
    Ok(())
}

/// `T` for positions of `t` rows over `n` ids: `t` ≥ 1 dividing `n`.
fn check_period(op: &'static str, n: usize, t: usize, shape: &[usize]) -> Result<usize> {
    if t == 0 || n % t != 0 {
        return Err(Error::InvalidArgument {
            op,
            shape: shape.to_vec(),
            reason: format!("{n} ids are not a whole number of sequences of {t} positions"),
        });
    }
    Ok(t)
}

/// A grid of `blocks` blocks of `threads`, refusing more than 2^31-1 blocks.
fn blocks_of(op: &'static str, shape: &[usize], blocks: usize, threads: usize) -> Result<LaunchConfig> {
    if blocks > i32::MAX as usize {
        return Err(Error::InvalidArgument {
            op,
            shape: shape.to_vec(),
            reason: "more than 2^31-1 blocks".into(),
        });
    }
    Ok(LaunchConfig { grid: (blocks.max(1) as u32, 1, 1), block: (threads as u32, 1, 1), shared_bytes: 0 })
}

/// Embedding lookup: row `i` of the `[ids.len(), C]` output is `table[ids[i]]`, plus
/// `positions[i % T]` when a `[T, C]` positional table is given (a GPT's learned positions, fused
/// in; `ids.len()` must be a multiple of T). `table` is `[vocab, C]` (f32, f16 or bf16; 16-bit sums
/// are computed in f32 and rounded once); `ids` must be [`Labels`] of `vocab` classes, so every
/// id was checked below the vocabulary when it was uploaded ([`Context::labels`](crate::Context::labels)).
pub fn embedding(table: &Tensor, ids: &Labels, positions: Option<&Tensor>) -> Result<Tensor> {
    const OP: &str = "embedding";
    let (vocab, c) = table_dims(OP, table)?;
    check_ids(OP, table, ids, vocab)?;
    let n = ids.len();
    let t = match positions {
        None => 1,
        Some(p) => {
            table.check_peer(OP, p)?;
            match *p.shape() {
                [t, pc] if pc == c => check_period(OP, n, t, p.shape())?,
                _ => {
                    return Err(Error::ShapeMismatch {
                        op: OP,
                        lhs: table.shape().to_vec(),
                        rhs: p.shape().to_vec(),
                    })
                }
            }
        }
    };
    let (ctx, dtype) = (table.context(), table.dtype());
    match (table.storage(), ids.storage()) {
        (Storage::Cpu(tv), LabelStorage::Cpu(iv)) => {
            let pv = positions.map(Tensor::to_vec).transpose()?;
            let mut out = Vec::with_capacity(n * c);
            for (i, &id) in iv.iter().enumerate() {
                let row = &tv[id as usize * c..(id as usize + 1) * c];
                match &pv {
                    None => out.extend_from_slice(row),
                    Some(p) => out.extend(
                        row.iter()
                            .zip(&p[(i % t) * c..(i % t + 1) * c])
                            .map(|(&a, &b)| dtype.round(a as f64 + b as f64)),
                    ),
                }
            }
            Ok(Tensor::from_cpu_as(ctx, &[n, c], dtype, out))
        }
        (Storage::Cuda(_), LabelStorage::Cuda(buf)) => {
            let out = Tensor::uninit_as(ctx, &[n, c], dtype, OP)?;
            if out.is_empty() {
                return Ok(out);
            }
            let stream = ctx.stream(OP)?;
            let unit = if c % (16 / dtype.size_bytes()) == 0 { 16 / dtype.size_bytes() } else { 1 };
            let cfg = LaunchConfig::covering(n * c / unit, ELEMENTWISE_BLOCK);
            let fwd = by_dtype!(embedding_f32, embedding_f16, embedding_bf16);
            // SAFETY: `embedding_*(table, ids, pos, out, n, c, t)`: ids holds n u32 each < vocab
            // (checked on upload, and vocab is the table's row count), table vocab·c elements,
            // pos (or null) t·c, out n·c; 16-byte vectors only when c is a whole number of them
            // (every buffer starts 16-byte aligned); any grid (grid-stride).
            launch_by_dtype!(fwd, dtype, |k| unsafe {
                let pos = Tensor::ptr_or_null(positions);
                k.launch(stream, cfg, (table.ptr(), buf.dev_ptr(), pos, out.ptr_mut(), n, c, t))?
            });
            Ok(out)
        }
        _ => Err(ctx.mismatch(OP, ids.context())),
    }
}

/// The gradients of [`embedding`] from `dy` `[ids.len(), C]`: `(dtable [vocab, C], dpos [T, C]`
/// when `positions` is `Some(T)`), in dy's dtype, accumulated in f32. `dtable[v]` sums the rows
/// of dy whose id is v (zeros for ids that do not occur), `dpos[t]` the rows `t, t + T, ...`: the
/// results are bit-identical from run to run (no float atomics). On the GPU, the rows are sorted
/// by id and summed in row order; 16-bit gradients of at most `ONEHOT_MAX_VOCAB` ids take
/// `onehot(ids)ᵀ · dy` instead (a matrix product in f32), and `dpos` is a column sum of dy as
/// `[ids / T, T·C]`.
pub fn embedding_backward(
    dy: &Tensor,
    ids: &Labels,
    vocab: usize,
    positions: Option<usize>,
) -> Result<(Tensor, Option<Tensor>)> {
    const OP: &str = "embedding_backward";
    let n = ids.len();
    let c = match *dy.shape() {
        [rows, c] if rows == n => c,
        _ => return Err(Error::ShapeMismatch { op: OP, lhs: dy.shape().to_vec(), rhs: vec![n] }),
    };
    check_ids(OP, dy, ids, vocab)?;
    let t = positions.map(|t| check_period(OP, n, t, dy.shape())).transpose()?;
    if n > u32::MAX as usize {
        return Err(Error::InvalidArgument {
            op: OP,
            shape: dy.shape().to_vec(),
            reason: "more than 2^32-1 ids".into(),
        });
    }
    let (ctx, dtype) = (dy.context(), dy.dtype());
    match (dy.storage(), ids.storage()) {
        (Storage::Cpu(d), LabelStorage::Cpu(iv)) => {
            let mut table = vec![0.0f64; vocab * c];
            let mut pos = vec![0.0f64; t.unwrap_or(0) * c];
            for (i, &id) in iv.iter().enumerate() {
                let row = &d[i * c..(i + 1) * c];
                let id = id as usize;
                table[id * c..(id + 1) * c].iter_mut().zip(row).for_each(|(a, &b)| *a += b as f64);
                if let Some(t) = t {
                    pos[(i % t) * c..(i % t + 1) * c].iter_mut().zip(row).for_each(|(a, &b)| *a += b as f64);
                }
            }
            let round = |v: Vec<f64>| v.into_iter().map(|x| dtype.round(x)).collect();
            let dpos = t.map(|t| Tensor::from_cpu_as(ctx, &[t, c], dtype, round(pos)));
            Ok((Tensor::from_cpu_as(ctx, &[vocab, c], dtype, round(table)), dpos))
        }
        (Storage::Cuda(_), LabelStorage::Cuda(buf)) => {
            if n * c == 0 {
                let dpos = t.map(|t| ctx.full_as(&[t, c], 0.0, dtype)).transpose()?;
                return Ok((ctx.full_as(&[vocab, c], 0.0, dtype)?, dpos));
            }
            let dtable = if dtype.size_bytes() == 2 && onehot_fits(n, vocab) {
                onehot_table_grad(dy, buf, vocab)?
            } else {
                sorted_table_grad(dy, buf, vocab)?
            };
            // Row b·T + t of dy is column block t of row b of dy as `[n / T, T·C]`.
            let dpos = t.map(|t| dy.reshape(&[n / t, t * c])?.sum_leading()?.reshape(&[t, c])).transpose()?;
            Ok((dtable, dpos))
        }
        _ => Err(ctx.mismatch(OP, ids.context())),
    }
}

/// Ids at most for the one-hot table gradient (`onehot_table_grad`), and its one-hot matrix's
/// bytes at most: its product costs `2·vocab·n·C` flops against the sort's fixed ~0.1 ms at
/// 16384 ids (the GPT's 75 ids: ~25 µs against ~95).
const ONEHOT_MAX_VOCAB: usize = 256;
const ONEHOT_MAX_BYTES: usize = 64 << 20;

fn onehot_fits(n: usize, vocab: usize) -> bool {
    vocab <= ONEHOT_MAX_VOCAB && n.saturating_mul(vocab.next_multiple_of(8) * 2) <= ONEHOT_MAX_BYTES
}

/// `dtable = onehot(ids)ᵀ · dy` for 16-bit `dy` `[n, C]`: the one-hot rows (1.0 at each id,
/// `vocab` rounded up to whole 16-byte vectors) then one matrix product, whose f32 sums are
/// deterministic (split-K slices added in order).
fn onehot_table_grad(dy: &Tensor, ids: &DeviceBuffer, vocab: usize) -> Result<Tensor> {
    const OP: &str = "embedding_backward";
    let (ctx, dtype, n) = (dy.context(), dy.dtype(), dy.shape()[0]);
    let width = vocab.next_multiple_of(8);
    let onehot = Tensor::uninit_as(ctx, &[n, width], dtype, OP)?;
    let one_bits = match dtype {
        DType::BF16 => half::bf16::ONE.to_bits(),
        _ => half::f16::ONE.to_bits(),
    } as u32;
    let stream = ctx.stream(OP)?;
    let cfg = LaunchConfig::covering(n * (width / 8), ELEMENTWISE_BLOCK);
    // SAFETY: `embedding_onehot_b16(ids, one, out, n, width)`: ids holds n u32 below `vocab`
    // (checked by `check_ids`) ≤ width, out n·width 16-bit values (width a multiple of 8, the
    // pool block 16-byte aligned); any grid.
    unsafe {
        kernels::embedding_onehot_b16.launch(
            stream,
            cfg,
            (ids.dev_ptr(), one_bits, onehot.ptr_mut(), n, width),
        )?
    };
    let table = Gemm::new(&onehot, dy).transpose_a(true).run()?;
    if width == vocab {
        Ok(table)
    } else {
        table.rows(0..vocab)
    }
}

/// The table gradient through a sort of the ids (any dtype and vocabulary; see the kernels'
/// module documentation): rows summed in increasing row order.
fn sorted_table_grad(dy: &Tensor, buf: &DeviceBuffer, vocab: usize) -> Result<Tensor> {
    const OP: &str = "embedding_backward";
    let (ctx, dtype, shape) = (dy.context(), dy.dtype(), dy.shape());
    let (n, c) = (shape[0], shape[1]);
    let stream = ctx.stream(OP)?;
    let pool = &stream.device.pool;
    let (padded, tile) = (n.next_power_of_two().max(EMBEDDING_SORT_TILE), EMBEDDING_SORT_TILE);
    let keys = pool.alloc(stream, padded * 8, OP)?;
    let mut sort_cfg = blocks_of(OP, shape, padded / tile, EMBEDDING_SORT_THREADS)?;
    sort_cfg.shared_bytes = (tile * 8) as u32;
    let mut stage = 0;
    loop {
        // SAFETY: `embedding_sort_tile(ids, keys, n, k, tile)`: one block of SORT_THREADS
        // per tile of the `padded` keys (tile a power of two dividing it, 8·tile bytes of
        // dynamic shared memory); ids holds n u32.
        unsafe {
            kernels::embedding_sort_tile.launch(
                stream,
                sort_cfg,
                (buf.dev_ptr(), keys.dev_ptr_mut(), n, stage, tile),
            )?
        };
        stage = if stage == 0 { 2 * tile } else { 2 * stage };
        if stage > padded {
            break;
        }
        let mut j = stage / 2;
        while j >= tile {
            let cfg = LaunchConfig::covering(padded / 2, ELEMENTWISE_BLOCK);
            // SAFETY: `embedding_sort_step(keys, half, k, j)`: pairs (i, i + j) of the
            // `padded` = 2·half keys, j < k ≤ padded, powers of two; any grid.
            unsafe {
                kernels::embedding_sort_step.launch(
                    stream,
                    cfg,
                    (keys.dev_ptr_mut(), padded / 2, stage, j),
                )?
            };
            j /= 2;
        }
    }
    let starts = pool.alloc(stream, (vocab + 1) * 4, OP)?;
    // SAFETY: `embedding_bucket_starts(keys, starts, n, vocab)`: the first n keys are the
    // sorted (id < vocab, position) pairs; starts holds vocab + 1 u32, each written once.
    unsafe {
        let cfg = LaunchConfig::covering(n + 1, ELEMENTWISE_BLOCK);
        kernels::embedding_bucket_starts.launch(
            stream,
            cfg,
            (keys.dev_ptr(), starts.dev_ptr_mut(), n, vocab),
        )?
    };
    let partials = pool.alloc(stream, n * c * 4, OP)?;
    let tiles = by_dtype!(embedding_bwd_tiles_f32, embedding_bwd_tiles_f16, embedding_bwd_tiles_bf16);
    let cfg = blocks_of(OP, shape, n.div_ceil(EMBEDDING_SUM_TILE), EMBEDDING_BLOCK)?;
    // SAFETY: `embedding_bwd_tiles_*(dy, keys, partials, n, c)`: one block per tile of
    // SUM_TILE sorted keys, whose positions index dy's n rows of c elements; partials
    // holds n·c floats (16-byte vectors only when c is a whole number of them).
    launch_by_dtype!(tiles, dtype, |k| unsafe {
        k.launch(stream, cfg, (dy.ptr(), keys.dev_ptr(), partials.dev_ptr_mut(), n, c))?
    });
    let dtable = Tensor::uninit_as(ctx, &[vocab, c], dtype, OP)?;
    let table = by_dtype!(embedding_bwd_table_f32, embedding_bwd_table_f16, embedding_bwd_table_bf16);
    let cfg = blocks_of(OP, shape, vocab, EMBEDDING_BLOCK)?;
    // SAFETY: `embedding_bwd_table_*(partials, starts, dtable, c)`: one block per id
    // v < vocab, whose bucket [starts[v], starts[v+1]) ⊆ [0, n) indexes written partials;
    // dtable holds vocab·c elements.
    launch_by_dtype!(table, dtype, |k| unsafe {
        k.launch(stream, cfg, (partials.dev_ptr(), starts.dev_ptr(), dtable.ptr_mut(), c))?
    });
    Ok(dtable)
}
