//! The main job: open the device, run every op, check each against the CPU backend (f64
//! oracle), and print per-op time and bandwidth.
//!
//!     cargo run --release --example quickstart            # 4096×1024 inputs
//!     cargo run --release --example quickstart -- 1000 31 # any shape
use ferrocuda::timing::{gb_per_s, median_ms};
use ferrocuda::{Context, Result, Tensor};
use std::time::Instant;

type Op = fn(&Tensor, &Tensor) -> Result<Tensor>;

/// The driver variable that sets how many hardware work queues a new context gets.
const QUEUES: &str = "CUDA_DEVICE_MAX_CONNECTIONS";

fn main() -> Result<()> {
    // The driver builds every hardware work queue when it creates the context: with its default
    // of 8 that takes 104–171 ms on an H100, with 2 about 79 ms (docs/perf-notes.md, start-up).
    // This program runs one stream, so it asks for 2 unless the caller set a number. Set here,
    // before any thread exists and before the driver loads.
    if std::env::var_os(QUEUES).is_none() {
        std::env::set_var(QUEUES, "2");
    }
    let queues = std::env::var(QUEUES).unwrap_or_default();
    let shape: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let shape = if shape.is_empty() { vec![4096, 1024] } else { shape };
    let n: usize = shape.iter().product();

    let started = Instant::now();
    // Loads libcuda and runs cuInit, which Context::new would otherwise do first.
    let gpus = ferrocuda::cuda_device_count();
    let driver = started.elapsed();
    let ctx = Context::new()?;
    let ready = started.elapsed();
    println!("device: {}", ctx.device());
    println!(
        "driver loaded and initialised ({gpus} GPUs) in {:.1} ms; Context::new() then took {:.1} ms \
         (total {:.1} ms; {QUEUES}={queues})",
        driver.as_secs_f64() * 1e3,
        (ready - driver).as_secs_f64() * 1e3,
        ready.as_secs_f64() * 1e3,
    );
    let first_op = Instant::now();
    ctx.full(&[1], 0.0)?.to_vec()?;
    println!(
        "first launch and read-back {:.1} ms{}",
        first_op.elapsed().as_secs_f64() * 1e3,
        modules_loaded(&ctx)
    );
    let cpu = Context::cpu();
    let a = ctx.randn(&shape, 7)?;
    let b = ctx.randn(&shape, 8)?.add_scalar(3.0)?;
    let (ac, bc) = (a.to_context(&cpu)?, b.to_context(&cpu)?);

    // (name, op, bytes moved per element, tolerance)
    let ops: [(&str, Op, usize, f64); 16] = [
        ("add", |x, y| x.add(y), 12, 1e-5),
        ("sub", |x, y| x.sub(y), 12, 1e-5),
        ("mul", |x, y| x.mul(y), 12, 1e-5),
        ("div", |x, y| x.div(y), 12, 1e-5),
        ("add_scalar", |x, _| x.add_scalar(0.5), 8, 1e-5),
        ("relu", |x, _| x.relu(), 8, 1e-5),
        ("sigmoid", |x, _| x.sigmoid(), 8, 1e-5),
        ("tanh", |x, _| x.tanh(), 8, 1e-5),
        ("gelu", |x, _| x.gelu(), 8, 1e-5),
        ("sum", |x, _| x.sum(), 4, 1e-6),
        ("mean", |x, _| x.mean(), 4, 1e-5),
        ("max", |x, _| x.max(), 4, 0.0),
        ("min", |x, _| x.min(), 4, 0.0),
        ("sum_last", |x, _| x.sum_last(), 4, 1e-5),
        ("max_last", |x, _| x.max_last(), 4, 0.0),
        (
            "transpose",
            |x, _| x.reshape(&[x.len() / x.shape()[x.rank() - 1], x.shape()[x.rank() - 1]])?.transpose(),
            8,
            0.0,
        ),
    ];
    println!("\n{:<11} {:>10} {:>10} {:>12}  check vs CPU (f64)", "op", "shape", "ms", "GB/s");
    let mut failures = 0;
    for (name, op, bytes_per_elem, tol) in ops {
        let got = op(&a, &b)?.to_vec()?;
        let want = op(&ac, &bc)?.to_vec()?;
        let err = relative_error(&got, &want);
        let ok = err <= tol.max(1e-7);
        failures += usize::from(!ok);
        let ms = median_ms(&ctx, 3, 20, || op(&a, &b).map(drop))?;
        println!(
            "{name:<11} {:>10} {ms:>10.4} {:>12.1}  rel err {err:.1e} {}",
            format!("{shape:?}").replace(' ', ""),
            gb_per_s(n * bytes_per_elem, ms),
            if ok { "ok" } else { "MISMATCH" }
        );
    }
    let y = a.add(&b)?.gelu()?;
    println!("\nsum(gelu(a + b)) = {}", y.sum()?.to_scalar()?);
    if let Some(stats) = ctx.pool_stats() {
        println!("pool: {stats:?}");
    }
    println!("after every op{}", modules_loaded(&ctx));
    if failures > 0 {
        eprintln!("{failures} ops disagree with the CPU reference");
        std::process::exit(1);
    }
    Ok(())
}

fn relative_error(got: &[f32], want: &[f32]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|&w| (w as f64).powi(2)).sum();
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// " (kernel modules loaded so far in N ms from ...)": each module loads at its first launch.
fn modules_loaded(ctx: &Context) -> String {
    match (ctx.module_load_time(), ctx.module_source()) {
        (Some(t), Some(source)) => format!(
            " (kernel modules loaded so far in {:.1} ms, from {})",
            t.as_secs_f64() * 1e3,
            match source {
                ferrocuda::ModuleSource::Cubin => "prebuilt cubins",
                ferrocuda::ModuleSource::JitPtx => "PTX compiled by the driver",
            }
        ),
        _ => String::new(),
    }
}
