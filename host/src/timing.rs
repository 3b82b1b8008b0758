//! Timing device work: CUDA events on a CUDA context, the host clock on the CPU backend.
use crate::runtime::context::Context;
use crate::runtime::error::Result;
use std::time::{Duration, Instant};

/// Milliseconds one call of `op` takes on `ctx`, measured with events around the call (device
/// time, launch gaps included) or, on the CPU backend, with the host clock.
pub fn time_once(ctx: &Context, op: &mut impl FnMut() -> Result<()>) -> Result<f64> {
    if ctx.is_cuda() {
        let start = ctx.record_event()?;
        op()?;
        let end = ctx.record_event()?;
        Ok(start.elapsed_ms(&end)? as f64)
    } else {
        let t = Instant::now();
        op()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }
}

/// Median milliseconds of `reps` calls after `warmup` untimed ones.
pub fn median_ms(
    ctx: &Context,
    warmup: usize,
    reps: usize,
    mut op: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        op()?;
    }
    ctx.synchronize()?;
    let mut times = (0..reps.max(1)).map(|_| time_once(ctx, &mut op)).collect::<Result<Vec<f64>>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Total time of `iters` calls, for criterion's `iter_custom`.
pub fn total(ctx: &Context, iters: u64, mut op: impl FnMut() -> Result<()>) -> Result<Duration> {
    let mut ms = 0.0;
    for _ in 0..iters {
        ms += time_once(ctx, &mut op)?;
    }
    Ok(Duration::from_secs_f64(ms / 1e3))
}

/// GB/s for `bytes` moved in `ms` milliseconds.
pub fn gb_per_s(bytes: usize, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e6)
}
