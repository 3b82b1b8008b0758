//! Matrix multiply table: ferrocuda's GEMM against cuBLAS in the same process, and the fused
//! linear+GELU against the unfused path (and against PyTorch's `gelu(linear(x, w, b))`, i.e.
//! cuBLAS + a separate GELU kernel, when given torch_ref.py's JSON). The CPU backend's GFLOP/s
//! for the small sizes, like the seeds' "Matrix Operations" table. Last, the conv2d forward in f32
//! and TF32 against PyTorch's (cuDNN) from the same JSON.
//!
//! The irregular shapes (few rows, thin outputs, short inner dimensions, odd sizes: torch_ref's
//! `matmul_irregular_fp32/bf16` rows) in their own table, beside cuBLAS and PyTorch, with the
//! few-row products also as a linear layer's `A·Bᵀ` and in GB/s of B against a copy.
//!
//! Last, the GPT example's products (forward, input and weight gradients) beside cuBLAS.
//!
//! f32 rows are exact f32 as the library runs it (3xTF32 on `wgmma` where that pays, else the FMA
//! kernels); `FERROCUDA_MATMUL_F32X3=0` times the FMA kernels alone.
//!
//! `--gemm SPEC...` times only the products named, each `dtype:layout:MxNxK` (`bf16:nt:16384x1152x384`;
//! dtype bf16, f16 or tf32, layout nn/nt/tn/tt), on the values cuBLAS gets (its uniform fill) and on
//! `randn`'s, beside cuBLAS's `A·B` of the same (M, N, K): a short run for profilers.
//!
//!     matmul_bench [--irregular | --linear] [torch.json]     (--irregular: those two tables only;
//!                                                         --linear: the linear+GELU table only)
//!     matmul_bench --gemm SPEC...
use ferrocuda::timing::median_ms;
use ferrocuda::{linear, Activation, Context, DType, Result};

#[path = "../benches/baseline/cublas.rs"]
mod cublas;

fn tflops(m: usize, n: usize, k: usize, ms: f64) -> f64 {
    2.0 * (m * n * k) as f64 / (ms * 1e9)
}

/// One table row: ferrocuda's time and rate, cuBLAS's, their ratio, and a last column.
fn print_row((label, (m, n, k)): (String, (usize, usize, usize)), ms: f64, base: Option<f64>, last: &str) {
    println!(
        "{label:<22} {ms:>10.4} {:>9.2} {:>10} {:>9} {:>7} {last:>12}",
        tflops(m, n, k, ms),
        base.map_or("-".into(), |b| format!("{b:.4}")),
        base.map_or("-".into(), |b| format!("{:.2}", tflops(m, n, k, b))),
        base.map_or("-".into(), |b| format!("{:.2}x", b / ms)),
    );
}

fn torch_ms(path: Option<&String>, workload: &str, shape: &str) -> Option<f64> {
    let rows: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(path?).ok()?).ok()?;
    rows.iter().find(|r| r["workload"] == workload && r["shape"] == shape).and_then(|r| r["ms"].as_f64())
}

/// torch_ref's irregular shapes, (M, K, N) as it prints them.
const IRREGULAR: [(usize, usize, usize); 7] = [
    (1, 8192, 8192),
    (16, 8192, 8192),
    (128, 8192, 8192),
    (8192, 8192, 128),
    (16384, 256, 16384),
    (3001, 2999, 3003),
    (6144, 6144, 6144),
];

