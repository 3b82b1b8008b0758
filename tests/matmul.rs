//! Matrix multiply on the GPU against the CPU backend (f64 accumulation): every transpose, the
//! fused epilogues, batches; typed errors for bad shapes.
mod common;
use common::*;
use ferrocuda::{linear, Activation, Context, DType, Device, Error, Gemm, Tensor, DISABLE_SM90A_VAR};

/// f32 GEMM: 1e-5 relative (norm-wise).
const TOL: f64 = 1e-5;
/// TF32 tensor cores (10-bit mantissas): 2e-3 relative (norm-wise).
const TF32_TOL: f64 = 2e-3;

/// (M, N, K): tiny, odd, square, non-multiples of every tile, a row vector, a skinny middle.
const SHAPES: [(usize, usize, usize); 6] =
    [(1, 1, 1), (17, 33, 65), (1000, 1000, 1000), (4097, 4095, 1023), (1, 4096, 4096), (8192, 64, 8192)];
/// Under compute-sanitizer (`FERROCUDA_SANITIZER=1`, set by the bundle's `run.sh sanitize`), which
/// slows kernels by orders of magnitude: the same kinds of shapes, smaller.
/// K past 256 keeps the TF32 kernels in it (smaller products take the exact tiny kernel).
const SANITIZER_SHAPES: [(usize, usize, usize); 5] =
    [(1, 1, 1), (17, 33, 65), (129, 257, 301), (1, 300, 131), (130, 257, 300)];

fn shapes() -> &'static [(usize, usize, usize)] {
    if under_sanitizer() {
        &SANITIZER_SHAPES
    } else {
        &SHAPES
    }
}

fn operand(gpu: &Context, rows: usize, cols: usize, seed: u64) -> (Tensor, Tensor) {
    pair(gpu, &randn_host(rows * cols, seed), &[rows, cols])
}

fn every_transpose_matches_cpu(gpu: &Context) {
    for (s, &(m, n, k)) in shapes().iter().enumerate() {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let (ag, ac) =
                if ta { operand(gpu, k, m, 10 + s as u64) } else { operand(gpu, m, k, 10 + s as u64) };
            let (bg, bc) =
                if tb { operand(gpu, n, k, 20 + s as u64) } else { operand(gpu, k, n, 20 + s as u64) };
            poison_pool(gpu, &[m, n]);
            let got = Gemm::new(&ag, &bg).transpose_a(ta).transpose_b(tb).run().unwrap();
            assert_eq!(got.shape(), &[m, n]);
            let want = Gemm::new(&ac, &bc).transpose_a(ta).transpose_b(tb).run().unwrap().to_vec().unwrap();
            assert_close(&format!("{m}x{n}x{k} ta={ta} tb={tb}"), &got.to_vec().unwrap(), &want, TOL);
        }
    }
}

fn tf32_matches_cpu(gpu: &Context) {
    for (s, &(m, n, k)) in shapes().iter().enumerate() {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let (ag, ac) =
                if ta { operand(gpu, k, m, 80 + s as u64) } else { operand(gpu, m, k, 80 + s as u64) };
            let (bg, bc) =
                if tb { operand(gpu, n, k, 90 + s as u64) } else { operand(gpu, k, n, 90 + s as u64) };
            poison_pool(gpu, &[m, n]);
            let got = Gemm::new(&ag, &bg).transpose_a(ta).transpose_b(tb).allow_tf32(true).run().unwrap();
            let want = Gemm::new(&ac, &bc).transpose_a(ta).transpose_b(tb).run().unwrap().to_vec().unwrap();
            let e = rel_err(&got.to_vec().unwrap(), &want);
            assert!(e <= TF32_TOL, "tf32 {m}x{n}x{k} ta={ta} tb={tb}: relative error {e:.3e}");
            // TF32 really is in use: it cannot match f32 to 1e-6 on random data of this depth.
            // Two exceptions are exact f32 (and faster): the few-row kernel, and the tiny kernel
            // for products of at most 65,536 outputs over K ≤ 256 (plan row 5).
            let few_rows = m <= 16 && !ta;
            let tiny = m * n <= 1 << 16 && k <= 256;
            assert!(
                k < 64 || few_rows || tiny || e > 1e-6,
                "tf32 {m}x{n}x{k}: error {e:.1e} looks like exact f32"
            );
        }
    }
    // Unaligned rows (K, M, N not multiples of 4) take the 4-byte copy path; batched; epilogue.
    let (x, xc) = pair(gpu, &randn_host(3 * 101 * 67, 95), &[3, 101, 67]);
    let (w, wc) = pair(gpu, &randn_host(67 * 53, 96), &[67, 53]);
    let (bias, bias_c) = pair(gpu, &randn_host(53, 97), &[53]);
    let got = Gemm::new(&x, &w).bias(&bias).activation(Activation::Gelu).allow_tf32(true).run().unwrap();
    let want = Gemm::new(&xc, &wc).bias(&bias_c).activation(Activation::Gelu).run().unwrap();
    assert!(rel_err(&got.to_vec().unwrap(), &want.to_vec().unwrap()) <= TF32_TOL);
    // The context's policy: off by default, on for the context it is set on (and its clones).
    let ctx = gpu.new_stream().unwrap();
    assert!(!ctx.allow_tf32());
    ctx.set_allow_tf32(true);
    let (a, b) = (ctx.randn(&[256, 512], 1).unwrap(), ctx.randn(&[512, 256], 2).unwrap());
    let tf32 = a.matmul(&b).unwrap().to_vec().unwrap();
    let exact = Gemm::new(&a, &b).allow_tf32(false).run().unwrap().to_vec().unwrap();
    let e = rel_err(&tf32, &exact);
    assert!(e > 1e-6 && e < TF32_TOL, "context policy: {e:.1e}");
}

/// f16/bf16 inputs and outputs, f32 accumulation: 2e-2 relative (norm-wise).
const HALF_TOL: f64 = 2e-2;

