//! Flash attention table: ferrocuda's forward and backward (bf16) at the shapes of
//! `torch_ref.py --only attention`, causal and not, with PyTorch SDPA's FlashAttention-2 and cuDNN
//! times from that script's JSON when given (run it in the same device call).
//!
//!     attention_bench [torch.json]
//!
//! FLOPs: forward 4·B·H·S²·D (halved when causal), backward 2.5× that (PyTorch's convention).
use ferrocuda::timing::median_ms;
use ferrocuda::{attention, attention_backward, AttentionParams, Context, DType, Result};

fn torch_ms(rows: &[serde_json::Value], workload: &str, shape: &str, implementation: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r["workload"] == workload && r["shape"] == shape && r["impl"] == implementation)
        .and_then(|r| r["ms"].as_f64())
}

fn ratio(base: Option<f64>, ms: f64) -> String {
    base.map_or("-".into(), |b| format!("{b:.4} ({:.2}x)", b / ms))
}

fn main() -> Result<()> {
    let rows: Vec<serde_json::Value> = std::env::args()
        .nth(1)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    let ctx = Context::new()?;
    let forward_path = if ctx.uses_sm90a_kernels() { "wgmma" } else { "mma.sync" };
    println!(
        "# attention_bench on {} (bf16; forward on {forward_path}; ratio = torch ms / ferrocuda ms)",
        ctx.device()
    );
    println!(
        "{:<30} {:>5} {:>9} {:>8} {:>18} {:>18}",
        "shape (B, H, S, D)", "pass", "ms", "TFLOP/s", "FA2 ms (ratio)", "cuDNN ms (ratio)"
    );
    for (b, h, s, d) in [(8, 12, 2048, 64), (4, 16, 4096, 128), (64, 6, 256, 64)] {
        for causal in [false, true] {
            let shape = [b, h, s, d];
            let t = |seed| ctx.randn(&shape, seed).and_then(|x| x.to_dtype(DType::BF16));
            let (q, k, v, dout) = (t(1)?, t(2)?, t(3)?, t(4)?);
            let p = AttentionParams::default().causal(causal);
            let flops = 4.0 * (b * h * s * s * d) as f64 / if causal { 2.0 } else { 1.0 };
            let fwd = median_ms(&ctx, 5, 20, || attention(&q, &k, &v, p).map(drop))?;
            let (out, lse) = attention(&q, &k, &v, p)?;
            let bwd =
                median_ms(&ctx, 3, 20, || attention_backward(&dout, &q, &k, &v, &out, &lse, p).map(drop))?;
            let tag = if causal { "attention_bf16_causal" } else { "attention_bf16" };
            let bwd_tag = if causal { "attention_bwd_bf16_causal" } else { "attention_bwd_bf16" };
            let key = format!("({b}, {h}, {s}, {d})");
            let label = format!("{key}{}", if causal { " causal" } else { "" });
            for (pass, ms, fl, workload) in [("fwd", fwd, flops, tag), ("bwd", bwd, 2.5 * flops, bwd_tag)] {
                println!(
                    "{label:<30} {pass:>5} {ms:>9.4} {:>8.1} {:>18} {:>18}",
                    fl / (ms * 1e9),
                    ratio(torch_ms(&rows, workload, &key, "flash-attn-2"), ms),
                    ratio(torch_ms(&rows, workload, &key, "cudnn"), ms),
                );
            }
        }
    }
    Ok(())
}