fn irregular(
    ctx: &Context,
    blas: &std::result::Result<cublas::Cublas, String>,
    torch_json: Option<&String>,
) -> Result<()> {
    let x = ctx.randn(&[1 << 28], 1)?;
    let copy_ms = median_ms(ctx, 3, 20, || x.copy().map(drop))?;
    let copy_gbs = (8usize << 28) as f64 / (copy_ms * 1e6);
    drop(x);
    println!("\n# copy bandwidth (read + write, 2^28 f32): {copy_gbs:.0} GB/s");
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>7} {:>9} {:>7} {:>8}",
        "irregular (M, K, N)", "ms", "TFLOP/s", "cuBLAS", "ratio", "torch", "ratio", "B %copy"
    );
    for (dtype, workload) in [(DType::F32, "matmul_irregular_fp32"), (DType::BF16, "matmul_irregular_bf16")] {
        for (m, k, n) in IRREGULAR {
            let a = ctx.randn(&[m, k], 1)?.to_dtype(dtype)?;
            let b = ctx.randn(&[k, n], 2)?.to_dtype(dtype)?;
            let reps = if m * n * k >= 1 << 36 { 10 } else { 30 };
            let ms = median_ms(ctx, 3, reps, || a.matmul(&b).map(drop))?;
            let base = blas.as_ref().ok().and_then(|c| match dtype {
                DType::BF16 => c.gemm_ms::<ferrocuda::bf16>(m, n, k, false, reps).ok(),
                _ => c.sgemm_ms(m, n, k, false, reps).ok(),
            });
            let torch = torch_ms(torch_json, workload, &format!("({m}, {k}, {n})"));
            let b_bytes = (k * n * dtype.size_bytes()) as f64;
            // B read once at the copy's bandwidth: the floor of the few-row products.
            let b_frac = |ms: f64| b_bytes / (ms * 1e6) / copy_gbs;
            let label = format!("{} ({m}, {k}, {n})", if dtype == DType::F32 { "f32" } else { "bf16" });
            let ratio = |t: Option<f64>| t.map_or("-".into(), |t| format!("{:.2}x", t / ms));
            let time = |t: Option<f64>| t.map_or("-".into(), |t| format!("{t:.4}"));
            println!(
                "{label:<28} {ms:>9.4} {:>9.2} {:>9} {:>7} {:>9} {:>7} {:>7.0}%",
                tflops(m, n, k, ms),
                time(base),
                ratio(base),
                time(torch),
                ratio(torch),
                b_frac(ms) * 100.0
            );
            if m <= 16 {
                // The decode step's layout: a linear layer's weight [N, K].
                let bt = ctx.randn(&[n, k], 3)?.to_dtype(dtype)?;
                let ms = median_ms(ctx, 3, reps, || a.matmul_t(&bt).map(drop))?;
                println!(
                    "{:<28} {ms:>9.4} {:>9.2} {:>9} {:>7} {:>9} {:>7} {:>7.0}%",
                    format!("  A·Bᵀ ({m}, {k}, {n})"),
                    tflops(m, n, k, ms),
                    "-",
                    "-",
                    "-",
                    "-",
                    b_frac(ms) * 100.0
                );
            }
        }
    }
    Ok(())
}

