//! Embedding lookup and backward on the GPU against the CPU backend (f64 sums), for each dtype;
//! the backward bit-identical from run to run; gradients against finite differences of an f64
//! reference; typed errors for bad input.
mod common;
use common::*;
use ferrocuda::{embedding, embedding_backward, Context, DType, Error, Tensor};

/// `(vocab, C, ids, T)`: a one-token vocabulary (every id repeated), the GPT's (75 tokens, 16384
/// ids, 256 positions), a GPT-2 vocabulary, widths that are not whole 16-byte vectors (31, 12 for
/// 16-bit), a single id, and more ids than one sort tile holds (40000).
fn cases() -> Vec<(usize, usize, usize, Option<usize>)> {
    if under_sanitizer() {
        return vec![
            (1, 5, 40, None),
            (75, 64, 512, Some(64)),
            (1000, 31, 300, Some(3)),
            (50, 8, 20000, None),
        ];
    }
    vec![
        (1, 5, 5000, None),
        (1, 8, 1, Some(1)),
        (75, 384, 16384, Some(256)),
        (50257, 96, 4099, None),
        (1000, 31, 1000, Some(10)),
        (13, 12, 100, Some(4)),
        (7, 8, 33, Some(3)),
        (300, 16, 40000, Some(8)),
    ]
}

/// Ids below `vocab`, skewed so that low ids repeat often.
fn token_ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    randn_host(n, seed)
        .iter()
        .map(|v| ((v.abs() * v.abs() * vocab as f32 / 4.0) as usize % vocab) as u32)
        .collect()
}

fn tensors(gpu: &Context, shape: &[usize], seed: u64, dtype: DType) -> (Tensor, Tensor) {
    let (g, c) = pair(gpu, &randn_host(shape.iter().product(), seed), shape);
    (g.to_dtype(dtype).unwrap(), c.to_dtype(dtype).unwrap())
}

fn embedding_matches_cpu(gpu: &Context) {
    let cpu = Context::cpu();
    for (s, (vocab, c, n, t)) in cases().into_iter().enumerate() {
        let ids = token_ids(n, vocab, 1500 + s as u64);
        let (ig, ic) = (gpu.labels(&ids, vocab).unwrap(), cpu.labels(&ids, vocab).unwrap());
        for dtype in DTYPES {
            let what = format!("embedding vocab {vocab} C {c} n {n} T {t:?} {dtype:?}");
            let (tg, tc) = tensors(gpu, &[vocab, c], 1510 + s as u64, dtype);
            let pos = t.map(|t| tensors(gpu, &[t, c], 1520 + s as u64, dtype));
            drop(gpu.full_as(&[n, c], f32::NAN, dtype).unwrap());
            let yg = embedding(&tg, &ig, pos.as_ref().map(|p| &p.0)).unwrap();
            let yc = embedding(&tc, &ic, pos.as_ref().map(|p| &p.1)).unwrap();
            assert_eq!((yg.shape(), yg.dtype()), (&[n, c][..], dtype), "{what}");
            // One f32 addition rounded once to the dtype on both sides: the same bits.
            assert_same(&what, &yg.to_vec().unwrap(), &yc.to_vec().unwrap());

            let (dg, dc) = tensors(gpu, &[n, c], 1530 + s as u64, dtype);
            drop(gpu.full_as(&[vocab, c], f32::NAN, dtype).unwrap());
            let (tab_g, pos_g) = embedding_backward(&dg, &ig, vocab, t).unwrap();
            let (tab_c, pos_c) = embedding_backward(&dc, &ic, vocab, t).unwrap();
            assert_eq!((tab_g.shape(), tab_g.dtype()), (&[vocab, c][..], dtype), "{what}");
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-2 };
            let tab = tab_g.to_vec().unwrap();
            assert_close(&format!("{what} dtable"), &tab, &tab_c.to_vec().unwrap(), tol);
            let (again, pos_again) = embedding_backward(&dg, &ig, vocab, t).unwrap();
            assert_same(&format!("{what} dtable run to run"), &again.to_vec().unwrap(), &tab);
            match (pos_g, pos_c, pos_again) {
                (Some(pg), Some(pc), Some(pa)) => {
                    let pv = pg.to_vec().unwrap();
                    assert_close(&format!("{what} dpos"), &pv, &pc.to_vec().unwrap(), tol);
                    assert_same(&format!("{what} dpos run to run"), &pa.to_vec().unwrap(), &pv);
                }
                (None, None, None) => assert!(t.is_none(), "{what}: no dpos"),
                _ => panic!("{what}: dpos on one side only"),
            }
        }
    }
}

