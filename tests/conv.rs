//! 2-D convolution on the GPU against the CPU backend (f64 accumulation): forward with bias,
//! data, weight and bias gradients at odd shapes, strides, paddings and dilations, exact f32 and
//! TF32, by default and with the Hopper `wgmma` kernels forced at every size; the CPU backend
//! against plain loops and finite differences; typed errors.
mod common;
use common::*;
use ferrocuda::{
    conv2d, conv2d_backward_bias, conv2d_backward_data, conv2d_backward_weight, Context, Conv2dParams, DType,
    Error, Tensor,
};

/// Exact f32: 1e-5 relative (norm-wise).
const TOL: f64 = 1e-5;
/// TF32 tensor cores (10-bit mantissas): 2e-3 relative (norm-wise).
const TF32_TOL: f64 = 2e-3;

fn params(stride: (usize, usize), padding: (usize, usize), dilation: (usize, usize)) -> Conv2dParams {
    Conv2dParams { stride, padding, dilation }
}

/// One convolution to test: x's shape, w's shape, the parameters.
type ConvCase = ([usize; 4], [usize; 4], Conv2dParams);

/// Odd shapes: batch 1, 3 channels, 7×13 images, 1×1 / 3×3 / 5×3 kernels, strides 1–3, paddings
/// 0–3, dilation 2, sizes that are multiples of no tile (stride-1 data gradients run as forwards
/// with the flipped filters, but for padding past the filter's reach); then shapes that pick
/// the medium and large SIMT tiles, a split forward and a split weight gradient; pointwise (1×1) convolutions on planes of ≥ 512
/// pixels (under TF32 the forward is a per-image GEMM); then a large one.
fn cases() -> Vec<ConvCase> {
    let p = Conv2dParams::new();
    let mut cases = vec![
        ([1, 3, 7, 13], [4, 3, 3, 3], p.padding(1)),
        ([1, 3, 7, 13], [5, 3, 1, 1], p),
        ([2, 3, 7, 13], [6, 3, 5, 3], params((2, 2), (2, 1), (1, 1))),
        ([2, 5, 13, 7], [7, 5, 3, 3], params((3, 3), (1, 2), (1, 1))),
        ([3, 4, 11, 9], [9, 4, 3, 3], p.dilation(2).padding(2)),
        ([2, 17, 31, 29], [33, 17, 3, 5], params((2, 1), (1, 2), (1, 2))),
        ([1, 3, 7, 13], [2, 3, 7, 13], p),
        ([1, 64, 20, 20], [130, 64, 3, 3], p.padding(1)),
        ([2, 5, 9, 10], [3, 5, 2, 3], params((3, 2), (0, 2), (2, 3))),
        ([2, 7, 19, 29], [5, 7, 1, 1], p),
        // Stride 1, padding past the filter's reach: the data gradient's own kernels.
        ([2, 6, 9, 11], [4, 6, 3, 3], params((1, 1), (3, 1), (1, 1))),
        // Under TF32 on Hopper, stride 1 and C a multiple of 4 run on `wgmma` (the data gradient
        // too where K is a multiple of 4): C and K off every tile width, pixel boxes that
        // overhang the image (13×29 in 8×32 or 4×32, 6×6 images two or more to a box, 300
        // columns in boxes of 128), dilation, a 2×2 filter without padding.
        ([3, 36, 13, 29], [70, 36, 3, 3], p.padding(1)),
        ([2, 12, 17, 19], [24, 12, 3, 3], p.dilation(2).padding(2)),
        ([5, 20, 6, 6], [40, 20, 5, 5], p.padding(2)),
        ([1, 8, 3, 300], [12, 8, 1, 3], params((1, 1), (0, 1), (1, 1))),
        ([2, 4, 9, 9], [8, 4, 2, 2], p),
        // ... and the weight gradient where W and Q are multiples of 4: Q = 20, 16, 100 (32-column
        // pieces that overhang the row), dilation, 1×1.
        ([2, 8, 12, 20], [6, 8, 3, 5], params((1, 1), (1, 2), (1, 1))),
        ([3, 5, 10, 16], [7, 5, 3, 3], p.dilation(2).padding(2)),
        ([1, 4, 4, 100], [4, 4, 1, 1], p),
        // ... in f32 (3xTF32) where K fills three quarters of its 128-row tiles: K = 100, and
        // K = 200 (a second tile row, part empty) with dilation.
        ([2, 12, 8, 12], [100, 12, 3, 3], p.padding(1)),
        ([1, 20, 10, 16], [200, 20, 3, 3], p.dilation(2).padding(2)),
    ];
    if !under_sanitizer() {
        cases.push(([3, 37, 23, 29], [19, 37, 1, 1], p.dilation(2)));
        cases.push(([4, 16, 50, 50], [128, 16, 3, 3], p.padding(1)));
        // Few output tiles and a long reduction: the forward splits it.
        cases.push(([4, 64, 7, 7], [256, 64, 3, 3], p.padding(1)));
        cases.push(([8, 64, 56, 56], [128, 64, 3, 3], p.padding(1)));
        cases.push(([2, 32, 40, 40], [64, 32, 5, 5], p.stride(2).padding(2)));
        // A ResNet-style stem: C = 3, 7×7 at stride 2, the data gradient on GEMM + col2im.
        cases.push(([2, 3, 40, 38], [16, 3, 7, 7], p.stride(2).padding(3)));
    }
    cases
}

