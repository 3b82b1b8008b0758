//! Flash attention: the GPU forward and backward against the CPU backend (f64) at odd sizes
//! (lengths 1, 17, 127, 1000, 2049; Sq ≠ Sk both ways; GQA and MQA; every head dim; causal and
//! not; f16 and bf16; outputs poisoned with NaN), the CPU backward against finite differences of
//! an f64 reference, determinism, the packed-projection form (`attention_qkv_packed`: the same
//! bits as the head-major form on the GPU, and close to the CPU), the `MultiHeadAttention`
//! layer's gradients GPU vs CPU, and typed errors for bad input.
mod common;
use common::*;
use ferrocuda::layers::MultiHeadAttention;
use ferrocuda::{
    attention, attention_backward, attention_qkv_packed, attention_qkv_packed_backward, AttentionParams,
    Context, DType, Error, Layer, Tensor,
};

/// (batch, query heads, kv heads, Sq, Sk, head dim, causal).
type Shape = (usize, usize, usize, usize, usize, usize, bool);

const FORWARD: [Shape; 21] = [
    (1, 1, 1, 1, 1, 64, false),
    (2, 3, 3, 17, 17, 64, true),
    (2, 3, 3, 17, 17, 128, false),
    (1, 4, 2, 127, 127, 128, true),
    (1, 2, 1, 1000, 1000, 64, false),
    (1, 2, 2, 1000, 1000, 128, true),
    (1, 1, 1, 2049, 2049, 128, true),
    (1, 2, 2, 2049, 2049, 64, false),
    (2, 2, 2, 17, 127, 64, true),
    (1, 2, 2, 127, 17, 128, true),
    (1, 2, 1, 1000, 1, 64, true),
    (1, 1, 1, 1, 1000, 128, true),
    (1, 2, 2, 127, 127, 32, true),
    (2, 1, 1, 100, 61, 96, false),
    (1, 2, 1, 127, 200, 256, true),
    (1, 1, 1, 1000, 1000, 256, false),
    (1, 3, 1, 2049, 1000, 96, true),
    // The Hopper path's tiles (128 query rows, 128 keys) and GQA with batches.
    (2, 4, 2, 1000, 2049, 64, true),
    (2, 4, 1, 2049, 1000, 128, true),
    (3, 2, 1, 129, 257, 128, false),
    (1, 1, 1, 2049, 2049, 64, true),
];

/// The D = 64 and 128 cases run the Hopper (`wgmma`) kernels on an H100, the others the
/// `mma.sync` ones.
const BACKWARD: [Shape; 14] = [
    (1, 1, 1, 1, 1, 64, false),
    (2, 3, 3, 17, 17, 64, true),
    (1, 4, 2, 127, 127, 128, true),
    (1, 2, 1, 300, 300, 64, false),
    (1, 2, 2, 17, 127, 64, true),
    (1, 2, 2, 127, 17, 128, true),
    (1, 2, 2, 127, 127, 32, true),
    (1, 1, 1, 100, 61, 96, false),
    (1, 2, 1, 127, 200, 256, true),
    (1, 1, 1, 1000, 1000, 128, true),
    (1, 2, 2, 1000, 1000, 64, false),
    (2, 4, 2, 130, 257, 128, false),
    (1, 3, 1, 300, 129, 64, true),
    (1, 2, 2, 1, 300, 128, true),
];

fn dtypes(case: usize) -> Vec<DType> {
    // Both dtypes for the small cases; alternate for the long ones (the f64 oracle is the cost).
    if case < 4 {
        vec![DType::F16, DType::BF16]
    } else if case % 2 == 0 {
        vec![DType::BF16]
    } else {
        vec![DType::F16]
    }
}

fn tensor(ctx: &Context, data: &[f32], shape: &[usize], dtype: DType) -> Tensor {
    ctx.from_slice(data, shape).unwrap().to_dtype(dtype).unwrap()
}

/// q, k, v (and dout) on the GPU and the CPU backend, the same values.
fn inputs(gpu: &Context, s: Shape, dtype: DType, seed: u64) -> (Vec<Tensor>, Vec<Tensor>) {
    let (b, hq, hkv, sq, sk, d, _) = s;
    let shapes = [[b, hq, sq, d], [b, hkv, sk, d], [b, hkv, sk, d], [b, hq, sq, d]];
    let (mut g, mut c) = (Vec::new(), Vec::new());
    for (i, shape) in shapes.iter().enumerate() {
        let data = randn_host(shape.iter().product(), seed + i as u64);
        g.push(tensor(gpu, &data, shape, dtype));
        c.push(tensor(&Context::cpu(), &data, shape, dtype));
    }
    (g, c)
}