fn half_precision_matches_cpu(gpu: &Context) {
    for dtype in [DType::F16, DType::BF16] {
        for (s, &(m, n, k)) in shapes().iter().enumerate() {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let (ag, ac) =
                    if ta { operand(gpu, k, m, 110 + s as u64) } else { operand(gpu, m, k, 110 + s as u64) };
                let (bg, bc) =
                    if tb { operand(gpu, n, k, 120 + s as u64) } else { operand(gpu, k, n, 120 + s as u64) };
                let (ag, ac) = (ag.to_dtype(dtype).unwrap(), ac.to_dtype(dtype).unwrap());
                let (bg, bc) = (bg.to_dtype(dtype).unwrap(), bc.to_dtype(dtype).unwrap());
                let got = Gemm::new(&ag, &bg).transpose_a(ta).transpose_b(tb).run().unwrap();
                assert_eq!(got.dtype(), dtype);
                let want =
                    Gemm::new(&ac, &bc).transpose_a(ta).transpose_b(tb).run().unwrap().to_vec().unwrap();
                assert_close(
                    &format!("{dtype:?} {m}x{n}x{k} ta={ta} tb={tb}"),
                    &got.to_vec().unwrap(),
                    &want,
                    HALF_TOL,
                );
            }
        }
        // Unaligned rows (2-byte copies), a batch, bias and GELU in the epilogue, beta·C.
        let h = |t: Tensor| t.to_dtype(dtype).unwrap();
        let (x, xc) = pair(gpu, &randn_host(3 * 101 * 67, 130), &[3, 101, 67]);
        let (w, wc) = pair(gpu, &randn_host(53 * 67, 131), &[53, 67]);
        let (cm, cc) = pair(gpu, &randn_host(101 * 53, 132), &[101, 53]);
        let (bias, bias_c) = pair(gpu, &randn_host(53, 133), &[53]);
        let run = |x: Tensor, w: Tensor, c: Tensor, b: Tensor| {
            let (x, w, c, b) = (h(x), h(w), h(c), h(b));
            Gemm::new(&x, &w)
                .transpose_b(true)
                .beta(0.5, &c)
                .bias(&b)
                .activation(Activation::Gelu)
                .run()
                .unwrap()
        };
        let got = run(x, w, cm, bias).to_vec().unwrap();
        let want = run(xc, wc, cc, bias_c).to_vec().unwrap();
        assert_close(&format!("{dtype:?} batched linear+gelu"), &got, &want, HALF_TOL);
    }
}

/// The module choice: an H100 (compute capability 9.0) runs the sm_90a kernels unless
/// `FERROCUDA_DISABLE_SM90A=1` (run this binary both ways to cover both 16-bit GEMM paths).
fn sm90a_module_choice(gpu: &Context) {
    let Device::Cuda(info) = gpu.device() else { panic!("GPU case on the CPU backend") };
    let disabled = std::env::var(DISABLE_SM90A_VAR).is_ok_and(|v| v == "1");
    let expected = info.compute_capability == (9, 0) && !disabled;
    println!("    sm_90a kernels: {} ({info})", gpu.uses_sm90a_kernels());
    assert_eq!(gpu.uses_sm90a_kernels(), expected);
}

/// Shapes the TMA-fed `wgmma` kernel takes (rows of A and B 16-byte multiples) on an H100 with the
/// sm_90a module, and the mma.sync kernel elsewhere: both tiles, partial tiles in M, N and K (K a
/// multiple of 8 but not of 64), several pipeline rounds, several tiles per persistent block,
/// batches with batched and shared operands, every transpose, the whole epilogue.
fn half_precision_tma_shapes(gpu: &Context) {
    let small = shapes().len() != SHAPES.len();
    let sizes: &[(usize, usize, usize)] = if small {
        &[(136, 264, 200), (8, 8, 8)]
    } else {
        // 128×64 tiles (136, 264, 200), (8, 8, 8), (264, 200, 4104) (K in 9 slices) and
        // (1000, 376, 328); 128×192 tiles, more of them than SMs (12000, 376, 40); 264 of
        // 128×256 (11200, 760, 40); 170 of 256×128 (8600, 640, 40). The plan's unit tests pin
        // these.
        &[
            (136, 264, 200),
            (8, 8, 8),
            (264, 200, 4104),
            (1000, 376, 328),
            (12000, 376, 40),
            (11200, 760, 40),
            (8600, 640, 40),
        ]
    };
    for dtype in [DType::F16, DType::BF16] {
        let h = |(g, c): (Tensor, Tensor)| (g.to_dtype(dtype).unwrap(), c.to_dtype(dtype).unwrap());
        for (s, &(m, n, k)) in sizes.iter().enumerate() {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let seed = 140 + 4 * s as u64;
                let (ag, ac) = h(if ta { operand(gpu, k, m, seed) } else { operand(gpu, m, k, seed) });
                let (bg, bc) =
                    h(if tb { operand(gpu, n, k, seed + 1) } else { operand(gpu, k, n, seed + 1) });
                let (cg, cc) = h(operand(gpu, m, n, seed + 2));
                let (biasg, biasc) = h(operand(gpu, 1, n, seed + 3));
                let (biasg, biasc) = (biasg.reshape(&[n]).unwrap(), biasc.reshape(&[n]).unwrap());
                let run = |a: &Tensor, b: &Tensor, c: &Tensor, bias: &Tensor, act: Activation| {
                    let gemm = Gemm::new(a, b).transpose_a(ta).transpose_b(tb);
                    let gemm = if act == Activation::None {
                        gemm
                    } else {
                        gemm.alpha(0.75).beta(-0.5, c).bias(bias)
                    };
                    gemm.activation(act).run().unwrap().to_vec().unwrap()
                };
                // A linear layer's epilogue: bias and activation, no C.
                let linear = |a: &Tensor, b: &Tensor, bias: &Tensor, act: Activation| {
                    let gemm = Gemm::new(a, b).transpose_a(ta).transpose_b(tb).bias(bias).activation(act);
                    gemm.run().unwrap().to_vec().unwrap()
                };
                for act in [Activation::None, Activation::Relu, Activation::Gelu] {
                    poison_pool(gpu, &[m, n]);
                    let got = run(&ag, &bg, &cg, &biasg, act);
                    let want = run(&ac, &bc, &cc, &biasc, act);
                    assert_close(
                        &format!("{dtype:?} {m}x{n}x{k} ta={ta} tb={tb} {act:?}"),
                        &got,
                        &want,
                        HALF_TOL,
                    );
                    poison_pool(gpu, &[m, n]);
                    let got = linear(&ag, &bg, &biasg, act);
                    let want = linear(&ac, &bc, &biasc, act);
                    assert_close(
                        &format!("{dtype:?} {m}x{n}x{k} ta={ta} tb={tb} bias, {act:?}"),
                        &got,
                        &want,
                        HALF_TOL,
                    );
                }
            }
        }
        // Batches: both operands batched, then a shared B; a batched C.
        let (batch, m, n, k) = (3, 72, 136, 264);
        let (ag, ac) = h(pair(gpu, &randn_host(batch * m * k, 150), &[batch, m, k]));
        let (bg, bc) = h(pair(gpu, &randn_host(batch * k * n, 151), &[batch, k, n]));
        let (b2g, b2c) = h(pair(gpu, &randn_host(k * n, 152), &[k, n]));
        let (cg, cc) = h(pair(gpu, &randn_host(batch * m * n, 153), &[batch, m, n]));
        let got = Gemm::new(&ag, &bg).beta(1.0, &cg).run().unwrap().to_vec().unwrap();
        let want = Gemm::new(&ac, &bc).beta(1.0, &cc).run().unwrap().to_vec().unwrap();
        assert_close(&format!("{dtype:?} batched {batch}x{m}x{n}x{k}"), &got, &want, HALF_TOL);
        let got = ag.matmul(&b2g).unwrap().to_vec().unwrap();
        let want = ac.matmul(&b2c).unwrap().to_vec().unwrap();
        assert_close(&format!("{dtype:?} batched A, shared B"), &got, &want, HALF_TOL);
    }
}

