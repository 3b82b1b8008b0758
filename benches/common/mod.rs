//! Shared by the criterion benches: a CUDA context (or a loud skip), and a bench of one op on
//! one input timed with CUDA events.
#![allow(dead_code)] // each bench binary uses a different part of it

use criterion::{BenchmarkId, Criterion, Throughput};
use ferrocuda::{timing, Context, Result, Tensor};

/// The CUDA context, or `None` after saying why the benches are skipped.
pub fn cuda() -> Option<Context> {
    match Context::cuda(0) {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            eprintln!("skipped (no CUDA device): {e}");
            None
        }
    }
}

/// Bench `f` on a fresh random input of `shape`; `bytes_per_elem` sets the throughput.
pub fn bench_op(
    c: &mut Criterion,
    ctx: &Context,
    group: &str,
    shape: &[usize],
    bytes_per_elem: u64,
    f: impl Fn(&Tensor) -> Result<Tensor>,
) {
    let n: usize = shape.iter().product();
    let x = ctx.randn(shape, 5).expect("input");
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Bytes(n as u64 * bytes_per_elem));
    let id = BenchmarkId::from_parameter(shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"));
    g.bench_function(id, |b| {
        b.iter_custom(|iters| timing::total(ctx, iters, || f(&x).map(drop)).expect("op"))
    });
    g.finish();
}