/// [`poison_pool`] for a 16-bit output of `elements`: f32 NaNs whose two halves are both NaN in
/// f16 and bf16 (a plain f32 NaN's low half is 0).
fn poison16(gpu: &Context, elements: usize) {
    drop(gpu.full(&[elements.div_ceil(2)], f32::from_bits(0x7fff_7fff)).expect("poison"));
}

fn params(s: Shape) -> AttentionParams {
    AttentionParams::default().causal(s.6)
}

/// lse: +∞ exactly where the CPU has it, the finite ones close.
fn assert_lse(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.is_infinite(), w.is_infinite(), "{what}: lse[{i}] = {g}, want {w}");
    }
    let finite = |v: &[f32]| v.iter().map(|&x| if x.is_finite() { x } else { 0.0 }).collect::<Vec<_>>();
    assert_close(&format!("{what} lse"), &finite(got), &finite(want), 1e-4);
}

/// Under compute-sanitizer (`FERROCUDA_SANITIZER=1`), which slows kernels by orders of
/// magnitude, only the shapes of at most 256 rows and keys: every head dim, GQA, MQA, causal and
/// Sq ≠ Sk are still among them.
fn shapes(all: &[Shape]) -> impl Iterator<Item = (usize, Shape)> + '_ {
    let sanitizer = under_sanitizer();
    all.iter().copied().enumerate().filter(move |(_, s)| !sanitizer || s.3.max(s.4) <= 256)
}

fn forward_matches_cpu(gpu: &Context) {
    for (i, s) in shapes(&FORWARD) {
        for dtype in dtypes(i) {
            let (g, c) = inputs(gpu, s, dtype, 100 + 10 * i as u64);
            poison16(gpu, s.0 * s.1 * s.3 * s.5);
            poison_pool(gpu, &[s.0, s.1, s.3]);
            let (og, lg) = attention(&g[0], &g[1], &g[2], params(s)).unwrap();
            let (oc, lc) = attention(&c[0], &c[1], &c[2], params(s)).unwrap();
            let what = format!("{s:?} {dtype:?}");
            let (og, oc) = (og.to_vec().unwrap(), oc.to_vec().unwrap());
            println!("    forward {what}: rel err {:.2e}", rel_err(&og, &oc));
            assert_close(&what, &og, &oc, 1e-2);
            assert_lse(&what, &lg.to_vec().unwrap(), &lc.to_vec().unwrap());
        }
    }
}

/// A given softmax scale: positive (the Hopper kernels fold it into the exponent) and negative
/// (which the Hopper path leaves to the `mma.sync` kernels).
fn forward_with_scale_matches_cpu(gpu: &Context) {
    println!("    sm_90a kernels: {}", gpu.uses_sm90a_kernels());
    for (i, scale) in [0.3f32, -0.2].into_iter().enumerate() {
        let s = (1, 2, 1, 300, 200, 64 * (i + 1), true);
        let (g, c) = inputs(gpu, s, DType::BF16, 700 + i as u64);
        let p = params(s).scale(scale);
        let (og, lg) = attention(&g[0], &g[1], &g[2], p).unwrap();
        let (oc, lc) = attention(&c[0], &c[1], &c[2], p).unwrap();
        let what = format!("{s:?} scale {scale}");
        assert_close(&what, &og.to_vec().unwrap(), &oc.to_vec().unwrap(), 1e-2);
        assert_lse(&what, &lg.to_vec().unwrap(), &lc.to_vec().unwrap());
    }
}