fn output_shape((x, w, p): &ConvCase) -> [usize; 4] {
    let (oh, ow) = p.output_hw((x[2], x[3]), (w[2], w[3])).expect("valid case");
    [x[0], w[0], oh, ow]
}

fn random(ctx: &Context, shape: &[usize], seed: u64) -> (Tensor, Tensor) {
    pair(ctx, &randn_host(shape.iter().product(), seed), shape)
}

fn name((x, w, p): &ConvCase) -> String {
    format!("{x:?}⊛{w:?} stride {:?} pad {:?} dil {:?}", p.stride, p.padding, p.dilation)
}

/// Every op of one case on `ctx` against the CPU backend, within `tol`.
fn all_ops_match_cpu(ctx: &Context, case: &ConvCase, seed: u64, tol: f64) {
    let (xs, ws, p) = *case;
    let ys = output_shape(case);
    let what = name(case);
    let (x, xc) = random(ctx, &xs, seed);
    let (w, wc) = random(ctx, &ws, seed + 1);
    let (b, bc) = random(ctx, &[ws[0]], seed + 2);
    let (dy, dyc) = random(ctx, &ys, seed + 3);
    let check = |op: &str, got: Tensor, want: Tensor| {
        assert_eq!(got.shape(), want.shape(), "{op} {what}");
        let got = got.to_vec().unwrap_or_else(|e| panic!("{op} {what}: {e}"));
        assert_close(&format!("{op} {what}"), &got, &want.to_vec().unwrap(), tol);
    };

    poison_pool(ctx, &ys);
    check("conv2d+bias", conv2d(&x, &w, Some(&b), p).unwrap(), conv2d(&xc, &wc, Some(&bc), p).unwrap());
    poison_pool(ctx, &ys);
    check("conv2d", conv2d(&x, &w, None, p).unwrap(), conv2d(&xc, &wc, None, p).unwrap());
    poison_pool(ctx, &xs);
    check(
        "backward_data",
        conv2d_backward_data(&dy, &w, &xs, p).unwrap(),
        conv2d_backward_data(&dyc, &wc, &xs, p).unwrap(),
    );
    poison_pool(ctx, &ws);
    let dw = conv2d_backward_weight(&x, &dy, &ws, p).unwrap();
    check("backward_weight", dw.clone(), conv2d_backward_weight(&xc, &dyc, &ws, p).unwrap());
    // The split reduction adds its pieces in a fixed order: bit-identical when repeated.
    let again = conv2d_backward_weight(&x, &dy, &ws, p).unwrap();
    assert_eq!(dw.to_vec().unwrap(), again.to_vec().unwrap(), "backward_weight is deterministic, {what}");
    poison_pool(ctx, &[ws[0]]);
    let got = conv2d_backward_bias(&dy).unwrap().to_vec().unwrap();
    let want = conv2d_backward_bias(&dyc).unwrap().to_vec().unwrap();
    // A sum: relative to the sum of magnitudes per channel.
    let dyv = dyc.to_vec().unwrap();
    let pq = ys[2] * ys[3];
    for k in 0..ys[1] {
        let magnitude: f64 =
            (0..ys[0]).flat_map(|n| &dyv[(n * ys[1] + k) * pq..][..pq]).map(|&v| v.abs() as f64).sum();
        let e = (got[k] as f64 - want[k] as f64).abs() / magnitude;
        assert!(e <= tol, "backward_bias {what} channel {k}: {e:.2e}");
    }
}

