//! Timing device work: CUDA events on a CUDA context, the host clock on the CPU backend.
use crate::runtime::context::Context;
use crate::runtime::error::Result;
use crate::runtime::stream::Event;
use std::time::{Duration, Instant};

/// Times single calls on one context: CUDA events (made once, recorded around each call: device
/// time, launch gaps included) or, on the CPU backend, the host clock.
pub struct OpTimer {
    ctx: Context,
    events: Option<(Event, Event)>,
}

impl OpTimer {
    pub fn new(ctx: &Context) -> Result<Self> {
        let events = if ctx.is_cuda() { Some((ctx.record_event()?, ctx.record_event()?)) } else { None };
        Ok(Self { ctx: ctx.clone(), events })
    }

    /// Milliseconds one call of `op` takes.
    pub fn time(&self, op: &mut impl FnMut() -> Result<()>) -> Result<f64> {
        match &self.events {
            Some((start, end)) => {
                self.ctx.rerecord_event(start)?;
                op()?;
                self.ctx.rerecord_event(end)?;
                Ok(start.elapsed_ms(end)? as f64)
            }
            None => {
                let t = Instant::now();
                op()?;
                Ok(t.elapsed().as_secs_f64() * 1e3)
            }
        }
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
    let timer = OpTimer::new(ctx)?;
    let mut times = (0..reps.max(1)).map(|_| timer.time(&mut op)).collect::<Result<Vec<f64>>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Total time of `iters` calls, for criterion's `iter_custom`.
pub fn total(ctx: &Context, iters: u64, mut op: impl FnMut() -> Result<()>) -> Result<Duration> {
    let timer = OpTimer::new(ctx)?;
    let mut ms = 0.0;
    for _ in 0..iters {
        ms += timer.time(&mut op)?;
    }
    Ok(Duration::from_secs_f64(ms / 1e3))
}

/// GB/s for `bytes` moved in `ms` milliseconds.
pub fn gb_per_s(bytes: usize, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e6)
}