/// TF32 shapes the `wgmma` kernel takes on an H100 (K a multiple of 4; A `[K, M]` or B `[K, N]`
/// transposed first): partial tiles, every transpose, the epilogue, a batch with a shared B
/// stored `[N, K]`.
fn tf32_tma_shapes(gpu: &Context) {
    for (s, &(m, n, k)) in [(136usize, 264usize, 200usize), (8, 8, 4)].iter().enumerate() {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let seed = 160 + 4 * s as u64;
            let (ag, ac) = if ta { operand(gpu, k, m, seed) } else { operand(gpu, m, k, seed) };
            let (bg, bc) = if tb { operand(gpu, n, k, seed + 1) } else { operand(gpu, k, n, seed + 1) };
            let (cg, cc) = operand(gpu, m, n, seed + 2);
            let (biasg, biasc) = pair(gpu, &randn_host(n, seed + 3), &[n]);
            poison_pool(gpu, &[m, n]);
            let got = Gemm::new(&ag, &bg)
                .transpose_a(ta)
                .transpose_b(tb)
                .alpha(1.5)
                .beta(0.25, &cg)
                .bias(&biasg)
                .activation(Activation::Gelu)
                .allow_tf32(true)
                .run()
                .unwrap();
            let want = Gemm::new(&ac, &bc)
                .transpose_a(ta)
                .transpose_b(tb)
                .alpha(1.5)
                .beta(0.25, &cc)
                .bias(&biasc)
                .activation(Activation::Gelu)
                .run()
                .unwrap();
            let e = rel_err(&got.to_vec().unwrap(), &want.to_vec().unwrap());
            assert!(e <= TF32_TOL, "tf32 {m}x{n}x{k} ta={ta} tb={tb}: relative error {e:.3e}");
        }
    }
    let (x, xc) = pair(gpu, &randn_host(3 * 72 * 264, 170), &[3, 72, 264]);
    let (w, wc) = pair(gpu, &randn_host(136 * 264, 171), &[136, 264]);
    let got = x.matmul_t(&w).unwrap();
    let got_tf32 = Gemm::new(&x, &w).transpose_b(true).allow_tf32(true).run().unwrap();
    let want = xc.matmul_t(&wc).unwrap().to_vec().unwrap();
    assert_close("f32 batched x·wᵀ", &got.to_vec().unwrap(), &want, TOL);
    let e = rel_err(&got_tf32.to_vec().unwrap(), &want);
    assert!(e <= TF32_TOL && e > 1e-6, "tf32 batched x·wᵀ: relative error {e:.3e}");
}

fn epilogues_match_cpu(gpu: &Context) {
    let sizes: &[_] = if shapes().len() == SHAPES.len() {
        &[(17, 33, 65), (1000, 1000, 1000), (1024, 768, 512)]
    } else {
        &[(17, 33, 65)]
    };
    for &(m, n, k) in sizes {
        let (ag, ac) = operand(gpu, m, k, 31);
        let (wg, wc) = operand(gpu, n, k, 32);
        let (cg, cc) = operand(gpu, m, n, 33);
        let (bias_g, bias_c) = pair(gpu, &randn_host(n, 34), &[n]);
        for act in [Activation::None, Activation::Relu, Activation::Gelu] {
            poison_pool(gpu, &[m, n]);
            let got = linear(&ag, &wg, Some(&bias_g), act).unwrap().to_vec().unwrap();
            let want = linear(&ac, &wc, Some(&bias_c), act).unwrap().to_vec().unwrap();
            assert_close(&format!("linear {m}x{n}x{k} {act:?}"), &got, &want, TOL);
            let run = |a: &Tensor, w: &Tensor, c: &Tensor, bias: &Tensor| {
                Gemm::new(a, w).transpose_b(true).alpha(-0.5).beta(2.0, c).bias(bias).activation(act).run()
            };
            let got = run(&ag, &wg, &cg, &bias_g).unwrap().to_vec().unwrap();
            let want = run(&ac, &wc, &cc, &bias_c).unwrap().to_vec().unwrap();
            assert_close(&format!("alpha/beta/bias {m}x{n}x{k} {act:?}"), &got, &want, TOL);
        }
    }
}

fn fused_equals_unfused(gpu: &Context) {
    let (x, _) = operand(gpu, 1024, 512, 41);
    let (w, _) = operand(gpu, 768, 512, 42);
    let bias = gpu.randn(&[768], 43).unwrap();
    let fused = linear(&x, &w, Some(&bias), Activation::Gelu).unwrap().to_vec().unwrap();
    let bias_rows = bias.reshape(&[1, 768]).unwrap();
    let ones = gpu.full(&[1024, 1], 1.0).unwrap();
    let unfused = x.matmul_t(&w).unwrap().add(&ones.matmul(&bias_rows).unwrap()).unwrap().gelu().unwrap();
    assert_close("fused vs unfused linear+gelu", &fused, &unfused.to_vec().unwrap(), TOL);
}