fn f32_matches_cpu(gpu: &Context) {
    for (i, case) in cases().iter().enumerate() {
        all_ops_match_cpu(gpu, case, 100 + 10 * i as u64, TOL);
    }
}

fn tf32_matches_cpu(gpu: &Context) {
    let ctx = gpu.new_stream().unwrap();
    assert!(!ctx.allow_tf32());
    ctx.set_allow_tf32(true);
    for (i, case) in cases().iter().enumerate() {
        all_ops_match_cpu(&ctx, case, 300 + 10 * i as u64, TF32_TOL);
    }
    // TF32 really is in use: a 576-deep product on random data cannot match f32 to 1e-6.
    let (x, w) = (ctx.randn(&[2, 64, 12, 12], 1).unwrap(), ctx.randn(&[32, 64, 3, 3], 2).unwrap());
    let p = Conv2dParams::new().padding(1);
    let tf32 = conv2d(&x, &w, None, p).unwrap().to_vec().unwrap();
    let cpu = Context::cpu();
    let exact = conv2d(&x.to_context(&cpu).unwrap(), &w.to_context(&cpu).unwrap(), None, p).unwrap();
    let e = rel_err(&tf32, &exact.to_vec().unwrap());
    assert!(e > 1e-6 && e < TF32_TOL, "TF32 context policy: {e:.1e}");
}

/// `FERROCUDA_CONV_WGMMA` set to `value` until dropped (`1`: the `wgmma` convolutions at any
/// size, `0`: never).
fn wgmma_setting(value: &str) -> EnvSetting {
    EnvSetting::set("FERROCUDA_CONV_WGMMA", value)
}