fn backward_matches_cpu(gpu: &Context) {
    for (i, s) in shapes(&BACKWARD) {
        for dtype in dtypes(i) {
            let (g, c) = inputs(gpu, s, dtype, 500 + 10 * i as u64);
            let (og, lg) = attention(&g[0], &g[1], &g[2], params(s)).unwrap();
            let (oc, lc) = attention(&c[0], &c[1], &c[2], params(s)).unwrap();
            poison16(gpu, s.0 * s.1 * s.3 * s.5);
            poison16(gpu, s.0 * s.2 * s.4 * s.5);
            let bg = attention_backward(&g[3], &g[0], &g[1], &g[2], &og, &lg, params(s)).unwrap();
            let bc = attention_backward(&c[3], &c[0], &c[1], &c[2], &oc, &lc, params(s)).unwrap();
            for (name, x, y) in [("dq", &bg.0, &bc.0), ("dk", &bg.1, &bc.1), ("dv", &bg.2, &bc.2)] {
                let (x, y) = (x.to_vec().unwrap(), y.to_vec().unwrap());
                let what = format!("{s:?} {dtype:?} {name}");
                println!("    backward {what}: rel err {:.2e}", rel_err(&x, &y));
                assert_close(&what, &x, &y, 3e-2);
            }
        }
    }
}

/// Two runs of the backward give the same bits (no order-dependent atomics): GQA (dK/dV summed
/// over the group) and one query head per kv head (written directly), both head dims of the
/// Hopper kernels.
fn backward_is_deterministic(gpu: &Context) {
    let sanitizer = under_sanitizer();
    let cases: [Shape; 2] = if sanitizer {
        [(1, 4, 2, 130, 77, 128, true), (1, 2, 2, 77, 200, 64, false)]
    } else {
        [(2, 4, 2, 1000, 777, 128, true), (1, 3, 3, 555, 1000, 64, false)]
    };
    for s in cases {
        let (g, _) = inputs(gpu, s, DType::BF16, 900);
        let p = params(s).deterministic(true);
        let (o, l) = attention(&g[0], &g[1], &g[2], p).unwrap();
        let run = || {
            let (a, b, c) = attention_backward(&g[3], &g[0], &g[1], &g[2], &o, &l, p).unwrap();
            [a.to_vec().unwrap(), b.to_vec().unwrap(), c.to_vec().unwrap()]
        };
        let (x, y) = (run(), run());
        for (a, b) in x.iter().zip(&y) {
            assert!(
                a.iter().zip(b).all(|(u, v)| u.to_bits() == v.to_bits()),
                "{s:?}: backward differs between runs"
            );
        }
    }
}

/// f64 attention of one (batch, head) set of values: `out[i][e]` for `q [Sq, D]`, `k`, `v [Sk, D]`.
fn attention64(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (sq, sk, d): (usize, usize, usize),
    causal: bool,
) -> Vec<f64> {
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; sq * d];
    for i in 0..sq {
        let s: Vec<f64> = (0..sk)
            .map(|j| {
                if causal && j as isize > i as isize + sk as isize - sq as isize {
                    f64::NEG_INFINITY
                } else {
                    scale * (0..d).map(|e| q[i * d + e] * k[j * d + e]).sum::<f64>()
                }
            })
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            continue;
        }
        let p: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let l: f64 = p.iter().sum();
        for e in 0..d {
            out[i * d + e] = (0..sk).map(|j| p[j] * v[j * d + e]).sum::<f64>() / l;
        }
    }
    out
}

/// The CPU backward (f16, one head pair, GQA 2:1) against central differences of the f64
/// reference's loss Σ out·dout, at the same (f16-exact) inputs.
fn cpu_backward_matches_finite_differences() {
    let cpu = Context::cpu();
    for causal in [false, true] {
        for (sq, sk) in [(3, 5), (5, 3)] {
            let (hq, d) = (2, 32);
            let s = (1, hq, 1, sq, sk, d, causal);
            let round = |v: Vec<f32>| v.into_iter().map(|x| DType::F16.round(x as f64)).collect::<Vec<f32>>();
            let q = round(randn_host(hq * sq * d, 40));
            let k = round(randn_host(sk * d, 41));
            let v = round(randn_host(sk * d, 42));
            let dout = round(randn_host(hq * sq * d, 43));
            let t = |x: &[f32], shape: &[usize]| tensor(&cpu, x, shape, DType::F16);
            let (qt, kt, vt) = (t(&q, &[1, hq, sq, d]), t(&k, &[1, 1, sk, d]), t(&v, &[1, 1, sk, d]));
            let dt = t(&dout, &[1, hq, sq, d]);
            let (o, l) = attention(&qt, &kt, &vt, params(s)).unwrap();
            let (dq, dk, dv) = attention_backward(&dt, &qt, &kt, &vt, &o, &l, params(s)).unwrap();
            let f64s = |x: &[f32]| x.iter().map(|&y| y as f64).collect::<Vec<f64>>();
            let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
                (0..hq)
                    .map(|h| {
                        let o = attention64(&q[h * sq * d..(h + 1) * sq * d], k, v, (sq, sk, d), causal);
                        o.iter().zip(&dout[h * sq * d..]).map(|(a, &b)| a * b as f64).sum::<f64>()
                    })
                    .sum()
            };
            let (q64, k64, v64) = (f64s(&q), f64s(&k), f64s(&v));
            let h = 1e-5;
            let numeric = |which: usize| -> Vec<f32> {
                let base = [&q64, &k64, &v64][which];
                (0..base.len())
                    .map(|i| {
                        let mut plus = [q64.clone(), k64.clone(), v64.clone()];
                        let mut minus = plus.clone();
                        plus[which][i] += h;
                        minus[which][i] -= h;
                        ((loss(&plus[0], &plus[1], &plus[2]) - loss(&minus[0], &minus[1], &minus[2]))
                            / (2.0 * h)) as f32
                    })
                    .collect()
            };
            for (which, got) in [(0, &dq), (1, &dk), (2, &dv)] {
                let what = format!("causal={causal} Sq={sq} Sk={sk} grad {which}");
                assert_close(&what, &got.to_vec().unwrap(), &numeric(which), 1e-2);
            }
        }
    }
}