/// One product: label, A's shape, B's shape, transpose A, transpose B.
type Product = (&'static str, [usize; 2], [usize; 2], bool, bool);

/// The GPT example's products (bf16, tokens M = 16384, width 384); cuBLAS beside them is its
/// plain `A·B` of the same (M, N, K).
const GPT: [Product; 6] = [
    ("fwd x·Wᵀ 384→1152", [16384, 384], [1152, 384], false, true),
    ("fwd x·Wᵀ 1536→384", [16384, 1536], [384, 1536], false, true),
    ("dX = dY·W 1152→384", [16384, 1152], [1152, 384], false, false),
    ("dW = dYᵀ·X 1152×384", [16384, 1152], [16384, 384], true, false),
    ("dW = dYᵀ·X 384×1536", [16384, 384], [16384, 1536], true, false),
    ("head dW 73×384", [16384, 73], [16384, 384], true, false),
];

fn gpt_shapes(ctx: &Context, blas: &std::result::Result<cublas::Cublas, String>) -> Result<()> {
    println!("\n{:<28} {:>9} {:>9} {:>9} {:>7}", "GPT bf16 (M, N, K)", "ms", "TFLOP/s", "cuBLAS", "ratio");
    for (label, sa, sb, ta, tb) in GPT {
        let a = ctx.randn(&sa, 1)?.to_dtype(DType::BF16)?;
        let b = ctx.randn(&sb, 2)?.to_dtype(DType::BF16)?;
        let (m, k) = if ta { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
        let n = if tb { sb[0] } else { sb[1] };
        let ms = median_ms(ctx, 3, 20, || {
            ferrocuda::Gemm::new(&a, &b).transpose_a(ta).transpose_b(tb).run().map(drop)
        })?;
        let base = blas.as_ref().ok().and_then(|c| c.gemm_ms::<ferrocuda::bf16>(m, n, k, false, 20).ok());
        println!(
            "{:<28} {ms:>9.4} {:>9.2} {:>9} {:>7}",
            format!("{label} ({m}, {n}, {k})"),
            tflops(m, n, k, ms),
            base.map_or("-".into(), |b| format!("{b:.4}")),
            base.map_or("-".into(), |b| format!("{:.2}x", b / ms)),
        );
    }
    Ok(())
}

/// The values `cublas::Cublas` fills its operands with, so that both sides multiply the same data.
fn cublas_fill(ctx: &Context, shape: [usize; 2], seed: u64, dtype: DType) -> Result<ferrocuda::Tensor> {
    let host: Vec<f32> = (0..(shape[0] * shape[1]) as u64)
        .map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    ctx.from_slice(&host, &shape)?.to_dtype(dtype)
}

/// `--gemm`: each `dtype:layout:MxNxK` beside cuBLAS.
fn gemm_specs(
    ctx: &Context,
    blas: &std::result::Result<cublas::Cublas, String>,
    specs: &[String],
) -> Result<()> {
    println!(
        "{:<28} {:>9} {:>9} {:>11} {:>9} {:>9} {:>7}",
        "product", "ms", "TFLOP/s", "randn ms", "cuBLAS", "TFLOP/s", "ratio"
    );
    for spec in specs {
        let parts: Vec<&str> = spec.split(':').collect();
        let dims: Vec<usize> =
            parts.get(2).map_or(vec![], |d| d.split('x').filter_map(|x| x.parse().ok()).collect());
        let (Some(&dt), Some(&layout), &[m, n, k]) = (parts.first(), parts.get(1), &dims[..]) else {
            println!("{spec}: expected dtype:layout:MxNxK");
            continue;
        };
        // tf32: f32 operands with TF32 tensor cores on both sides.
        let (dtype, tf32) = match dt {
            "f16" => (DType::F16, false),
            "tf32" => (DType::F32, true),
            "f32" => (DType::F32, false),
            _ => (DType::BF16, false),
        };
        let (ta, tb) = (layout.starts_with('t'), layout.ends_with('t'));
        let sa = if ta { [k, m] } else { [m, k] };
        let sb = if tb { [n, k] } else { [k, n] };
        let reps = if m * n * k >= 1 << 36 { 10 } else { 30 };
        let time = |a: &ferrocuda::Tensor, b: &ferrocuda::Tensor| {
            median_ms(ctx, 3, reps, || {
                ferrocuda::Gemm::new(a, b).transpose_a(ta).transpose_b(tb).allow_tf32(tf32).run().map(drop)
            })
        };
        let ms = time(&cublas_fill(ctx, sa, 1, dtype)?, &cublas_fill(ctx, sb, 2, dtype)?)?;
        let randn_ms = time(&ctx.randn(&sa, 1)?.to_dtype(dtype)?, &ctx.randn(&sb, 2)?.to_dtype(dtype)?)?;
        let base = blas.as_ref().ok().and_then(|c| match dtype {
            DType::F16 => c.gemm_ms::<ferrocuda::f16>(m, n, k, false, reps).ok(),
            DType::F32 => c.sgemm_ms(m, n, k, tf32, reps).ok(),
            _ => c.gemm_ms::<ferrocuda::bf16>(m, n, k, false, reps).ok(),
        });
        println!(
            "{spec:<28} {ms:>9.4} {:>9.2} {randn_ms:>11.4} {:>9} {:>9} {:>7}",
            tflops(m, n, k, ms),
            base.map_or("-".into(), |b| format!("{b:.4}")),
            base.map_or("-".into(), |b| format!("{:.2}", tflops(m, n, k, b))),
            base.map_or("-".into(), |b| format!("{:.2}x", b / ms)),
        );
    }
    Ok(())
}

/// Fused linear + bias + GELU (tanh) against the unfused path and PyTorch's `gelu(linear(x, w, b))`
/// (cuBLAS, then a separate GELU kernel), at torch_ref's `linear_gelu_fp32` and `_bf16` shapes.
fn linear_gelu(ctx: &Context, torch_json: Option<&String>) -> Result<()> {
    println!(
        "\n{:<34} {:>10} {:>10} {:>9} {:>10} {:>8} {:>10} {:>10}",
        "linear+GELU (M, K, N)",
        "fused ms",
        "unfused",
        "speedup",
        "torch ms",
        "vs torch",
        "x·Wᵀ ms",
        "+bias ms"
    );
    // bf16 first: the f32 rows keep the tensor cores at full power for ~0.1 s (3xTF32), and the
    // bf16 rows timed right after them ran 8-12% slower than from an idle device (H100,
    // thirty-fifth session), while torch_ref's f32 rows (SIMT SGEMM) leave its bf16 rows as fast.
    let shapes = [
        (DType::BF16, "linear_gelu_bf16", [(8192, 4096, 4096), (16384, 768, 3072)]),
        (DType::F32, "linear_gelu_fp32", [(1024, 512, 768), (8192, 4096, 4096)]),
    ];
    for (dtype, workload, sizes) in shapes {
        for (m, k, n) in sizes {
            let x = ctx.randn(&[m, k], 5)?.to_dtype(dtype)?;
            let w = ctx.randn(&[n, k], 6)?.to_dtype(dtype)?;
            let bias = ctx.randn(&[n], 7)?.to_dtype(dtype)?;
            let bias_full = ctx.full(&[m, 1], 1.0)?.to_dtype(dtype)?.matmul(&bias.reshape(&[1, n])?)?;
            let fused = median_ms(ctx, 2, 10, || linear(&x, &w, Some(&bias), Activation::Gelu).map(drop))?;
            let unfused = median_ms(ctx, 2, 10, || x.matmul_t(&w)?.add(&bias_full)?.gelu().map(drop))?;
            // What the epilogue costs: the product alone, then with the bias.
            let plain = median_ms(ctx, 2, 10, || x.matmul_t(&w).map(drop))?;
            let biased = median_ms(ctx, 2, 10, || linear(&x, &w, Some(&bias), Activation::None).map(drop))?;
            let torch = torch_ms(torch_json, workload, &format!("({m}, {k}, {n})"));
            println!(
                "{:<34} {fused:>10.4} {unfused:>10.4} {:>8.2}x {:>10} {:>8} {plain:>10.4} {biased:>10.4}",
                format!("{dtype:?} ({m}, {k}, {n})"),
                unfused / fused,
                torch.map_or("-".into(), |t| format!("{t:.4}")),
                torch.map_or("-".into(), |t| format!("{:.2}x", t / fused)),
            );
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--gemm") {
        let ctx = Context::new()?;
        println!("# matmul_bench --gemm on {}", ctx.device());
        let blas = if ctx.is_cuda() { cublas::Cublas::new() } else { Err("CPU backend".into()) };
        return gemm_specs(&ctx, &blas, &args[at + 1..]);
    }
    let only_irregular = args.iter().any(|a| a == "--irregular");
    let only_linear = args.iter().any(|a| a == "--linear");
    args.retain(|a| a != "--irregular" && a != "--linear");
    let torch_json = args.first();
    let ctx = Context::new()?;
    println!("# matmul_bench on {}", ctx.device());
    let blas = if ctx.is_cuda() { cublas::Cublas::new() } else { Err("CPU backend".into()) };
    if let Err(why) = &blas {
        println!("# cuBLAS baseline unavailable: {why}");
    }
    if only_irregular {
        irregular(&ctx, &blas, torch_json)?;
        return gpt_shapes(&ctx, &blas);
    }
    if only_linear {
        return linear_gelu(&ctx, torch_json);
    }
    let cpu = Context::cpu();
    println!(
        "{:<22} {:>10} {:>9} {:>10} {:>9} {:>7} {:>12}",
        "f32 C = A·B", "ms", "TFLOP/s", "cuBLAS ms", "TFLOP/s", "ratio", "CPU GFLOP/s"
    );
    for n in [128, 256, 512, 1024, 2048, 4096, 8192] {
        let (a, b) = (ctx.randn(&[n, n], 1)?, ctx.randn(&[n, n], 2)?);
        let reps = if n >= 4096 { 10 } else { 30 };
        let ms = median_ms(&ctx, 3, reps, || a.matmul(&b).map(drop))?;
        let base = blas.as_ref().ok().and_then(|c| c.sgemm_ms(n, n, n, false, reps).ok());
        let cpu_gflops = if n <= 512 {
            let (ac, bc) = (a.to_context(&cpu)?, b.to_context(&cpu)?);
            let cms = median_ms(&cpu, 1, 3, || ac.matmul(&bc).map(drop))?;
            format!("{:.1}", tflops(n, n, n, cms) * 1e3)
        } else {
            "-".into()
        };
        print_row((format!("{n}x{n}x{n}"), (n, n, n)), ms, base, &cpu_gflops);
    }
    let (m, k, n) = (8192, 4096, 4096);
    let (a, b) = (ctx.randn(&[m, k], 3)?, ctx.randn(&[k, n], 4)?);
    let ms = median_ms(&ctx, 2, 10, || a.matmul(&b).map(drop))?;
    let base = blas.as_ref().ok().and_then(|c| c.sgemm_ms(m, n, k, false, 10).ok());
    print_row((format!("{m}x{n}x{k}"), (m, n, k)), ms, base, "");

    let tensor_core_path = if ctx.uses_sm90a_kernels() { "wgmma" } else { "mma.sync" };
    println!(
        "\n{:<22} {:>10} {:>9} {:>10} {:>9} {:>7}",
        format!("tf32 ({tensor_core_path})"),
        "ms",
        "TFLOP/s",
        "cuBLAS ms",
        "TFLOP/s",
        "ratio"
    );
    for n in [1024, 2048, 4096, 8192] {
        let (a, b) = (ctx.randn(&[n, n], 1)?, ctx.randn(&[n, n], 2)?);
        let ms = median_ms(&ctx, 3, 20, || ferrocuda::Gemm::new(&a, &b).allow_tf32(true).run().map(drop))?;
        let base = blas.as_ref().ok().and_then(|c| c.sgemm_ms(n, n, n, true, 20).ok());
        print_row((format!("{n}x{n}x{n}"), (n, n, n)), ms, base, "");
    }

    for dtype in [ferrocuda::DType::BF16, ferrocuda::DType::F16] {
        let title = format!("{dtype:?} ({tensor_core_path})").to_lowercase();
        println!(
            "\n{title:<22} {:>10} {:>9} {:>10} {:>9} {:>7}",
            "ms", "TFLOP/s", "cuBLAS ms", "TFLOP/s", "ratio"
        );
        for (m, n, k) in [
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (4096, 4096, 4096),
            (8192, 8192, 8192),
            (8192, 4096, 4096),
        ] {
            let a = ctx.randn(&[m, k], 1)?.to_dtype(dtype)?;
            let b = ctx.randn(&[k, n], 2)?.to_dtype(dtype)?;
            let ms = median_ms(&ctx, 3, 20, || a.matmul(&b).map(drop))?;
            let base = blas.as_ref().ok().and_then(|c| match dtype {
                ferrocuda::DType::BF16 => c.gemm_ms::<ferrocuda::bf16>(m, n, k, false, 20).ok(),
                _ => c.gemm_ms::<ferrocuda::f16>(m, n, k, false, 20).ok(),
            });
            print_row((format!("{m}x{n}x{k}"), (m, n, k)), ms, base, "");
        }
        // The layout of a linear layer (B stored [N, K]): both operands K-major.
        let (m, n, k) = (8192, 8192, 8192);
        let a = ctx.randn(&[m, k], 1)?.to_dtype(dtype)?;
        let b = ctx.randn(&[n, k], 2)?.to_dtype(dtype)?;
        let ms = median_ms(&ctx, 3, 20, || a.matmul_t(&b).map(drop))?;
        print_row((format!("{m}x{n}x{k} A·Bᵀ"), (m, n, k)), ms, None, "");
    }

    linear_gelu(&ctx, torch_json)?;

    println!(
        "\n{:<40} {:>9} {:>9} {:>10} {:>9} {:>7}",
        "conv2d forward, padding 1 (implicit GEMM)", "ms", "TFLOP/s", "cuDNN ms", "TFLOP/s", "ratio"
    );
    for (input, weight) in [([32, 64, 128, 128], [128, 64, 3, 3]), ([1, 32, 64, 64], [64, 32, 3, 3])] {
        let (x, w) = (ctx.randn(&input, 8)?, ctx.randn(&weight, 9)?);
        let params = ferrocuda::Conv2dParams::new().padding(1);
        // As torch_ref counts it: 2·N·K·H·W·C·R·S.
        let flops = 2 * input[0] * weight[0] * input[2] * input[3] * weight[1] * 9;
        for (precision, workload) in [(false, "conv2d_fp32"), (true, "conv2d_tf32")] {
            ctx.set_allow_tf32(precision);
            let ms = median_ms(&ctx, 3, 20, || ferrocuda::conv2d(&x, &w, None, params).map(drop))?;
            let shape = format!("({}, {})", py_tuple(&input), py_tuple(&weight));
            let torch = torch_ms(torch_json, workload, &shape);
            let rate = |ms: f64| flops as f64 / (ms * 1e9);
            println!(
                "{:<40} {ms:>9.4} {:>9.2} {:>10} {:>9} {:>7}",
                format!("{} {input:?}⊛{weight:?}", if precision { "tf32" } else { "f32" }),
                rate(ms),
                torch.map_or("-".into(), |t| format!("{t:.4}")),
                torch.map_or("-".into(), |t| format!("{:.2}", rate(t))),
                torch.map_or("-".into(), |t| format!("{:.2}x", t / ms)),
            );
        }
        ctx.set_allow_tf32(false);
    }
    irregular(&ctx, &blas, torch_json)?;
    gpt_shapes(&ctx, &blas)
}

/// Python's `str()` of a tuple of ints.
fn py_tuple(dims: &[usize]) -> String {
    format!("({})", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}