/// The Hopper `wgmma` convolutions, which the test shapes are too small to take by default, on
/// every case in f32 (3xTF32) and TF32; on Hopper, the kernels that ran, and 3xTF32's accuracy
/// on a long sum against the FMA kernels'.
fn wgmma_matches_cpu(gpu: &Context) {
    let forced = wgmma_setting("1");
    f32_matches_cpu(gpu);
    tf32_matches_cpu(gpu);
    // The profiler (CUPTI) cannot run beside compute-sanitizer, and the sums below are long.
    if !gpu.uses_sm90a_kernels() || under_sanitizer() {
        return;
    }
    // The forward, the data gradient (a forward with the flipped filters) and the weight
    // gradient ran on `wgmma`.
    let p = Conv2dParams::new().padding(1);
    for (tf32, kind) in [(false, "f32x3"), (true, "tf32")] {
        // The ops follow their inputs' context.
        let ctx = gpu.new_stream().unwrap();
        ctx.set_allow_tf32(tf32);
        let (x, w) = (ctx.randn(&[2, 64, 12, 12], 1).unwrap(), ctx.randn(&[32, 64, 3, 3], 2).unwrap());
        let dy = ctx.randn(&[2, 32, 12, 12], 3).unwrap();
        // 3xTF32 takes weight gradients whose K fills its 128-row tiles.
        let dy_wide = ctx.randn(&[2, 128, 12, 12], 4).unwrap();
        let _on = ctx.profiler_guard().unwrap();
        ctx.reset_profile().unwrap();
        conv2d(&x, &w, None, p).unwrap();
        conv2d_backward_data(&dy, &w, &[2, 64, 12, 12], p).unwrap();
        conv2d_backward_weight(&x, &dy_wide, &[128, 64, 3, 3], p).unwrap();
        let report = ctx.profile_report().unwrap();
        let calls = |prefix: &str| -> usize {
            report.kernels().iter().filter(|k| k.name.starts_with(prefix)).map(|k| k.calls).sum()
        };
        let kernel = format!("conv2d_fwd_wgmma_{kind}");
        assert_eq!(calls(&kernel), 2, "{kernel} ran twice: {report}");
        let kernel = format!("conv2d_bwd_weight_wgmma_{kind}");
        assert_eq!(calls(&kernel), 1, "{kernel} ran once: {report}");
    }
    // 3xTF32 over long sums (512 channels × 9 taps: 4608 products an output) against the FMA
    // kernels: the kernel adds each k-step's sums to f32 registers, so its error does not grow
    // with the sum's length as the tensor cores' accumulation would (2.9e-5 measured at 4608 in
    // the fifteenth session, in one part).
    let cpu = Context::cpu();
    let (x, w) = (gpu.randn(&[2, 512, 14, 14], 11).unwrap(), gpu.randn(&[64, 512, 3, 3], 12).unwrap());
    let exact = conv2d(&x.to_context(&cpu).unwrap(), &w.to_context(&cpu).unwrap(), None, p).unwrap();
    let exact = exact.to_vec().unwrap();
    let x3 = conv2d(&x, &w, None, p).unwrap().to_vec().unwrap();
    drop(forced);
    let off = wgmma_setting("0");
    let fma = conv2d(&x, &w, None, p).unwrap().to_vec().unwrap();
    drop(off);
    let (e_x3, e_fma) = (rel_err(&x3, &exact), rel_err(&fma, &exact));
    println!("(2,512,14,14)⊛(64,512,3,3): relative error 3xTF32 {e_x3:.2e}, FMA kernels {e_fma:.2e}");
    assert!(e_x3 <= 2e-6, "3xTF32 conv over 4608 products: relative error {e_x3:.2e} (FMA {e_fma:.2e})");
    // The weight gradient sums over images × pixels: 4·56·56 = 12544 products an output, in
    // slices of promoted k-steps.
    let (x, dy) = (gpu.randn(&[4, 64, 56, 56], 13).unwrap(), gpu.randn(&[4, 128, 56, 56], 14).unwrap());
    let w_shape = [128, 64, 3, 3];
    let exact =
        conv2d_backward_weight(&x.to_context(&cpu).unwrap(), &dy.to_context(&cpu).unwrap(), &w_shape, p);
    let exact = exact.unwrap().to_vec().unwrap();
    let forced = wgmma_setting("1");
    let x3 = conv2d_backward_weight(&x, &dy, &w_shape, p).unwrap().to_vec().unwrap();
    drop(forced);
    let off = wgmma_setting("0");
    let fma = conv2d_backward_weight(&x, &dy, &w_shape, p).unwrap().to_vec().unwrap();
    drop(off);
    let (e_x3, e_fma) = (rel_err(&x3, &exact), rel_err(&fma, &exact));
    println!(
        "weight gradient over 12544 products: relative error 3xTF32 {e_x3:.2e}, FMA kernels {e_fma:.2e}"
    );
    assert!(e_x3 <= 2e-6, "3xTF32 weight gradient: relative error {e_x3:.2e} (FMA {e_fma:.2e})");
}

