//! Test support shared by every test file: a small runner, the CPU oracle, inputs and tolerances.
//!
//! Each test file is its own harness (`harness = false`) so that, without a CUDA device, the GPU
//! cases print `skipped (no CUDA device)` in `cargo test`'s own output; with
//! `FERROCUDA_REQUIRE_GPU=1` a missing device fails them instead. The summary line follows
//! libtest's (`test result: ok. N passed; M failed; K ignored; ...`).
#![allow(dead_code)]

use ferrocuda::{Context, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

/// A test case: `Gpu` cases take a CUDA context and compare it against the CPU backend; `Cpu`
/// cases check the CPU backend itself (against plain f64 loops) and always run.
pub enum Case {
    Gpu(fn(&Context)),
    Cpu(fn()),
}

/// Panics with `what`, the number of differing elements and the first difference (not the whole
/// vectors, which run to megabytes) unless `got == want`.
pub fn assert_same(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let differ: Vec<usize> = (0..got.len()).filter(|&i| got[i].to_bits() != want[i].to_bits()).collect();
    if let Some(&i) = differ.first() {
        panic!(
            "{what}: {} of {} elements differ, first at {i}: {} vs {}",
            differ.len(),
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// Run the cases whose names contain every non-flag argument; exit non-zero if any failed.
pub fn run(cases: &[(&str, Case)]) {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let require_gpu = std::env::var("FERROCUDA_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let gpu = if Context::cuda_available() { Context::cuda(0).ok() } else { None };
    let selected: Vec<_> =
        cases.iter().filter(|(n, _)| filters.iter().all(|f| n.contains(f.as_str()))).collect();
    let started = Instant::now();
    println!("\nrunning {} tests", selected.len());
    if let Some(ctx) = &gpu {
        println!("device: {}", ctx.device());
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut failures = Vec::new();
    for (name, case) in &selected {
        let outcome = match (case, &gpu) {
            (Case::Gpu(_), None) if !require_gpu => {
                println!("test {name} ... skipped (no CUDA device)");
                skipped += 1;
                continue;
            }
            (Case::Gpu(_), None) => Err("FERROCUDA_REQUIRE_GPU=1 but no CUDA device".to_string()),
            (Case::Gpu(f), Some(ctx)) => catch_unwind(AssertUnwindSafe(|| f(ctx))).map_err(panic_text),
            (Case::Cpu(f), _) => catch_unwind(AssertUnwindSafe(f)).map_err(panic_text),
        };
        match outcome {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(msg) => {
                println!("test {name} ... FAILED");
                failures.push(format!("{name}: {msg}"));
                failed += 1;
            }
        }
    }
    for f in &failures {
        println!("---- {f}");
    }
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {failed} failed; {skipped} ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        cases.len() - selected.len(),
        started.elapsed().as_secs_f64()
    );
    if failed > 0 {
        std::process::exit(101);
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// The sizes every elementwise and whole-tensor test covers: empty, tiny, odd, past every tile,
/// 2^20+3, and 4096×4097.
pub const SIZES: [usize; 6] = [0, 1, 31, 1000, (1 << 20) + 3, 4096 * 4097];

/// Fresh random normal inputs from the CPU backend (never zeros): a new seed per call site.
pub fn randn_host(n: usize, seed: u64) -> Vec<f32> {
    Context::cpu().randn(&[n], seed).and_then(|t| t.to_vec()).expect("CPU randn")
}

/// `‖got − want‖ / ‖want‖` in f64; NaN anywhere in `got` where `want` has none fails it.
pub fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        if w.is_nan() {
            assert!(g.is_nan(), "expected NaN, got {g}");
            continue;
        }
        assert!(!g.is_nan(), "NaN where {w} was expected");
        num += (g as f64 - w as f64).powi(2);
        den += (w as f64).powi(2);
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Assert `rel_err(got, want) <= tol`, naming the case.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f64) {
    let e = rel_err(got, want);
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.1e}");
}

/// A GPU output poisoned with NaN before the op under test writes a fresh buffer: the pool hands
/// the same block back for the next allocation of that size class, so filling and dropping one
/// first makes any element the kernel fails to write show up as NaN.
pub fn poison_pool(ctx: &Context, shape: &[usize]) {
    drop(ctx.full(shape, f32::NAN).expect("poison"));
}

/// Same data on both backends.
pub fn pair(gpu: &Context, data: &[f32], shape: &[usize]) -> (Tensor, Tensor) {
    (gpu.from_slice(data, shape).expect("upload"), Context::cpu().from_slice(data, shape).expect("cpu"))
}

/// [`poison_pool`] for an output of `dtype` (its buffer's size class).
pub fn poison_pool_as(ctx: &Context, shape: &[usize], dtype: ferrocuda::DType) {
    drop(ctx.full_as(shape, f32::NAN, dtype).expect("poison"));
}

/// [`pair`] in `dtype`: the same values, rounded to it, on both backends.
pub fn pair_as(gpu: &Context, data: &[f32], shape: &[usize], dtype: ferrocuda::DType) -> (Tensor, Tensor) {
    let (g, c) = pair(gpu, data, shape);
    (g.to_dtype(dtype).expect("convert"), c.to_dtype(dtype).expect("cpu convert"))
}

/// Norm-wise tolerance of an op's output in `dtype` (computed in f32 or wider, rounded once).
pub fn tol_of(dtype: ferrocuda::DType) -> f64 {
    match dtype {
        ferrocuda::DType::F32 => 1e-5,
        _ => 1e-2,
    }
}

/// Whether the tests run under compute-sanitizer (`FERROCUDA_SANITIZER=1`): sizes shrink.
pub fn under_sanitizer() -> bool {
    std::env::var("FERROCUDA_SANITIZER").is_ok_and(|v| v == "1")
}

/// `[rows, cols]` shapes that reach every branch of the row kernels' dispatch: one value; one
/// long row (split over blocks); rows of 2^22 (split, 512 chunks a row); narrow rows (several
/// per warp, one chunk a lane); a warp per row; a block per row split for want of rows; GPT-2's
/// vocabulary (split, the last chunk partial); whole rows
/// on blocks of 64 (unaligned), 128 and 256 threads holding 8, 16 or 32 values a thread; rows
/// around the boundaries: the widest of one chunk a lane (256), the narrowest past it (264), a
/// split unaligned row (4099) for want of rows, a row one past a block's 8192.
pub fn row_dispatch_shapes() -> Vec<[usize; 2]> {
    let mut shapes = if under_sanitizer() {
        vec![[1, 1], [1, (1 << 16) + 3], [3, 1 << 16], [1000, 31], [1003, 16], [31, 1000], [8, 50257]]
    } else {
        vec![
            [1, 1],
            [1, (1 << 20) + 3],
            [3, 1 << 22],
            [1000, 31],
            [(1 << 20) + 3, 16],
            [31, 1000],
            [64, 50257],
        ]
    };
    shapes.extend([[300, 1501], [270, 4000], [265, 8192], [5003, 384], [1001, 257], [129, 512]]);
    shapes.extend([[7, 8], [33, 256], [33, 264], [200, 4099], [5, 8193], [300, 9001], [31, 16411]]);
    // The warp-row layer norm's edges: a lane's vectors partly past the row, its widest rows.
    shapes.extend([[17, 136], [9, 1024]]);
    shapes
}

pub const DTYPES: [ferrocuda::DType; 3] =
    [ferrocuda::DType::F32, ferrocuda::DType::F16, ferrocuda::DType::BF16];

/// The multi-threaded workload of the runtime and profiler tests: four threads on three streams
/// of `gpu` (two threads share its own stream), each queueing a chain of `adds` additions to a
/// fresh `randn` without waiting in between (fewer under compute-sanitizer). Returns `adds` and
/// each thread's result and input.
pub fn adds_on_four_threads(gpu: &Context) -> (usize, Vec<(Tensor, Tensor)>) {
    let adds = if under_sanitizer() { 25 } else { 250 };
    let contexts = [gpu.clone(), gpu.clone(), gpu.new_stream().unwrap(), gpu.new_stream().unwrap()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = contexts
            .iter()
            .enumerate()
            .map(|(i, ctx)| {
                scope.spawn(move || {
                    let x = ctx.randn(&[1000 + i], 10 + i as u64).unwrap();
                    let y = (0..adds).try_fold(x.clone(), |acc, _| acc.add(&x)).unwrap();
                    ctx.synchronize().unwrap();
                    (y, x)
                })
            })
            .collect();
        (adds, handles.into_iter().map(|h| h.join().expect("worker thread")).collect())
    })
}

/// An environment variable set to a value until dropped (then removed): the switches the library
/// reads at each call (`FERROCUDA_CONV_WGMMA`, `FERROCUDA_MATMUL_F32X3`), so that a test can take
/// a path its sizes would not take by default. The test files run their cases one at a time.
pub struct EnvSetting(&'static str);

impl EnvSetting {
    pub fn set(name: &'static str, value: &str) -> Self {
        std::env::set_var(name, value);
        EnvSetting(name)
    }
}

impl Drop for EnvSetting {
    fn drop(&mut self) {
        std::env::remove_var(self.0);
    }
}