fn batched_matches_cpu(gpu: &Context) {
    let cases: [(&[usize], &[usize]); 4] = [
        (&[3, 17, 33], &[3, 33, 65]),
        (&[5, 100, 64], &[64, 70]),
        (&[64, 31], &[4, 31, 129]),
        (&[2, 1, 1], &[2, 1, 1]),
    ];
    for (i, (sa, sb)) in cases.iter().enumerate() {
        let (ag, ac) = pair(gpu, &randn_host(sa.iter().product(), 50 + i as u64), sa);
        let (bg, bc) = pair(gpu, &randn_host(sb.iter().product(), 60 + i as u64), sb);
        let got = ag.matmul(&bg).unwrap();
        let want = ac.matmul(&bc).unwrap();
        assert_eq!(got.shape(), want.shape());
        assert_close(
            &format!("batched {sa:?} x {sb:?}"),
            &got.to_vec().unwrap(),
            &want.to_vec().unwrap(),
            TOL,
        );
    }
    // Each batch equals its own 2-D product.
    let a = gpu.randn(&[4, 65, 33], 70).unwrap();
    let b = gpu.randn(&[4, 33, 17], 71).unwrap();
    let batched = a.matmul(&b).unwrap().to_vec().unwrap();
    let (av, bv) = (a.to_vec().unwrap(), b.to_vec().unwrap());
    for z in 0..4 {
        let az = gpu.from_slice(&av[z * 65 * 33..(z + 1) * 65 * 33], &[65, 33]).unwrap();
        let bz = gpu.from_slice(&bv[z * 33 * 17..(z + 1) * 33 * 17], &[33, 17]).unwrap();
        let single = az.matmul(&bz).unwrap().to_vec().unwrap();
        assert_eq!(&batched[z * 65 * 17..(z + 1) * 65 * 17], &single[..], "batch {z}");
    }
}

fn empty_and_zero_k(gpu: &Context) {
    let a = gpu.randn(&[0, 5], 1).unwrap();
    let b = gpu.randn(&[5, 3], 2).unwrap();
    assert_eq!(a.matmul(&b).unwrap().shape(), &[0, 3]);
    let a = gpu.zeros(&[4, 0]).unwrap();
    let b = gpu.zeros(&[0, 3]).unwrap();
    let bias = gpu.full(&[3], 2.0).unwrap();
    let y = Gemm::new(&a, &b).bias(&bias).run().unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![2.0; 12]);
}

fn bad_shapes_on(ctx: &Context) {
    let a = ctx.zeros(&[4, 5]).unwrap();
    let b = ctx.zeros(&[6, 3]).unwrap();
    let err = a.matmul(&b).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "matmul", lhs, rhs } if lhs == &[4, 5] && rhs == &[6, 3]),
        "{err}"
    );
    let w = ctx.zeros(&[3, 5]).unwrap();
    let bad_bias = ctx.zeros(&[4]).unwrap();
    let err = linear(&a, &w, Some(&bad_bias), Activation::Relu).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "linear", lhs, rhs } if lhs == &[4] && rhs == &[3]),
        "{err}"
    );
    let err = ctx.zeros(&[2, 2, 2, 2]).unwrap().matmul(&a).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "matmul", .. }), "{err}");
    let err = ctx.zeros(&[2, 4, 5]).unwrap().matmul(&ctx.zeros(&[3, 5, 2]).unwrap()).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "matmul", .. }), "{err}");
}

fn gpu_bad_shapes(gpu: &Context) {
    bad_shapes_on(gpu);
    let a = gpu.zeros(&[4, 5]).unwrap();
    let b = Context::cpu().zeros(&[5, 3]).unwrap();
    let err = a.matmul(&b).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "matmul", .. }), "{err}");
}

fn cpu_bad_shapes() {
    bad_shapes_on(&Context::cpu());
}

fn cpu_matches_loops() {
    let cpu = Context::cpu();
    let (a, b) = (randn_host(7 * 5, 1), randn_host(5 * 3, 2));
    let got = cpu.from_slice(&a, &[7, 5]).unwrap().matmul(&cpu.from_slice(&b, &[5, 3]).unwrap()).unwrap();
    let got = got.to_vec().unwrap();
    for i in 0..7 {
        for j in 0..3 {
            let want: f64 = (0..5).map(|p| a[i * 5 + p] as f64 * b[p * 3 + j] as f64).sum();
            assert!((got[i * 3 + j] as f64 - want).abs() < 1e-6, "({i}, {j})");
        }
    }
}

/// With K = 0 the operands are empty whatever M and N: an M·N past `usize` is a typed error, not
/// an overflow (a debug panic, a wrong-length result in release).
fn cpu_product_size_overflow() {
    let cpu = Context::cpu();
    let (a, b) = (cpu.zeros(&[1 << 33, 0]).unwrap(), cpu.zeros(&[0, 1 << 33]).unwrap());
    let err = a.matmul(&b).unwrap_err();
    assert!(matches!(err, Error::SizeOverflow { op: "matmul", .. }), "{err}");
    let (a, b) = (cpu.zeros(&[1 << 22, 1 << 22, 0]).unwrap(), cpu.zeros(&[1 << 22, 0, 1 << 22]).unwrap());
    let err = a.matmul(&b).unwrap_err();
    assert!(matches!(err, Error::SizeOverflow { op: "matmul", .. }), "{err}");
}

/// A batch past the grid's z limit is refused by name on every kernel, the wgmma ones included
/// (they went to the driver, which refused the launch).
fn batch_limit_on_every_kernel(gpu: &Context) {
    let batch = 65_536;
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let a = gpu.full_as(&[batch, 1, 8], 1.0, dtype).unwrap();
        let b = gpu.full_as(&[batch, 8, 8], 1.0, dtype).unwrap();
        for tf32 in [false, true] {
            let err = Gemm::new(&a, &b).allow_tf32(tf32).run().unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { op: "matmul", .. }), "{dtype:?}: {err}");
        }
    }
}