/// The CPU forward against a plain f64 loop over the definition.
fn cpu_forward_matches_loops() {
    let cpu = Context::cpu();
    for (i, case) in cases().iter().take(7).enumerate() {
        let (xs, ws, p) = *case;
        let ys = output_shape(case);
        let (xv, wv, bv) = (
            randn_host(xs.iter().product(), 7 + i as u64),
            randn_host(ws.iter().product(), 8),
            randn_host(ws[0], 9),
        );
        let y = conv2d(
            &cpu.from_slice(&xv, &xs).unwrap(),
            &cpu.from_slice(&wv, &ws).unwrap(),
            Some(&cpu.from_slice(&bv, &[ws[0]]).unwrap()),
            p,
        )
        .unwrap()
        .to_vec()
        .unwrap();
        let mut want = vec![0.0f32; y.len()];
        for n in 0..ys[0] {
            for k in 0..ys[1] {
                for oh in 0..ys[2] {
                    for ow in 0..ys[3] {
                        let mut acc = bv[k] as f64;
                        for c in 0..xs[1] {
                            for r in 0..ws[2] {
                                for s in 0..ws[3] {
                                    let h =
                                        (oh * p.stride.0 + r * p.dilation.0) as isize - p.padding.0 as isize;
                                    let w =
                                        (ow * p.stride.1 + s * p.dilation.1) as isize - p.padding.1 as isize;
                                    if h >= 0 && w >= 0 && (h as usize) < xs[2] && (w as usize) < xs[3] {
                                        let xi = ((n * xs[1] + c) * xs[2] + h as usize) * xs[3] + w as usize;
                                        acc += xv[xi] as f64
                                            * wv[((k * ws[1] + c) * ws[2] + r) * ws[3] + s] as f64;
                                    }
                                }
                            }
                        }
                        want[((n * ys[1] + k) * ys[2] + oh) * ys[3] + ow] = acc as f32;
                    }
                }
            }
        }
        assert_close(&name(case), &y, &want, 1e-6);
    }
}

/// The CPU gradients against central differences of `L = Σ conv2d(x, w, b) · g` (f64 sums). L is
/// linear in each input, so a large step is exact up to rounding.
fn cpu_gradients_match_finite_differences() {
    let cpu = Context::cpu();
    let tiny: [ConvCase; 3] = [
        ([1, 2, 5, 6], [3, 2, 3, 2], params((2, 1), (1, 0), (1, 2))),
        ([2, 1, 6, 5], [2, 1, 2, 3], params((1, 3), (2, 1), (2, 1))),
        ([1, 3, 4, 4], [2, 3, 1, 1], Conv2dParams::new().stride(2)),
    ];
    for (i, case) in tiny.iter().enumerate() {
        let (xs, ws, p) = *case;
        let ys = output_shape(case);
        let seed = 40 + 5 * i as u64;
        let (xv, wv, bv) = (
            randn_host(xs.iter().product(), seed),
            randn_host(ws.iter().product(), seed + 1),
            randn_host(ws[0], seed + 2),
        );
        let gv = randn_host(ys.iter().product(), seed + 3);
        let t = |v: &[f32], shape: &[usize]| cpu.from_slice(v, shape).unwrap();
        let loss = |xv: &[f32], wv: &[f32], bv: &[f32]| -> f64 {
            let y = conv2d(&t(xv, &xs), &t(wv, &ws), Some(&t(bv, &[ws[0]])), p).unwrap().to_vec().unwrap();
            y.iter().zip(&gv).map(|(&a, &b)| a as f64 * b as f64).sum()
        };
        let numeric = |v: &[f32], eval: &dyn Fn(&[f32]) -> f64| -> Vec<f32> {
            const STEP: f32 = 0.5;
            (0..v.len())
                .map(|j| {
                    let (mut up, mut down) = (v.to_vec(), v.to_vec());
                    up[j] += STEP;
                    down[j] -= STEP;
                    ((eval(&up) - eval(&down)) / (2.0 * STEP as f64)) as f32
                })
                .collect()
        };
        let g = t(&gv, &ys);
        let what = name(case);
        let dx = conv2d_backward_data(&g, &t(&wv, &ws), &xs, p).unwrap().to_vec().unwrap();
        assert_close(&format!("dx {what}"), &dx, &numeric(&xv, &|x| loss(x, &wv, &bv)), 1e-5);
        let dw = conv2d_backward_weight(&t(&xv, &xs), &g, &ws, p).unwrap().to_vec().unwrap();
        assert_close(&format!("dw {what}"), &dw, &numeric(&wv, &|w| loss(&xv, w, &bv)), 1e-5);
        let db = conv2d_backward_bias(&g).unwrap().to_vec().unwrap();
        assert_close(&format!("db {what}"), &db, &numeric(&bv, &|b| loss(&xv, &wv, b)), 1e-5);
    }
}

