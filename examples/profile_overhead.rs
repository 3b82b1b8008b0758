//! What the profiler costs per launch: rounds of 10^4 tiny `add` launches (1,000 elements, the
//! launch-bound case), alternately with profiling off and on, best round of each (15 by default: the host's launch time varies by a third between runs). Prints the host
//! time to queue one launch and the time per launch until the device has finished them all, and
//! the difference. Exits non-zero when profiling adds more than 2 µs per launch to either.
//!
//!     profile_overhead [rounds]
use ferrocuda::{Context, Result, Tensor};
use std::time::Instant;

const LAUNCHES: usize = 10_000;
const BUDGET_US: f64 = 2.0;

/// (µs to queue one launch, µs per launch including the device finishing).
fn round(ctx: &Context, x: &Tensor, on: bool) -> Result<(f64, f64)> {
    ctx.reset_profile()?;
    ctx.profile(on)?;
    ctx.synchronize()?;
    let started = Instant::now();
    for _ in 0..LAUNCHES {
        drop(x.add(x)?);
    }
    let queued = started.elapsed();
    ctx.synchronize()?;
    let finished = started.elapsed();
    ctx.profile(false)?;
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / LAUNCHES as f64;
    Ok((per(queued), per(finished)))
}

fn main() -> Result<()> {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(15);
    let ctx = Context::new()?;
    println!("# profiler overhead on {}", ctx.device());
    if !ctx.is_cuda() {
        println!("no CUDA device: nothing to measure");
        return Ok(());
    }
    let x = ctx.randn(&[1000], 1)?;
    // Warm-up: module load, pool, the profiler's event free list.
    round(&ctx, &x, false)?;
    round(&ctx, &x, true)?;
    let (mut off, mut on) = ((f64::MAX, f64::MAX), (f64::MAX, f64::MAX));
    for _ in 0..rounds.max(1) {
        let (q, f) = round(&ctx, &x, false)?;
        off = (off.0.min(q), off.1.min(f));
        let (q, f) = round(&ctx, &x, true)?;
        on = (on.0.min(q), on.1.min(f));
    }
    // The records of the last round, as a check that they were taken.
    ctx.profile(true)?;
    drop(x.add(&x)?);
    ctx.profile(false)?;
    let report = ctx.profile_report()?;
    let recorded: usize = report.kernels().iter().map(|k| k.calls).sum();
    ctx.reset_profile()?;
    println!("{:<24} {:>12} {:>12}", format!("{LAUNCHES} add launches"), "queue µs", "finish µs");
    println!("{:<24} {:>12.3} {:>12.3}", "profiling off", off.0, off.1);
    println!("{:<24} {:>12.3} {:>12.3}", "profiling on", on.0, on.1);
    let added = (on.0 - off.0, on.1 - off.1);
    println!("{:<24} {:>12.3} {:>12.3}", "added per launch", added.0, added.1);
    let ok = added.0 <= BUDGET_US && added.1 <= BUDGET_US && recorded == LAUNCHES + 1;
    println!(
        "# {}: budget {BUDGET_US} µs per launch; {recorded} launches recorded in the last profiled round (timed by {})",
        if ok { "ok" } else { "OVER BUDGET" },
        report.timing()
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