/// The CPU forward against the f64 reference of this file, including rows that see no key.
fn cpu_forward_matches_reference() {
    let cpu = Context::cpu();
    for causal in [false, true] {
        let (sq, sk, d) = (9, 4, 64);
        let q = randn_host(sq * d, 60);
        let k = randn_host(sk * d, 61);
        let v = randn_host(sk * d, 62);
        let t = |x: &[f32], s: usize| tensor(&cpu, x, &[1, 1, s, d], DType::BF16);
        let (qt, kt, vt) = (t(&q, sq), t(&k, sk), t(&v, sk));
        let (o, l) = attention(&qt, &kt, &vt, AttentionParams::default().causal(causal)).unwrap();
        let f64s = |x: &Tensor| x.to_vec().unwrap().iter().map(|&y| y as f64).collect::<Vec<f64>>();
        let want: Vec<f32> = attention64(&f64s(&qt), &f64s(&kt), &f64s(&vt), (sq, sk, d), causal)
            .iter()
            .map(|&x| x as f32)
            .collect();
        assert_close(&format!("causal={causal}"), &o.to_vec().unwrap(), &want, 1e-2);
        let lse = l.to_vec().unwrap();
        // Under the mask, the first Sq − Sk rows see no key: output 0, lse +∞.
        let empty = if causal { sq - sk } else { 0 };
        assert!(lse[..empty].iter().all(|x| *x == f32::INFINITY), "{lse:?}");
        assert!(lse[empty..].iter().all(|x| x.is_finite()), "{lse:?}");
        assert!(o.to_vec().unwrap()[..empty * d].iter().all(|&x| x == 0.0));
    }
}

/// (batch, query heads, kv heads, S, head dim, causal) of the packed form: the Hopper kernels'
/// head dims with one query head per kv head (dK, dV written in place) and with GQA (summed, then
/// copied in), S off the tiles, a GPT layer's shape, and head dims that take the copies.
const PACKED: [(usize, usize, usize, usize, usize, bool); 8] = [
    (1, 1, 1, 1, 64, false),
    (2, 3, 3, 130, 64, true),
    (1, 4, 2, 257, 128, false),
    (2, 2, 1, 1000, 64, true),
    (4, 6, 6, 256, 64, true),
    (1, 2, 2, 129, 128, true),
    (1, 2, 2, 17, 32, true),
    (2, 2, 1, 100, 96, false),
];

/// The (token-major, head-major) offsets of every row of heads `h0..h0 + h` of a token-major
/// `[b, s, htot, d]` tensor and of the head-major `[b, h, s, d]` one that holds them.
fn head_rows([b, s, htot, d]: [usize; 4], (h0, h): (usize, usize)) -> Vec<(usize, usize)> {
    let mut rows = Vec::new();
    for bb in 0..b {
        for hh in 0..h {
            for t in 0..s {
                rows.push((((bb * s + t) * htot + h0 + hh) * d, ((bb * h + hh) * s + t) * d));
            }
        }
    }
    rows
}

