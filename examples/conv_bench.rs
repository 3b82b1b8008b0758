//! Convolution table: ferrocuda's conv2d forward and backward (data + weight gradients) in f32
//! and TF32 at every torch_ref convolution row (the seed shapes, ResNet-50's stem, 3×3 at 56/28/7
//! and a 1×1, the backward rows), beside PyTorch's cuDNN time from torch_ref.py's JSON of the
//! same call. Ratio = cuDNN ms / ferrocuda ms. FLOPs as torch_ref counts them: 2·|y|·C·R·S per
//! product, the backward two products. `--kernels` also prints, under each row, the profiler's
//! kernel table of one more call (where a row's time goes: gathers, splits, col2im).
//!
//!     conv_bench [--kernels] [torch.json]
use ferrocuda::timing::median_ms;
use ferrocuda::{conv2d, conv2d_backward_data, conv2d_backward_weight, Context, Conv2dParams, Result};

/// One convolution: input `[N, C, H, W]`, weight `[K, C, R, S]`, stride, padding.
#[derive(Clone, Copy)]
struct Conv {
    input: [usize; 4],
    weight: [usize; 4],
    stride: usize,
    padding: usize,
}

impl Conv {
    const fn new(input: [usize; 4], weight: [usize; 4], stride: usize, padding: usize) -> Self {
        Conv { input, weight, stride, padding }
    }

    fn params(&self) -> Conv2dParams {
        Conv2dParams::new().stride(self.stride).padding(self.padding)
    }

    /// The output's `[N, K, P, Q]`.
    fn output(&self) -> [usize; 4] {
        let [n, _, h, w] = self.input;
        let [k, _, r, s] = self.weight;
        let (p, q) = self.params().output_hw((h, w), (r, s)).expect("torch_ref's shapes fit");
        [n, k, p, q]
    }

    /// One product's FLOPs: 2·|y|·C·R·S.
    fn flops(&self) -> f64 {
        let [_, c, r, s] = self.weight;
        2.0 * (self.output().iter().product::<usize>() * c * r * s) as f64
    }

    /// torch_ref's shape key: `str((inp, ker))` for the seed rows, `str((inp, ker, st, pd))` for the others.
    fn key(&self, with_stride: bool) -> String {
        let t = |d: &[usize; 4]| format!("({})", d.map(|x| x.to_string()).join(", "));
        if with_stride {
            format!("({}, {}, {}, {})", t(&self.input), t(&self.weight), self.stride, self.padding)
        } else {
            format!("({}, {})", t(&self.input), t(&self.weight))
        }
    }
}

/// The rows: (torch_ref workload without the precision suffix, whether its key has stride and
/// padding, the convolution, backward or forward).
const ROWS: [(&str, bool, Conv, bool); 10] = [
    ("conv2d", false, Conv::new([32, 64, 128, 128], [128, 64, 3, 3], 1, 1), false),
    ("conv2d", false, Conv::new([1, 32, 64, 64], [64, 32, 3, 3], 1, 1), false),
    ("conv2d_resnet", true, Conv::new([32, 3, 224, 224], [64, 3, 7, 7], 2, 3), false),
    ("conv2d_resnet", true, Conv::new([32, 64, 56, 56], [64, 64, 3, 3], 1, 1), false),
    ("conv2d_resnet", true, Conv::new([32, 256, 56, 56], [64, 256, 1, 1], 1, 0), false),
    ("conv2d_resnet", true, Conv::new([32, 128, 28, 28], [128, 128, 3, 3], 1, 1), false),
    ("conv2d_resnet", true, Conv::new([32, 512, 7, 7], [512, 512, 3, 3], 1, 1), false),
    ("conv2d_bwd", true, Conv::new([32, 64, 128, 128], [128, 64, 3, 3], 1, 1), true),
    ("conv2d_bwd", true, Conv::new([32, 64, 56, 56], [64, 64, 3, 3], 1, 1), true),
    ("conv2d_bwd", true, Conv::new([32, 3, 224, 224], [64, 3, 7, 7], 2, 3), true),
];

fn torch_ms(path: Option<&String>, workload: &str, shape: &str) -> Option<f64> {
    let rows: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(path?).ok()?).ok()?;
    rows.iter().find(|r| r["workload"] == workload && r["shape"] == shape).and_then(|r| r["ms"].as_f64())
}

fn main() -> Result<()> {
    let ctx = Context::new()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kernels = args.iter().any(|a| a == "--kernels");
    let torch_json = args.iter().find(|a| !a.starts_with("--"));
    println!("# conv_bench on {} (ratio = cuDNN ms / ferrocuda ms, same call)", ctx.device());
    println!(
        "{:<14} {:<5} {:<42} {:>9} {:>8} {:>9} {:>7}",
        "workload", "prec", "(input, weight, stride, padding)", "ms", "TFLOP/s", "cuDNN ms", "ratio"
    );
    for (i, &(workload, with_stride, conv, backward)) in ROWS.iter().enumerate() {
        let seed = 100 + 3 * i as u64;
        let (x, w) = (ctx.randn(&conv.input, seed)?, ctx.randn(&conv.weight, seed + 1)?);
        let dy = ctx.randn(&conv.output(), seed + 2)?;
        let params = conv.params();
        for (tf32, precision) in [(false, "fp32"), (true, "tf32")] {
            ctx.set_allow_tf32(tf32);
            let ms = if backward {
                median_ms(&ctx, 2, 10, || {
                    conv2d_backward_data(&dy, &w, &conv.input, params)?;
                    conv2d_backward_weight(&x, &dy, &conv.weight, params).map(drop)
                })?
            } else {
                median_ms(&ctx, 3, 20, || conv2d(&x, &w, None, params).map(drop))?
            };
            let flops = conv.flops() * if backward { 2.0 } else { 1.0 };
            if backward {
                let data =
                    median_ms(&ctx, 2, 10, || conv2d_backward_data(&dy, &w, &conv.input, params).map(drop))?;
                let weight = median_ms(&ctx, 2, 10, || {
                    conv2d_backward_weight(&x, &dy, &conv.weight, params).map(drop)
                })?;
                println!("{:<20} (data {data:.4} ms + weight {weight:.4} ms)", "");
            }
            let torch = torch_ms(torch_json, &format!("{workload}_{precision}"), &conv.key(with_stride));
            println!(
                "{workload:<14} {precision:<5} {:<42} {ms:>9.4} {:>8.2} {:>9} {:>7}",
                conv.key(true),
                flops / (ms * 1e9),
                torch.map_or("-".into(), |t| format!("{t:.4}")),
                torch.map_or("-".into(), |t| format!("{:.2}x", t / ms)),
            );
            if kernels {
                let _on = ctx.profiler_guard()?;
                ctx.reset_profile()?;
                if backward {
                    conv2d_backward_data(&dy, &w, &conv.input, params)?;
                    conv2d_backward_weight(&x, &dy, &conv.weight, params)?;
                } else {
                    conv2d(&x, &w, None, params)?;
                }
                print!("{}", ctx.profile_report()?);
            }
        }
    }
    ctx.set_allow_tf32(false);
    Ok(())
}