/// TF32 with K past the transpose's row limit (64 · 65,535) takes `mma.sync` instead of failing in
/// the transpose that the `wgmma` path needs for B `[K, N]`.
fn tf32_long_k_falls_back(gpu: &Context) {
    if under_sanitizer() {
        // 4 Mi-long dot products under the sanitizer take longer than its runs allow; the
        // mma.sync TF32 kernel it falls back to is checked there by gpu_tf32_matches_cpu.
        println!("    skipped under the sanitizer");
        return;
    }
    let k = 65_535 * 64 + 4;
    // 17 rows: fewer take the few-row kernel, which is exact f32 whatever TF32 allows.
    let (ag, ac) = operand(gpu, 17, k, 70);
    let (bg, bc) = operand(gpu, k, 3, 71);
    let got = Gemm::new(&ag, &bg).allow_tf32(true).run().unwrap().to_vec().unwrap();
    let want = ac.matmul(&bc).unwrap().to_vec().unwrap();
    // A sum of 4 Mi products of random signs is ~2000 times smaller than the sum of their
    // magnitudes, which is what TF32's rounding error scales with: compare the error with that.
    let (a, b) = (ac.to_vec().unwrap(), bc.to_vec().unwrap());
    for (idx, (g, w)) in got.iter().zip(&want).enumerate().step_by(7) {
        let (i, j) = (idx / 3, idx % 3);
        let magnitude: f64 = (0..k).map(|p| (a[i * k + p] as f64 * b[p * 3 + j] as f64).abs()).sum();
        let err = (*g as f64 - *w as f64).abs() / magnitude;
        assert!(err <= 1e-3, "tf32 K = 4 Mi, C[{i}][{j}]: error {err:.2e} of the sum of magnitudes");
    }
}

/// Many small 16-bit products in a row, each with other operands and shapes: on sm_90a each call's
/// tensor maps travel in its launch's parameters, so a descriptor kept from the previous call (by
/// the tensor-map proxy, or by the launch) would show as a wrong result.
fn wgmma_maps_change_every_call(gpu: &Context) {
    let rounds = if under_sanitizer() { 6 } else { 60 };
    for i in 0..rounds {
        let (m, n, k) = (64 + 8 * (i % 5), 72 + 8 * (i % 7), 64 + 8 * (i % 3));
        let h =
            |(g, c): (Tensor, Tensor)| (g.to_dtype(DType::BF16).unwrap(), c.to_dtype(DType::BF16).unwrap());
        let (ag, ac) = h(operand(gpu, m, k, 100 + i as u64));
        let (bg, bc) = h(operand(gpu, k, n, 200 + i as u64));
        poison_pool(gpu, &[m, n]);
        let got = ag.matmul(&bg).unwrap().to_vec().unwrap();
        let want = ac.matmul(&bc).unwrap().to_vec().unwrap();
        assert_close(&format!("round {i} ({m}, {n}, {k})"), &got, &want, 2e-2);
    }
}

/// One product of `dtype` against the CPU: A `[M, K]` (`[K, M]` when `ta`), B `[K, N]` (`[N, K]`
/// when `tb`), a leading `batch` on A (and on B when `batch_b`), and with `epilogue` alpha, beta·C,
/// bias and GELU; the output poisoned first.
#[allow(clippy::too_many_arguments)]
fn check_product(
    gpu: &Context,
    dtype: DType,
    shape: (usize, usize, usize),
    layout: (bool, bool),
    batches: (usize, bool),
    epilogue: bool,
    seed: u64,
) {
    check_product_tf32(gpu, (dtype, false), shape, layout, batches, epilogue, seed);
}

/// As `check_product`, with TF32 allowed (f32 only) or not, at the tolerance of each.
fn check_product_tf32(
    gpu: &Context,
    (dtype, tf32): (DType, bool),
    (m, n, k): (usize, usize, usize),
    (ta, tb): (bool, bool),
    (batch, batch_b): (usize, bool),
    epilogue: bool,
    seed: u64,
) {
    let lead = |batched: bool| if batched && batch > 1 { vec![batch] } else { vec![] };
    let shaped = |batched: bool, r: usize, c: usize| [lead(batched), vec![r, c]].concat();
    let make = |shape: Vec<usize>, seed: u64| {
        let (g, c) = pair(gpu, &randn_host(shape.iter().product(), seed), &shape);
        (g.to_dtype(dtype).unwrap(), c.to_dtype(dtype).unwrap())
    };
    let (ag, ac) = make(if ta { shaped(true, k, m) } else { shaped(true, m, k) }, seed);
    let (bg, bc) = make(if tb { shaped(batch_b, n, k) } else { shaped(batch_b, k, n) }, seed + 1);
    let (cg, cc) = make(shaped(true, m, n), seed + 2);
    let (biasg, biasc) = make(vec![n], seed + 3);
    poison_pool(gpu, &[batch, m, n]);
    let run = |a: &Tensor, b: &Tensor, c: &Tensor, bias: &Tensor| {
        let g = Gemm::new(a, b).transpose_a(ta).transpose_b(tb).allow_tf32(tf32);
        let g =
            if epilogue { g.alpha(0.75).beta(-0.5, c).bias(bias).activation(Activation::Gelu) } else { g };
        g.run().unwrap().to_vec().unwrap()
    };
    let got = run(&ag, &bg, &cg, &biasg);
    let want = run(&ac, &bc, &cc, &biasc);
    let tol = match (dtype, tf32) {
        (DType::F32, false) => TOL,
        (DType::F32, true) => TF32_TOL,
        _ => HALF_TOL,
    };
    let what = format!(
        "{dtype:?} (TF32 {tf32}) {batch}×({m}, {n}, {k}) ta={ta} tb={tb} batched B={batch_b} epilogue={epilogue}"
    );
    assert_close(&what, &got, &want, tol);
}