/// `attention_qkv_packed` and its backward: the GPU's outputs are the bits of the head-major form
/// on the same inputs (the same kernels reading and writing other addresses), and the CPU's are
/// close; outputs poisoned with NaN first.
fn packed_matches_head_major(gpu: &Context) {
    let cpu = Context::cpu();
    for (i, &(b, hq, hkv, s, d, causal)) in PACKED.iter().enumerate() {
        if under_sanitizer() && s > 256 {
            continue;
        }
        let dtype = if i % 2 == 0 { DType::BF16 } else { DType::F16 };
        let htot = hq + 2 * hkv;
        let (qkv, dout) =
            (randn_host(b * s * htot * d, 300 + i as u64), randn_host(b * s * hq * d, 400 + i as u64));
        let p = AttentionParams::default().causal(causal);
        let what = format!("packed {:?} {dtype:?}", (b, hq, hkv, s, d, causal));
        let run = |ctx: &Context| {
            if ctx.is_cuda() {
                poison16(ctx, b * s * hq * d);
                poison_pool(ctx, &[b, hq, s]);
            }
            let qkv = tensor(ctx, &qkv, &[b, s, htot, d], dtype);
            let (out, lse) = attention_qkv_packed(&qkv, (hq, hkv), p).unwrap();
            if ctx.is_cuda() {
                poison16(ctx, b * s * htot * d);
            }
            let dout = tensor(ctx, &dout, &[b, s, hq, d], dtype);
            let dqkv = attention_qkv_packed_backward(&dout, &qkv, &out, &lse, (hq, hkv), p).unwrap();
            (out.to_vec().unwrap(), lse.to_vec().unwrap(), dqkv.to_vec().unwrap())
        };
        let (og, lg, dg) = run(gpu);
        let (oc, lc, dc) = run(&cpu);
        println!("    {what}: out rel err {:.2e}, dqkv {:.2e}", rel_err(&og, &oc), rel_err(&dg, &dc));
        assert_close(&format!("{what} out"), &og, &oc, 1e-2);
        assert_lse(&what, &lg, &lc);
        assert_close(&format!("{what} dqkv"), &dg, &dc, 3e-2);

        // The head-major form on the GPU, the same values.
        let token_shape = [b, s, htot, d];
        let mut parts = Vec::new();
        for (h0, h) in [(0, hq), (hq, hkv), (hq + hkv, hkv), (0, hq)] {
            let (src, shape) = if parts.len() < 3 { (&qkv, token_shape) } else { (&dout, [b, s, hq, d]) };
            let mut heads = vec![0.0; b * h * s * d];
            for (tk, hd) in head_rows(shape, (h0, h)) {
                heads[hd..hd + d].copy_from_slice(&src[tk..tk + d]);
            }
            parts.push(tensor(gpu, &heads, &[b, h, s, d], dtype));
        }
        let (o, l) = attention(&parts[0], &parts[1], &parts[2], p).unwrap();
        let (dq, dk, dv) = attention_backward(&parts[3], &parts[0], &parts[1], &parts[2], &o, &l, p).unwrap();
        let mut want_out = vec![0.0; b * s * hq * d];
        let heads = o.to_vec().unwrap();
        for (tk, hd) in head_rows([b, s, hq, d], (0, hq)) {
            want_out[tk..tk + d].copy_from_slice(&heads[hd..hd + d]);
        }
        let mut want_dqkv = vec![0.0; b * s * htot * d];
        for (g, h0, h) in [(&dq, 0, hq), (&dk, hq, hkv), (&dv, hq + hkv, hkv)] {
            let heads = g.to_vec().unwrap();
            for (tk, hd) in head_rows(token_shape, (h0, h)) {
                want_dqkv[tk..tk + d].copy_from_slice(&heads[hd..hd + d]);
            }
        }
        assert!(og == want_out, "{what}: out differs from the head-major form's");
        assert!(lg == l.to_vec().unwrap(), "{what}: lse differs from the head-major form's");
        assert!(dg == want_dqkv, "{what}: dqkv differs from the head-major form's");
    }
}

fn mha(ctx: &Context, causal: bool, heads: (usize, usize, usize)) -> MultiHeadAttention {
    MultiHeadAttention::new(ctx, 48, heads, causal, 77).unwrap()
}