/// L = Σ w ⊙ embedding(table, ids, pos): the backward pass against central differences of an f64
/// reference of L (every table and position element bumped).
fn gradients_match_finite_differences(ctx: &Context) {
    let (vocab, c, t, n) = (5, 3, 2, 8);
    let ids = [4u32, 0, 4, 1, 4, 4, 0, 2];
    let table = randn_host(vocab * c, 1540);
    let pos = randn_host(t * c, 1541);
    let w = randn_host(n * c, 1542);
    let loss = |table: &[f64], pos: &[f64]| -> f64 {
        (0..n)
            .flat_map(|i| (0..c).map(move |j| (i, j)))
            .map(|(i, j)| w[i * c + j] as f64 * (table[ids[i] as usize * c + j] + pos[(i % t) * c + j]))
            .sum()
    };
    let labels = ctx.labels(&ids, vocab).unwrap();
    let wt = ctx.from_slice(&w, &[n, c]).unwrap();
    let (dtable, dpos) = embedding_backward(&wt, &labels, vocab, Some(t)).unwrap();
    let (dtable, dpos) = (dtable.to_vec().unwrap(), dpos.unwrap().to_vec().unwrap());
    let (t64, p64): (Vec<f64>, Vec<f64>) =
        (table.iter().map(|&v| v as f64).collect(), pos.iter().map(|&v| v as f64).collect());
    let h = 1e-6;
    for (which, got) in [(0, &dtable), (1, &dpos)] {
        for (i, &g) in got.iter().enumerate() {
            let bump = |d: f64| {
                let (mut a, mut b) = (t64.clone(), p64.clone());
                [&mut a, &mut b][which][i] += d;
                loss(&a, &b)
            };
            let numeric = (bump(h) - bump(-h)) / (2.0 * h);
            assert!(
                (g as f64 - numeric).abs() < 1e-4 * (1.0 + numeric.abs()),
                "d[{which}][{i}]: {g} vs {numeric}"
            );
        }
    }
    // The forward pass is what the loss differentiates.
    let y = embedding(
        &ctx.from_slice(&table, &[vocab, c]).unwrap(),
        &labels,
        Some(&ctx.from_slice(&pos, &[t, c]).unwrap()),
    )
    .unwrap();
    let total: f64 = y.to_vec().unwrap().iter().zip(&w).map(|(&a, &b)| a as f64 * b as f64).sum();
    assert!((total - loss(&t64, &p64)).abs() < 1e-4 * (1.0 + total.abs()), "forward: {total}");
}

fn gpu_gradients(gpu: &Context) {
    gradients_match_finite_differences(gpu);
}

fn cpu_gradients() {
    gradients_match_finite_differences(&Context::cpu());
}

/// Empty id lists: an empty output, zero gradients.
fn empty_on(ctx: &Context) {
    let ids = ctx.labels(&[], 4).unwrap();
    let table = ctx.from_slice(&randn_host(12, 1550), &[4, 3]).unwrap();
    assert_eq!(embedding(&table, &ids, None).unwrap().shape(), &[0, 3]);
    let (dt, dp) = embedding_backward(&ctx.zeros(&[0, 3]).unwrap(), &ids, 4, Some(2)).unwrap();
    assert_eq!(dt.to_vec().unwrap(), vec![0.0; 12]);
    assert_eq!(dp.unwrap().to_vec().unwrap(), vec![0.0; 6]);
}

fn bad_input_on(ctx: &Context) {
    let table = ctx.zeros(&[10, 4]).unwrap();
    let ids = ctx.labels(&[1, 9, 3, 0, 2, 2], 10).unwrap();
    let err = ctx.labels(&[1, 10], 10).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "labels", .. }), "{err}");
    assert!(err.to_string().contains("label 10"), "{err}");
    let err = embedding(&table, &ctx.labels(&[1, 2], 11).unwrap(), None).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "embedding", .. }), "{err}");
    let err = embedding(&ctx.zeros(&[40]).unwrap(), &ids, None).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "embedding", .. }), "{err}");
    let err = embedding(&table, &ids, Some(&ctx.zeros(&[4, 4]).unwrap())).unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument { op: "embedding", .. }), "T = 4 does not divide 6: {err}");
    let err = embedding(&table, &ids, Some(&ctx.zeros(&[3, 5]).unwrap())).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "embedding", .. }), "{err}");
    let half = ctx.full_as(&[3, 4], 0.0, DType::BF16).unwrap();
    let err = embedding(&table, &ids, Some(&half)).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "embedding", .. }), "{err}");
    let dy = ctx.zeros(&[6, 4]).unwrap();
    let err = embedding_backward(&ctx.zeros(&[5, 4]).unwrap(), &ids, 10, None).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "embedding_backward", .. }), "{err}");
    let err = embedding_backward(&dy, &ids, 12, None).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "embedding_backward", .. }), "{err}");
    for t in [0, 4] {
        let err = embedding_backward(&dy, &ids, 10, Some(t)).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { op: "embedding_backward", .. }), "T = {t}: {err}");
    }
    if ctx.is_cuda() {
        let err = embedding(&table, &Context::cpu().labels(&[1], 10).unwrap(), None).unwrap_err();
        assert!(matches!(err, Error::DeviceMismatch { op: "embedding", .. }), "{err}");
    }
}

fn main() {
    run(&[
        ("gpu_embedding_matches_cpu", Case::Gpu(embedding_matches_cpu)),
        ("gpu_embedding_gradients_match_finite_differences", Case::Gpu(gpu_gradients)),
        ("cpu_embedding_gradients_match_finite_differences", Case::Cpu(cpu_gradients)),
        ("gpu_embedding_empty", Case::Gpu(empty_on)),
        ("cpu_embedding_empty", Case::Cpu(|| empty_on(&Context::cpu()))),
        ("gpu_embedding_bad_input", Case::Gpu(bad_input_on)),
        ("cpu_embedding_bad_input", Case::Cpu(|| bad_input_on(&Context::cpu()))),
    ]);
}