/// Every branch of the dispatch (the module docs' table) at odd sizes, every dtype: the few-row
/// kernel (4 and 16 rows, both layouts of B, aligned and not, one slice and several, K = 1),
/// split-K on the SIMT and `wgmma` kernels (thin outputs, long K), and the tiled kernels beside them.
fn every_dispatch_branch(gpu: &Context) {
    let small = under_sanitizer();
    // (M, N, K): few rows (one slice; many slices; K = 1 with 4 and 16 rows; N and K off every
    // vector with 4 and 16 rows; 16-bit on tensor cores where K, and N for B [K, N], are
    // multiples of 8: one or two 8-row MMA columns, N off the warp's 64 columns, K off the
    // 32-step, slices in clusters of 4-warp blocks (16, 4104, 2056) and of one-warp blocks (the
    // small products), and through the workspace (16, 260, 9000); f32 on TMA from 5 rows, and at
    // 2 rows with B of 2^24 values (2, 4100, 4100), one slice or slices in clusters of 2-8), then
    // 17 rows and thin outputs with long K (split-K), short K, and tiles partly outside.
    let few: &[(usize, usize, usize)] = if small {
        &[(1, 33, 65), (3, 40, 1), (16, 129, 1500), (9, 40, 72)]
    } else {
        &[
            (1, 1, 1),
            (1, 4099, 8200),
            (3, 1000, 1),
            (4, 37, 2053),
            (5, 300, 4096),
            (16, 8200, 1031),
            (16, 260, 9000),
            (9, 1000, 808),
            (7, 264, 2056),
            (16, 8192, 1032),
            (16, 4104, 2056),
            (13, 1001, 1),
            (11, 4097, 1999),
            (2, 4100, 4100),
        ]
    };
    let tiled: &[(usize, usize, usize)] = if small {
        &[(17, 40, 1100), (40, 24, 1040), (40, 33, 70)]
    } else {
        // The tiny kernel: (64, 128, 64) an MLP layer, then partial tiles, K past one chunk.
        &[
            (17, 64, 8200),
            (130, 129, 4100),
            (8200, 72, 2056),
            (17, 1000, 3),
            (300, 260, 200),
            (64, 128, 64),
            (65, 31, 97),
            (250, 262, 256),
        ]
    };
    let mut seed = 300;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for &shape in few.iter().chain(tiled) {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let epilogue = seed % 2 == 0;
                check_product(gpu, dtype, shape, (ta, tb), (1, false), epilogue, seed);
                seed += 4;
            }
        }
        // The SIMT f32 tiles at odd sizes, with the epilogue and without, A plain and transposed:
        // 128×256 at 1921 × 4001 × 1025 (256 tiles, two nearly full waves), 128×128 at
        // 3001 × 3003 (the wide tiles' third wave would run 24 of 132 SMs), 128×64 at 1000 × 2000
        // (128 large tiles would leave SMs idle); K off the 16-step.
        if dtype == DType::F32 && !small {
            let shapes = [((1921, 4001, 1025), (false, false)), ((3001, 3003, 41), (true, true))];
            for (shape, layout) in shapes.into_iter().chain([((1000, 2000, 67), (false, true))]) {
                check_product(gpu, dtype, shape, layout, (1, false), true, seed);
                check_product(gpu, dtype, shape, (!layout.0, layout.1), (1, false), false, seed + 4);
                seed += 8;
            }
        }
        // The GPT head's weight gradient: 73 rows (not a 16-byte multiple), K = 16384: in 16-bit,
        // split-K on `wgmma` after copying A into padded rows, and with N and K off the 16-byte
        // rows too, both operands; with too few flops a byte copied (17 × 33), on `mma.sync`.
        if !small {
            check_product(gpu, dtype, (73, 384, 16384), (true, false), (1, false), false, seed);
            check_product(gpu, dtype, (73, 385, 16383), (true, false), (1, false), true, seed + 4);
            check_product(gpu, dtype, (17, 33, 45001), (true, false), (1, false), true, seed + 8);
            seed += 12;
        }
        // Split-K whose reduction takes four outputs a thread (M·N ≥ 2^19), batched, epilogue.
        if !small {
            check_product(gpu, dtype, (130, 4100, 2056), (false, true), (2, true), true, seed);
        }
        // Batches: the few-row kernels (f32 from 5 rows on TMA, in clusters of slices) and
        // split-K with a shared and a batched B.
        let batches = [
            ((3, 77, 1200), true),
            ((2, 77, 1200), false),
            ((24, 40, 2000), true),
            ((9, 76, 1204), true),
            ((12, 76, 1204), false),
        ];
        for (shape, batch_b) in batches {
            check_product(gpu, dtype, shape, (false, true), (3, batch_b), true, seed);
            check_product(gpu, dtype, shape, (false, false), (3, batch_b), false, seed + 4);
            seed += 8;
        }
    }
}

/// TF32 products with neither operand transposed where the plan swaps them
/// (`gemm_wgmma_tf32_nn[_128x64]`: Cᵀ = Bᵀ·Aᵀ with B's fragments from registers and the output
/// written transposed), against the CPU: both tiles, tiles partly outside in both dimensions, K
/// off the 32-step, split K, clusters with an odd last tile row and more tiles than SMs (batched),
/// batches with a shared and a batched B, the epilogue and without; then products the plan keeps
/// on a transposed copy of B (a short K; N off the 16-byte rows) beside them.
fn tf32_swapped_shapes(gpu: &Context) {
    let small = under_sanitizer();
    let shapes: &[Product] = if small {
        &[((70, 36, 1100), (1, false)), ((9, 20, 40), (3, true)), ((600, 700, 40), (3, true))]
    } else {
        &[
            ((520, 264, 96), (1, false)),
            ((64, 96, 8192), (1, false)),
            ((70, 36, 1100), (1, false)),
            ((1024, 1024, 1024), (1, false)),
            ((1500, 1400, 72), (2, true)),
            ((40, 36, 300), (3, true)),
            ((40, 36, 300), (3, false)),
            ((600, 700, 40), (3, false)),
            ((2048, 2056, 72), (1, false)),
            ((300, 257, 200), (1, false)),
        ]
    };
    check_nn_products(gpu, &[(DType::F32, true)], shapes, 900);
}

/// (M, N, K) and (batch, whether B is batched).
type Product = ((usize, usize, usize), (usize, bool));

/// Each product of `shapes` with neither operand transposed, in each of `precisions` (dtype,
/// TF32 allowed), with the epilogue and without, against the CPU.
fn check_nn_products(gpu: &Context, precisions: &[(DType, bool)], shapes: &[Product], mut seed: u64) {
    for &precision in precisions {
        for &(shape, batches) in shapes {
            for epilogue in [false, true] {
                check_product_tf32(gpu, precision, shape, (false, false), batches, epilogue, seed);
                seed += 4;
            }
        }
    }
}