/// The layer at head dim 32 (copies to and from the head-major kernels) and 64 (the packed
/// Hopper path on an H100), with grouped kv heads and without.
fn layer_matches_cpu(gpu: &Context) {
    let cpu = Context::cpu();
    for (batch, seq, causal, heads) in [
        (1, 1, false, (4, 2, 32)),
        (2, 33, true, (4, 2, 32)),
        (3, 130, false, (4, 2, 32)),
        (2, 130, true, (3, 3, 64)),
        (1, 200, false, (4, 2, 64)),
    ] {
        let (mut lg, mut lc) = (mha(gpu, causal, heads), mha(&cpu, causal, heads));
        let x = randn_host(batch * seq * 48, 70);
        let dy = randn_host(batch * seq * 48, 71);
        let (xg, xc) = pair(gpu, &x, &[batch, seq, 48]);
        let yg = lg.forward(&xg).unwrap();
        let yc = lc.forward(&xc).unwrap();
        let (dg, dc) = pair(gpu, &dy, &[batch, seq, 48]);
        let dxg = lg.backward(&dg).unwrap();
        let dxc = lc.backward(&dc).unwrap();
        let mut outs = vec![("y", yg.to_vec().unwrap(), yc.to_vec().unwrap())];
        outs.push(("dx", dxg.to_vec().unwrap(), dxc.to_vec().unwrap()));
        for (i, (pg, pc)) in lg.params_mut().iter().zip(lc.params_mut()).enumerate() {
            outs.push((
                ["dWqkv", "dbqkv", "dWo", "dbo"][i],
                pg.grad().unwrap().to_vec().unwrap(),
                pc.grad().unwrap().to_vec().unwrap(),
            ));
        }
        for (name, g, c) in outs {
            let what = format!("batch {batch}, seq {seq}, causal {causal}, heads {heads:?}: {name}");
            println!("    layer {what}: rel err {:.2e}", rel_err(&g, &c));
            assert_close(&what, &g, &c, 3e-2);
        }
    }
}

fn bad_input(ctx: &Context) {
    let t =
        |shape: &[usize], dtype: DType| tensor(ctx, &randn_host(shape.iter().product(), 80), shape, dtype);
    let p = AttentionParams::default();
    let q = t(&[1, 3, 5, 64], DType::F16);
    let kv = t(&[1, 2, 5, 64], DType::F16);
    let e = attention(&q, &kv, &kv, p).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "attention", .. }), "{e}");
    let q = t(&[1, 2, 5, 64], DType::F16);
    let kb = t(&[1, 2, 5, 64], DType::BF16);
    let e = attention(&q, &kb, &kb, p).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "attention", .. }), "{e}");
    let q48 = t(&[1, 2, 5, 48], DType::F16);
    let e = attention(&q48, &q48, &q48, p).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "attention", .. }) && e.to_string().contains("48"),
        "{e}"
    );
    let v6 = t(&[1, 2, 6, 64], DType::F16);
    let e = attention(&q, &q, &v6, p).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "attention", .. }), "{e}");
    let k32 = t(&[1, 2, 5, 32], DType::F16);
    let e = attention(&q, &k32, &k32, p).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "attention", .. }), "{e}");
    let f = ctx.from_slice(&randn_host(640, 81), &[1, 2, 5, 64]).unwrap();
    let e = attention(&f, &f, &f, p).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { op: "attention", .. }), "{e}");
    let r3 = t(&[2, 5, 64], DType::F16);
    let e = attention(&r3, &r3, &r3, p).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "attention", .. }), "{e}");
    let (o, l) = attention(&q, &q, &q, p).unwrap();
    let e = attention_backward(&q, &q, &q, &q, &o, &o, p).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "attention_backward", .. }), "{e}");
    let e = attention_backward(&v6, &q, &q, &q, &o, &l, p).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "attention_backward", .. }), "{e}");
    let qkv = t(&[1, 5, 4, 64], DType::F16);
    for heads in [(2, 2), (2, 0), (3, 2)] {
        let e = attention_qkv_packed(&qkv, heads, p).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { op: "attention_qkv_packed", .. }), "{heads:?}: {e}");
    }
    let e = attention_qkv_packed(&t(&[5, 4, 64], DType::F16), (2, 1), p).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "attention_qkv_packed", .. }), "{e}");
    let e = attention_qkv_packed(&t(&[1, 5, 4, 48], DType::F16), (2, 1), p).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "attention_qkv_packed", .. }), "{e}");
    let e = attention_qkv_packed(&ctx.zeros(&[1, 5, 4, 64]).unwrap(), (2, 1), p).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { op: "attention_qkv_packed", .. }), "{e}");
    let (o, l) = attention_qkv_packed(&qkv, (2, 1), p).unwrap();
    const BACK: &str = "attention_qkv_packed_backward";
    let e = attention_qkv_packed_backward(&qkv, &qkv, &o, &l, (2, 1), p).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: BACK, .. }), "{e}");
    let e = attention_qkv_packed_backward(&o, &qkv, &o, &o, (2, 1), p).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: BACK, .. }), "{e}");
    let ob = t(&[1, 5, 2, 64], DType::BF16);
    let e = attention_qkv_packed_backward(&ob, &qkv, &o, &l, (2, 1), p).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: BACK, .. }), "{e}");
    let e =
        attention_qkv_packed_backward(&o, &qkv, &o, &ctx.zeros(&[1, 2, 4]).unwrap(), (2, 1), p).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: BACK, .. }), "{e}");
    let mut layer = MultiHeadAttention::new(ctx, 16, (2, 1, 32), false, 1).unwrap();
    let e = layer.forward(&ctx.zeros(&[2, 3, 15]).unwrap()).unwrap_err();
    assert!(matches!(e, Error::Layer { .. }) && e.to_string().contains("MultiHeadAttention"), "{e}");
}