fn params_and_output_size() {
    let p = Conv2dParams::new();
    assert_eq!(p, Conv2dParams { stride: (1, 1), padding: (0, 0), dilation: (1, 1) });
    assert_eq!(p.stride(2).padding(1).dilation(3), params((2, 2), (1, 1), (3, 3)));
    assert_eq!(p.output_hw((7, 13), (3, 3)), Some((5, 11)));
    assert_eq!(p.padding(1).output_hw((7, 13), (3, 3)), Some((7, 13)));
    assert_eq!(p.stride(2).padding(2).output_hw((7, 13), (5, 3)), Some((4, 8)));
    assert_eq!(p.dilation(2).output_hw((7, 13), (3, 3)), Some((3, 9)));
    assert_eq!(p.dilation(4).output_hw((7, 13), (3, 3)), None);
    assert_eq!(p.stride(0).output_hw((7, 13), (3, 3)), None);
    assert_eq!(p.dilation(0).output_hw((7, 13), (3, 3)), None);
}

fn invalid(err: &Error, op: &str, what: &str) {
    assert!(
        matches!(err, Error::InvalidArgument { op: o, reason, .. } if *o == op && reason.contains(what)),
        "{op}: expected an invalid argument about {what:?}, got {err}"
    );
}

fn bad_inputs_on(ctx: &Context) {
    let x = ctx.randn(&[2, 3, 7, 13], 1).unwrap();
    let w = ctx.randn(&[4, 3, 3, 3], 2).unwrap();
    let p = Conv2dParams::new();
    let dy = ctx.randn(&[2, 4, 5, 11], 3).unwrap();

    // Wrong rank.
    let err = conv2d(&ctx.zeros(&[3, 7, 13]).unwrap(), &w, None, p).unwrap_err();
    invalid(&err, "conv2d", "x must be [N, C, H, W]");
    let err = conv2d(&x, &ctx.zeros(&[4, 3, 3]).unwrap(), None, p).unwrap_err();
    invalid(&err, "conv2d", "w must be [K, C, R, S]");
    // Channels: x's C vs w's C.
    let err = conv2d(&x, &ctx.zeros(&[4, 2, 3, 3]).unwrap(), None, p).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "conv2d", lhs, rhs } if lhs == &[2, 3, 7, 13] && rhs == &[4, 2, 3, 3]),
        "{err}"
    );
    // Kernel larger than the padded input (also through dilation).
    let err = conv2d(&x, &ctx.zeros(&[4, 3, 9, 3]).unwrap(), None, p.padding(0)).unwrap_err();
    invalid(&err, "conv2d", "larger than the padded input 7×13");
    let err = conv2d(&x, &w, None, p.dilation(4)).unwrap_err();
    invalid(&err, "conv2d", "larger than the padded input");
    // Stride or dilation 0.
    invalid(&conv2d(&x, &w, None, p.stride(0)).unwrap_err(), "conv2d", "stride");
    invalid(&conv2d(&x, &w, None, params((1, 1), (0, 0), (1, 0))).unwrap_err(), "conv2d", "dilation");
    // Bias of the wrong length.
    let err = conv2d(&x, &w, Some(&ctx.zeros(&[3]).unwrap()), p).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "conv2d", lhs, rhs } if lhs == &[3] && rhs == &[4]),
        "{err}"
    );
    // Zero-size axes.
    invalid(&conv2d(&ctx.zeros(&[0, 3, 7, 13]).unwrap(), &w, None, p).unwrap_err(), "conv2d", "zero-size");
    invalid(&conv2d(&x, &ctx.zeros(&[0, 3, 3, 3]).unwrap(), None, p).unwrap_err(), "conv2d", "zero-size");
    invalid(
        &conv2d_backward_bias(&ctx.zeros(&[2, 4, 0, 3]).unwrap()).unwrap_err(),
        "conv2d_backward_bias",
        "zero-size",
    );
    // Too large for the kernels' 32-bit indexing (x_shape is only a shape: nothing is allocated).
    let err = conv2d_backward_data(&dy, &w, &[1, 3, 40_000, 40_000], p).unwrap_err();
    invalid(&err, "conv2d_backward_data", "2^31 elements or more");
    // Dtypes: not f32, or different.
    let half = x.to_dtype(DType::F16).unwrap();
    let err = conv2d(&half, &w.to_dtype(DType::F16).unwrap(), None, p).unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { op: "conv2d", dtype: DType::F16 }), "{err}");
    let err = conv2d(&half, &w, None, p).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "conv2d", .. }), "{err}");
    // Backward: dy of the wrong shape, ranks, dtypes.
    let err = conv2d_backward_data(&x, &w, &[2, 3, 7, 13], p).unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { op: "conv2d_backward_data", lhs, rhs } if lhs == &[2, 3, 7, 13] && rhs == &[2, 4, 5, 11]),
        "{err}"
    );
    invalid(&conv2d_backward_data(&dy, &w, &[2, 3, 7], p).unwrap_err(), "conv2d_backward_data", "x must be");
    invalid(
        &conv2d_backward_data(&dy, &w, &[2, 3, 7, 13], p.stride(0)).unwrap_err(),
        "conv2d_backward_data",
        "stride",
    );
    let err = conv2d_backward_weight(&x, &dy, &[4, 2, 3, 3], p).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "conv2d_backward_weight", .. }), "{err}");
    let err = conv2d_backward_weight(&x, &dy, &[4, 3, 3, 3], p.padding(1)).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "conv2d_backward_weight", .. }), "{err}");
    invalid(
        &conv2d_backward_weight(&x, &dy, &[4, 3, 3], p).unwrap_err(),
        "conv2d_backward_weight",
        "w must be",
    );
    let err = conv2d_backward_weight(&half, &dy, &[4, 3, 3, 3], p).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "conv2d_backward_weight", .. }), "{err}");
    invalid(
        &conv2d_backward_bias(&ctx.zeros(&[4, 5]).unwrap()).unwrap_err(),
        "conv2d_backward_bias",
        "dy must be",
    );
    let err = conv2d_backward_bias(&dy.to_dtype(DType::BF16).unwrap()).unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { op: "conv2d_backward_bias", .. }), "{err}");
}