/// 16-bit A·B with at most 64 rows or 65-128 columns on the 128×64 tile, which the plan runs
/// swapped (`gemm_wgmma_{f16,bf16}_nn_swapped_128x64`: Cᵀ = Bᵀ·Aᵀ, the output written transposed),
/// against the CPU: few rows and few columns with tiles partly outside, split K, batches with a
/// shared and a batched B, the epilogue (C read and bias added transposed) and without.
fn half_precision_swapped_shapes(gpu: &Context) {
    let shapes: &[Product] = if under_sanitizer() {
        &[((40, 1000, 200), (1, false)), ((40, 264, 1104), (2, true))]
    } else {
        &[
            ((8296, 128, 1032), (1, false)),
            ((48, 6000, 1032), (1, false)),
            ((8200, 104, 1032), (1, false)),
            ((24, 3000, 1000), (1, false)),
            ((40, 520, 16384), (1, false)),
            ((40, 264, 1104), (3, true)),
            ((256, 104, 1104), (3, false)),
        ]
    };
    check_nn_products(gpu, &[(DType::BF16, false), (DType::F16, false)], shapes, 1400);
}

/// 16-bit products past one wave of tiles, whose last wave and part-wave run as a stream-K
/// region (their k-steps cut into one even range per pair of blocks; a tile split between two
/// ranges finished by the one computing its end, after adding the other's sums): on the H100 (132
/// SMs, 66 pairs at once) (1597, 1776, 1536) is 70 pairs of 128×192 tiles and (2001, 2103, 1505)
/// 88, all in the region, stored by TMA and (odd N, the operands staged, a partial last k-step)
/// from registers; (2179, 3408, 1536) 135 pairs of 256×128 tiles, 66 whole, then a region of 69;
/// (2577, 3503, 1537) 209 pairs of 128×192, 132 whole, then 77, odd. The plan's unit tests pin these
/// (`stream_k_regions`). Every transpose, plain and with the full epilogue.
fn half_precision_stream_k(gpu: &Context) {
    // (M, N, K), (A transposed, B transposed), the full epilogue.
    type Layout = ((usize, usize, usize), (bool, bool), bool);
    let products: &[Layout] = if under_sanitizer() {
        &[((2001, 2103, 1505), (false, true), false), ((2179, 3408, 1536), (true, false), true)]
    } else {
        &[
            ((1597, 1776, 1536), (false, false), false),
            ((1597, 1776, 1536), (true, true), true),
            ((2001, 2103, 1505), (false, true), false),
            ((2001, 2103, 1505), (true, false), true),
            ((2179, 3408, 1536), (false, false), true),
            ((2577, 3503, 1537), (true, false), false),
        ]
    };
    let mut seed = 1500;
    for dtype in [DType::BF16, DType::F16] {
        for &(shape, layout, epilogue) in products {
            check_product(gpu, dtype, shape, layout, (1, false), epilogue, seed);
            seed += 4;
        }
    }
}

/// 16-bit products on the 128×320 tile (each consumer an `m64n256` and an `m64n64` beside it; the
/// tail's 64 columns stored as a 128×64 tile's): (1104, 3992, 72) is 117 tiles in one wave
/// against 144 of 128×256 in two, its last column of tiles 152 wide (the tail outside N);
/// (3001, 3096, 264) 240 in two waves against 312 in three, the last tile row 57 high, A staged
/// into padded rows where transposed (3001 values a row); two layers of (600, 3992, 72) with a
/// shared and a batched B. The plan's unit tests pin these (`part_waves_take_the_320_wide_tile`).
/// Every transpose, plain and with the full epilogue.
fn half_precision_wide_tile(gpu: &Context) {
    let small = under_sanitizer();
    let mut seed = 1700;
    for dtype in [DType::BF16, DType::F16] {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let epilogue = seed % 8 == 0;
            check_product(gpu, dtype, (1104, 3992, 72), (ta, tb), (1, false), epilogue, seed);
            if !small {
                check_product(gpu, dtype, (3001, 3096, 264), (ta, tb), (1, false), !epilogue, seed + 1);
            }
            seed += 4;
        }
        for batch_b in [false, true] {
            check_product(gpu, dtype, (600, 3992, 72), (false, true), (2, batch_b), batch_b, seed);
            seed += 4;
        }
    }
}

/// 16-bit operands whose rows are not 16-byte multiples, in products large enough that the plan
/// copies them into padded buffers for `wgmma` (dispatch row 3): every transpose (each has an
/// operand with odd rows), split K, batches with a shared and a batched B.
fn half_precision_staged_operands(gpu: &Context) {
    let small = under_sanitizer();
    let mut seed = 700;
    for dtype in [DType::F16, DType::BF16] {
        if small {
            check_product(gpu, dtype, (1024, 1025, 256), (false, false), (1, false), true, seed);
            continue;
        }
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            check_product(gpu, dtype, (1030, 1027, 260), (ta, tb), (1, false), seed % 8 == 0, seed);
            seed += 4;
        }
        check_product(gpu, dtype, (1030, 1027, 2056), (false, false), (1, false), true, seed);
        for batch_b in [false, true] {
            check_product(gpu, dtype, (1024, 1030, 264), (false, false), (2, batch_b), batch_b, seed + 4);
            seed += 8;
        }
    }
}

/// `FERROCUDA_MATMUL_F32X3` set to `value` until dropped (`1`: exact f32 products take 3xTF32
/// on `wgmma` wherever it can run, `0`: never).
fn f32x3_setting(value: &str) -> EnvSetting {
    EnvSetting::set("FERROCUDA_MATMUL_F32X3", value)
}