/// Empty and keyless inputs: Sq = 0, Sk = 0 (output 0, lse +∞, gradients 0).
fn empty_inputs(ctx: &Context) {
    let p = AttentionParams::default();
    let q = tensor(ctx, &randn_host(3 * 64, 90), &[1, 1, 3, 64], DType::BF16);
    let none = ctx.full_as(&[1, 1, 0, 64], 0.0, DType::BF16).unwrap();
    let (o, l) = attention(&q, &none, &none, p).unwrap();
    assert!(o.to_vec().unwrap().iter().all(|&x| x == 0.0));
    assert!(l.to_vec().unwrap().iter().all(|&x| x == f32::INFINITY));
    let (dq, dk, _) = attention_backward(&q, &q, &none, &none, &o, &l, p).unwrap();
    assert!(dq.to_vec().unwrap().iter().all(|&x| x == 0.0) && dk.is_empty());
    let (o, l) = attention(&none, &q, &q, p).unwrap();
    assert!(o.is_empty() && l.is_empty());
    let qkv = ctx.full_as(&[2, 0, 3, 64], 0.0, DType::BF16).unwrap();
    let (o, l) = attention_qkv_packed(&qkv, (1, 1), p).unwrap();
    assert!(o.shape() == [2, 0, 1, 64] && l.shape() == [2, 1, 0]);
    let d = attention_qkv_packed_backward(&o, &qkv, &o, &l, (1, 1), p).unwrap();
    assert!(d.shape() == [2, 0, 3, 64]);
}

fn main() {
    run(&[
        ("gpu_attention_forward_matches_cpu", Case::Gpu(forward_matches_cpu)),
        ("gpu_attention_forward_with_scale_matches_cpu", Case::Gpu(forward_with_scale_matches_cpu)),
        ("gpu_attention_backward_matches_cpu", Case::Gpu(backward_matches_cpu)),
        ("gpu_attention_backward_is_deterministic", Case::Gpu(backward_is_deterministic)),
        ("gpu_attention_packed_matches_head_major", Case::Gpu(packed_matches_head_major)),
        ("gpu_attention_layer_matches_cpu", Case::Gpu(layer_matches_cpu)),
        ("gpu_attention_bad_input", Case::Gpu(bad_input)),
        ("gpu_attention_empty_inputs", Case::Gpu(empty_inputs)),
        ("cpu_attention_forward_matches_reference", Case::Cpu(cpu_forward_matches_reference)),
        (
            "cpu_attention_backward_matches_finite_differences",
            Case::Cpu(cpu_backward_matches_finite_differences),
        ),
        ("cpu_attention_packed_matches_head_major", Case::Cpu(|| packed_matches_head_major(&Context::cpu()))),
        ("cpu_attention_bad_input", Case::Cpu(|| bad_input(&Context::cpu()))),
        ("cpu_attention_empty_inputs", Case::Cpu(|| empty_inputs(&Context::cpu()))),
    ]);
}