fn cpu_bad_inputs() {
    bad_inputs_on(&Context::cpu());
}

fn gpu_bad_inputs(gpu: &Context) {
    bad_inputs_on(gpu);
    let x = gpu.randn(&[2, 3, 7, 13], 1).unwrap();
    let w = Context::cpu().zeros(&[4, 3, 3, 3]).unwrap();
    let p = Conv2dParams::new();
    let err = conv2d(&x, &w, None, p).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "conv2d", .. }), "{err}");
    let bias = Context::cpu().zeros(&[4]).unwrap();
    let err = conv2d(&x, &gpu.zeros(&[4, 3, 3, 3]).unwrap(), Some(&bias), p).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "conv2d", .. }), "{err}");
    let dy = Context::cpu().zeros(&[2, 4, 5, 11]).unwrap();
    let err = conv2d_backward_weight(&x, &dy, &[4, 3, 3, 3], p).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "conv2d_backward_weight", .. }), "{err}");
    let err = conv2d_backward_data(&dy, &gpu.zeros(&[4, 3, 3, 3]).unwrap(), &[2, 3, 7, 13], p).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "conv2d_backward_data", .. }), "{err}");
}

fn main() {
    run(&[
        ("gpu_f32_matches_cpu", Case::Gpu(f32_matches_cpu)),
        ("gpu_tf32_matches_cpu", Case::Gpu(tf32_matches_cpu)),
        ("gpu_wgmma_matches_cpu", Case::Gpu(wgmma_matches_cpu)),
        ("gpu_bad_inputs", Case::Gpu(gpu_bad_inputs)),
        ("cpu_bad_inputs", Case::Cpu(cpu_bad_inputs)),
        ("cpu_forward_matches_loops", Case::Cpu(cpu_forward_matches_loops)),
        ("cpu_gradients_match_finite_differences", Case::Cpu(cpu_gradients_match_finite_differences)),
        ("cpu_params_and_output_size", Case::Cpu(params_and_output_size)),
    ]);
}