/// Exact f32 as 3xTF32 on `wgmma`, forced at sizes it would not take by default: every transpose
/// at odd sizes with and without the epilogue, tiles partly outside, K off 16-byte rows, split K (a
/// thin output over a long K), batches with a shared and a batched B (K aligned and not); its accuracy on a long sum against the FMA
/// kernels; on Hopper, the kernel that ran.
fn f32x3_matches_cpu(gpu: &Context) {
    let small = under_sanitizer();
    let forced = f32x3_setting("1");
    // K off 16-byte rows too ((17, 33, 65), (1001, 1003, 999)): the operands are then copied with
    // padded rows. Forced, A·B with rows of 16-byte multiples runs swapped ((1000, 1000, 1000),
    // (300, 8, 2056) split, the batches), the others on the K-major kernel.
    let shapes: &[(usize, usize, usize)] = if small {
        &[(17, 33, 68), (130, 257, 301)]
    } else {
        &[
            (17, 33, 68),
            (17, 33, 65),
            (129, 257, 300),
            (1000, 1000, 1000),
            (1001, 1003, 999),
            (4097, 4095, 1024),
            (130, 129, 4100),
            (300, 8, 2056),
        ]
    };
    let mut seed = 900;
    for &shape in shapes {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            check_product(gpu, DType::F32, shape, (ta, tb), (1, false), seed % 8 == 0, seed);
            seed += 4;
        }
    }
    let batch_shape = if small { (40, 36, 300) } else { (300, 260, 1000) };
    check_product(gpu, DType::F32, (40, 36, 299), (false, true), (3, true), true, seed);
    for batch_b in [false, true] {
        check_product(gpu, DType::F32, batch_shape, (false, true), (3, batch_b), batch_b, seed);
        check_product(gpu, DType::F32, batch_shape, (false, false), (3, batch_b), !batch_b, seed + 4);
        seed += 8;
    }
    if small || !gpu.uses_sm90a_kernels() {
        return;
    }
    // A long sum: the tensor cores truncate every addition to their accumulators, so without the
    // kernels' promotion of each k-step's sums to f32 registers the error would grow with K
    // (3.8e-6 at 576 products in the fifteenth session's conv measurements, ~1e-4 here). A·B
    // runs swapped (B's low parts made in registers), A·Bᵀ on the K-major kernel.
    let k = 16384;
    // The ops follow their inputs' context: a stream of its own for the profile.
    let ctx = gpu.new_stream().unwrap();
    let (ag, ac) = operand(&ctx, 256, k, 950);
    let (bg, bc) = operand(&ctx, k, 256, 951);
    let (btg, btc) = operand(&ctx, 256, k, 952);
    let want = ac.matmul(&bc).unwrap().to_vec().unwrap();
    let want_t = ac.matmul_t(&btc).unwrap().to_vec().unwrap();
    let _on = ctx.profiler_guard().unwrap();
    ctx.reset_profile().unwrap();
    let x3 = ag.matmul(&bg).unwrap().to_vec().unwrap();
    let x3_t = ag.matmul_t(&btg).unwrap().to_vec().unwrap();
    let report = ctx.profile_report().unwrap();
    let calls = |prefix: &str| -> usize {
        report.kernels().iter().filter(|k| k.name.starts_with(prefix)).map(|k| k.calls).sum()
    };
    assert_eq!(calls("gemm_wgmma_f32x3_nn_128x64"), 1, "the swapped 3xTF32 kernel ran: {report}");
    assert_eq!(calls("gemm_wgmma_f32x3_nt"), 1, "the K-major 3xTF32 kernel ran: {report}");
    let e_t = rel_err(&x3_t, &want_t);
    assert!(e_t <= 2e-6, "3xTF32 A·Bᵀ over K = {k}: relative error {e_t:.2e}");
    drop(forced);
    let _off = f32x3_setting("0");
    let fma = ag.matmul(&bg).unwrap().to_vec().unwrap();
    let (e_x3, e_fma) = (rel_err(&x3, &want), rel_err(&fma, &want));
    println!("(256, 256, {k}): relative error 3xTF32 {e_x3:.2e} (A·Bᵀ {e_t:.2e}), FMA kernels {e_fma:.2e}");
    assert!(e_x3 <= 2e-6, "3xTF32 over K = {k}: relative error {e_x3:.2e} (FMA {e_fma:.2e})");
}

fn main() {
    run(&[
        ("gpu_every_transpose_matches_cpu", Case::Gpu(every_transpose_matches_cpu)),
        ("gpu_tf32_matches_cpu", Case::Gpu(tf32_matches_cpu)),
        ("gpu_half_precision_matches_cpu", Case::Gpu(half_precision_matches_cpu)),
        ("gpu_sm90a_module_choice", Case::Gpu(sm90a_module_choice)),
        ("gpu_half_precision_tma_shapes", Case::Gpu(half_precision_tma_shapes)),
        ("gpu_half_precision_staged_operands", Case::Gpu(half_precision_staged_operands)),
        ("gpu_half_precision_stream_k", Case::Gpu(half_precision_stream_k)),
        ("gpu_half_precision_wide_tile", Case::Gpu(half_precision_wide_tile)),
        ("gpu_tf32_tma_shapes", Case::Gpu(tf32_tma_shapes)),
        ("gpu_tf32_swapped_shapes", Case::Gpu(tf32_swapped_shapes)),
        ("gpu_half_precision_swapped_shapes", Case::Gpu(half_precision_swapped_shapes)),
        ("gpu_epilogues_match_cpu", Case::Gpu(epilogues_match_cpu)),
        ("gpu_fused_equals_unfused", Case::Gpu(fused_equals_unfused)),
        ("gpu_batched_matches_cpu", Case::Gpu(batched_matches_cpu)),
        ("gpu_empty_and_zero_k", Case::Gpu(empty_and_zero_k)),
        ("gpu_bad_shapes", Case::Gpu(gpu_bad_shapes)),
        ("cpu_bad_shapes", Case::Cpu(cpu_bad_shapes)),
        ("cpu_matches_loops", Case::Cpu(cpu_matches_loops)),
        ("cpu_product_size_overflow", Case::Cpu(cpu_product_size_overflow)),
        ("gpu_batch_limit_on_every_kernel", Case::Gpu(batch_limit_on_every_kernel)),
        ("gpu_tf32_long_k_falls_back", Case::Gpu(tf32_long_k_falls_back)),
        ("gpu_wgmma_maps_change_every_call", Case::Gpu(wgmma_maps_change_every_call)),
        ("gpu_every_dispatch_branch", Case::Gpu(every_dispatch_branch)),
        ("gpu_f32x3_matches_cpu", Case::Gpu(f32x3_matches_cpu)),
    ]);
}
