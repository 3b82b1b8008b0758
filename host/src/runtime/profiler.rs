//! The profiler: launches, copies and pool activity on one device, timed by CUPTI's activity
//! records where libcupti loads (see `cupti.rs`), else by CUDA events.
//!
//! Off (the default) it costs one relaxed atomic load per launch or copy. On, with CUPTI, each
//! launch and copy leaves a record holding CUPTI's correlation id of its driver call (handed over
//! by a CUPTI callback as the call enters the driver); the device times arrive in CUPTI's buffers
//! and are matched by that id at the report (CUPTI is attached while a profiler records, and detached at the first report or reset
//! after profiling stops, since attached it slows every launch). With events, each takes two events from the device's free list (a new one when the
//! list is empty), records one before and one after itself on its own stream, and leaves a
//! record; that is all the launching thread does. A harvester thread (one per device, running
//! while profiling is on or records are pending) times the oldest records whose end event has
//! completed, every millisecond, and gives their events back to the free list, so that the
//! events in use stay about as many as the operations in flight and no timing call lands on the
//! launch path. A report (after a device synchronisation) times whatever is left. Every start is
//! measured from the moment profiling was switched on (CUPTI's timestamp then, or a base event
//! recorded and waited for), so all records sit on the device's one timeline.
//!
//! The state belongs to the device: every context on it (clones, `new_stream` contexts) feeds the
//! same profile, one trace thread per stream, as the pool's counters are the device's too.
use super::context::{Backend, Context};
use super::cupti;
use super::device::{elapsed_fn, CudaDevice};
use super::error::{DriverResultExt, Error, Result};
use super::pool::PoolStats;
use super::stream::Stream;
use cudarc::driver::{result, sys};
use std::collections::{HashMap, VecDeque};
use std::fmt::{self, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often the harvester looks for completed records.
const HARVEST_PERIOD: Duration = Duration::from_millis(1);
/// The most records the harvester takes out of the queue at once.
const HARVEST_BATCH: usize = 4096;

/// Which way a copy went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CopyDirection {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

impl CopyDirection {
    /// `HtoD`, `DtoH` or `DtoD`.
    pub fn label(self) -> &'static str {
        match self {
            CopyDirection::HostToDevice => "HtoD",
            CopyDirection::DeviceToHost => "DtoH",
            CopyDirection::DeviceToDevice => "DtoD",
        }
    }
}

/// What a profiled operation was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfiledKind {
    Kernel {
        /// The kernel's name in `gpu-kernels/src/kernels.rs`, e.g. `add_f32`.
        name: &'static str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
    },
    Copy {
        direction: CopyDirection,
        /// Whether the host side was page-locked memory ([`crate::PinnedBuffer`]).
        pinned: bool,
        bytes: usize,
    },
    /// A replay of a captured [`crate::Graph`] of `nodes` kernels and copies: from its first
    /// node's start to its last node's end.
    GraphReplay { nodes: usize },
}

impl ProfiledKind {
    /// The kernel's name, or `copy HtoD` / `copy DtoH pinned` / ...
    pub fn name(&self) -> String {
        match self {
            ProfiledKind::Kernel { name, .. } => (*name).to_string(),
            ProfiledKind::Copy { direction, pinned, .. } => copy_label(*direction, *pinned),
            ProfiledKind::GraphReplay { .. } => GRAPH_REPLAY.to_string(),
        }
    }
}

/// The name of graph replays in the report's rows and the trace.
const GRAPH_REPLAY: &str = "graph replay";

fn copy_label(direction: CopyDirection, pinned: bool) -> String {
    format!("copy {}{}", direction.label(), if pinned { " pinned" } else { "" })
}

/// One profiled launch or copy, on the device's timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfiledOp {
    pub kind: ProfiledKind,
    /// The stream it ran on (the id `Context`'s `Debug` output shows).
    pub stream: usize,
    /// When the device reached it: µs after profiling was switched on (or reset).
    pub start_us: f64,
    /// Device time between the events recorded before and after it, µs.
    pub dur_us: f64,
    /// When the host queued it: µs after profiling was switched on (or reset).
    pub host_us: f64,
}

/// A CUDA event handle owned by the profiler.
#[derive(Clone, Copy)]
struct RawEvent(sys::CUevent);
// SAFETY: events may be recorded, queried and destroyed from any thread.
unsafe impl Send for RawEvent {}

/// How a record's device times are found.
#[derive(Clone, Copy)]
enum Timing {
    /// Two events recorded around the operation on its stream.
    Events { start: RawEvent, end: RawEvent },
    /// CUPTI's records of the driver call with this correlation id (0 until the call is made).
    Cupti { id: u32 },
}

/// A record whose times have not been read yet.
struct Pending {
    kind: ProfiledKind,
    stream: usize,
    host_us: f64,
    timing: Timing,
}

impl Timing {
    fn events(self) -> Option<[RawEvent; 2]> {
        match self {
            Timing::Events { start, end } => Some([start, end]),
            Timing::Cupti { .. } => None,
        }
    }
}

impl Pending {
    fn events(&self) -> Option<[RawEvent; 2]> {
        self.timing.events()
    }
}

/// The device clock records are measured on, from the moment profiling was switched on.
#[derive(Clone, Copy)]
enum Clock {
    /// Recorded and completed before any record of the window was queued.
    Event(RawEvent),
    /// CUPTI's timestamp then, ns.
    Cupti(u64),
}

/// What profiling measures from: set when it is switched on (or reset while on).
struct Window {
    clock: Clock,
    host_base: Instant,
    pool_at_start: PoolStats,
}

#[derive(Default)]
struct State {
    window: Option<Window>,
    /// Events ready for reuse (all of this device's context, none in a pending record).
    free: Vec<RawEvent>,
    /// In the order their records were queued.
    pending: VecDeque<Pending>,
    done: Vec<ProfiledOp>,
    /// Whether the harvester thread runs.
    harvesting: bool,
    /// Records CUPTI had no times for at a report.
    untimed: usize,
}

/// One device's profiler (see the module's documentation).
pub(crate) struct Profiler {
    on: AtomicBool,
    state: Mutex<State>,
    /// Held by whoever times pending records outside `state`'s lock (the harvester), and by
    /// `report` and `reset`, so that no record is in neither queue while they look.
    timing: Mutex<()>,
}

/// What one operation in flight is timed by.
pub(crate) struct Span {
    timing: Timing,
    host_us: f64,
}

impl Profiler {
    pub(crate) fn new() -> Self {
        Self { on: AtomicBool::new(false), state: Mutex::new(State::default()), timing: Mutex::new(()) }
    }

    /// The whole cost of the profiler while it is off.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_timing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.timing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `queue` on `stream` between two events (or tagged for CUPTI) and keep its record
    /// (`kind` is only built when it was queued). The device's context is current (every caller
    /// binds first).
    #[inline(never)]
    pub(crate) fn around(
        &self,
        stream: &Stream,
        kind: impl FnOnce() -> ProfiledKind,
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let Some((span, _order)) = self.begin(stream)? else { return queue() };
        let queued = queue();
        let ended = self.end(span, stream, queued.is_ok().then(kind));
        queued.and(ended)
    }

    /// Open the span; with events, also the stream's order guard, held until the end event is
    /// recorded, so that two threads queueing on one stream cannot land between each other's
    /// events (CUPTI's records need no such order: each carries its own call's id).
    fn begin<'s>(&self, stream: &'s Stream) -> Result<Option<(Span, Option<MutexGuard<'s, ()>>)>> {
        let (clock, first, second, host_us) = {
            let mut st = self.lock();
            let Some((clock, host_base)) = st.window.as_ref().map(|w| (w.clock, w.host_base)) else {
                // Reset and switched off since the caller looked.
                return Ok(None);
            };
            let host_us = host_base.elapsed().as_secs_f64() * 1e6;
            if let Clock::Cupti(_) = clock {
                drop(st);
                cupti::forget_last_call();
                return Ok(Some((Span { timing: Timing::Cupti { id: 0 }, host_us }, None)));
            }
            (clock, st.free.pop(), st.free.pop(), host_us)
        };
        let order = stream.profiled_order();
        debug_assert!(matches!(clock, Clock::Event(_)));
        let (start, end) = match (first, second) {
            (Some(start), Some(end)) => (start, end),
            (taken, _) => {
                let made = new_event().and_then(|a| match taken {
                    Some(b) => Ok((a, b)),
                    None => new_event().map(|b| (a, b)),
                });
                match made {
                    Ok(pair) => pair,
                    Err(e) => {
                        self.lock().free.extend(taken);
                        return Err(e);
                    }
                }
            }
        };
        // SAFETY: `start` is a live event of this device's context; the stream is live.
        if let Err(e) = unsafe { result::event::record(start.0, stream.raw()) }.call("cuEventRecord") {
            self.lock().free.extend([start, end]);
            return Err(e);
        }
        Ok(Some((Span { timing: Timing::Events { start, end }, host_us }, Some(order))))
    }

    /// Close the span (record its end event, or take the call's correlation id) and keep the record; without a kind (the
    /// operation was not queued) only give the events back.
    fn end(&self, span: Span, stream: &Stream, kind: Option<ProfiledKind>) -> Result<()> {
        let mut timing = span.timing;
        let closed = match &mut timing {
            // A call that failed before the driver saw it leaves id 0: no record to wait for.
            Timing::Cupti { id } => {
                *id = cupti::last_call().unwrap_or(0);
                Ok(())
            }
            // SAFETY: as in `begin`.
            Timing::Events { end, .. } if kind.is_some() => {
                unsafe { result::event::record(end.0, stream.raw()) }.call("cuEventRecord")
            }
            Timing::Events { .. } => Ok(()),
        };
        let mut st = self.lock();
        match (closed, kind) {
            // Queued, and the window (reset and switched off meanwhile) still there.
            (Ok(()), Some(kind)) if st.window.is_some() => {
                let record = Pending { kind, stream: stream.id(), host_us: span.host_us, timing };
                st.pending.push_back(record);
                Ok(())
            }
            (closed, _) => {
                st.free.extend(timing.events().into_iter().flatten());
                closed
            }
        }
    }

    /// Switch on or off; the first switch on (or the first after a reset) opens the window and,
    /// for event timing where it is not running, starts the harvester. CUPTI records only while
    /// on.
    pub(crate) fn set(&self, on: bool, stream: &Stream) -> Result<()> {
        let mut st = self.lock();
        if !on {
            if self.is_on() && matches!(st.window.as_ref().map(|w| w.clock), Some(Clock::Cupti(_))) {
                cupti::enable(false)?;
            }
            self.on.store(false, Ordering::Relaxed);
            return Ok(());
        }
        if st.window.is_none() {
            st.window = Some(open_window(&mut st, stream)?);
        }
        match st.window.as_ref().map(|w| w.clock) {
            Some(Clock::Cupti(_)) if !self.is_on() => cupti::enable(true)?,
            Some(Clock::Event(_)) if !st.harvesting => {
                let device = stream.device.clone();
                // Without the thread the records are timed by the report.
                st.harvesting = std::thread::Builder::new()
                    .name("ferrocuda-profiler".into())
                    .spawn(move || harvester(device))
                    .is_ok();
            }
            _ => {}
        }
        // Under the lock, so that a harvester about to stop for want of work sees it.
        self.on.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Forget every record; while on, a new window starts now.
    pub(crate) fn reset(&self, stream: &Stream) -> Result<()> {
        let _timing = self.lock_timing();
        let mut st = self.lock();
        // Events still in flight may be recorded again: a record overwrites the event's state.
        let events: Vec<RawEvent> = st.pending.drain(..).filter_map(|p| p.events()).flatten().collect();
        st.free.extend(events);
        st.done.clear();
        st.untimed = 0;
        if !self.is_on() {
            cupti::detach()?;
        }
        cupti::clear();
        if let Some(Clock::Event(base)) = st.window.take().map(|w| w.clock) {
            st.free.push(base);
        }
        if self.is_on() {
            st.window = Some(open_window(&mut st, stream)?);
        }
        Ok(())
    }

    /// Every record so far, timed (waits for the device), and the pool's activity.
    pub(crate) fn report(&self, device: &CudaDevice) -> Result<ProfileReport> {
        let _timing = self.lock_timing();
        let mut st = self.lock();
        let label = format!("cuda:{} {}", device.info.ordinal, device.info);
        let Some(window) = &st.window else {
            let note = "profiling was not switched on since the device was opened or the last reset";
            return Ok(ProfileReport::empty(label, device.info.ordinal, note));
        };
        let (clock, host_base, pool_at_start) = (window.clock, window.host_base, window.pool_at_start);
        // Every pending record's end event was recorded (or its launch made) before it was
        // pushed (under this lock).
        result::ctx::synchronize().call("cuCtxSynchronize")?;
        if let Clock::Cupti(_) = clock {
            cupti::flush()?;
        }
        let timed = st.pending.iter().map(|p| resolve(clock, p)).collect::<Result<Vec<_>>>()?;
        st.untimed += timed.iter().filter(|op| op.is_none()).count();
        let resolved: Vec<ProfiledOp> = timed.into_iter().flatten().collect();
        let events: Vec<RawEvent> = st.pending.drain(..).filter_map(|p| p.events()).flatten().collect();
        st.free.extend(events);
        st.done.extend(resolved);
        let (now, peak) = device.pool.window_stats();
        let pool = PoolSummary {
            allocations: now.allocations - pool_at_start.allocations,
            cache_hits: now.cache_hits - pool_at_start.cache_hits,
            cache_misses: now.cache_misses - pool_at_start.cache_misses,
            peak_bytes_in_use: peak,
            bytes_in_use_at_start: pool_at_start.bytes_in_use,
            bytes_in_use: now.bytes_in_use,
        };
        let wall_ms = host_base.elapsed().as_secs_f64() * 1e3;
        if !self.is_on() {
            cupti::detach()?;
        }
        let mut report = ProfileReport::new(label, device.info.ordinal, st.done.clone(), Some(pool), wall_ms);
        report.timing = match clock {
            Clock::Cupti(_) => "CUPTI activity records",
            Clock::Event(_) => "CUDA events",
        };
        report.left_out = st.untimed;
        Ok(report)
    }

    /// Time the oldest records whose end event has completed (outside the state's lock, so that
    /// launches go on meanwhile) and give their events back. Whether there may be more to do:
    /// false once the window is gone or on CUPTI's clock, or profiling is off and nothing is
    /// pending.
    fn harvest(&self) -> bool {
        let _timing = self.lock_timing();
        let (clock, mut batch) = {
            let mut st = self.lock();
            let clock = match st.window.as_ref().map(|w| w.clock) {
                Some(clock @ Clock::Event(_)) if !st.pending.is_empty() || self.is_on() => clock,
                _ => {
                    st.harvesting = false;
                    return false;
                }
            };
            let n = st.pending.len().min(HARVEST_BATCH);
            (clock, st.pending.drain(..n).collect::<Vec<_>>())
        };
        let mut timed = Vec::new();
        for p in &batch {
            let Some([_, end]) = p.events() else { break };
            // SAFETY: `end` is a live event of this device's context.
            if unsafe { result::event::query(end.0) }.is_err() {
                break;
            }
            // A record that cannot be timed stays pending, for the report to say why.
            let Ok(Some(op)) = resolve(clock, p) else { break };
            timed.push(op);
        }
        let rest = batch.split_off(timed.len());
        let mut st = self.lock();
        for p in rest.into_iter().rev() {
            st.pending.push_front(p);
        }
        st.free.extend(batch.iter().filter_map(Pending::events).flatten());
        st.done.extend(timed);
        true
    }
}

/// The harvester thread of `device`'s profiler (see the module's documentation).
fn harvester(device: Arc<CudaDevice>) {
    // Event queries and timings name their events' context; binding it keeps any driver that
    // looks at the current one content.
    let _ = device.bind();
    while device.profiler.harvest() {
        std::thread::sleep(HARVEST_PERIOD);
    }
}

fn new_event() -> Result<RawEvent> {
    Ok(RawEvent(result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).call("cuEventCreate")?))
}

/// The record's times on `clock`; `None` where CUPTI delivered no record of it.
fn resolve(clock: Clock, p: &Pending) -> Result<Option<ProfiledOp>> {
    let (start_us, dur_us) = match (clock, p.timing) {
        (Clock::Event(base), Timing::Events { start, end }) => {
            let elapsed = elapsed_fn()?;
            let ms = |from: RawEvent, to: RawEvent| -> Result<f64> {
                let mut ms = 0.0f32;
                // SAFETY: `elapsed` is the driver's cuEventElapsedTime(_v2); both events are live,
                // of this device, recorded and complete (the callers synchronised or queried);
                // `ms` is writable.
                unsafe { elapsed(&mut ms, from.0, to.0) }.result().call("cuEventElapsedTime")?;
                Ok(ms as f64)
            };
            // The base completed before the start was queued; the clamp absorbs timer
            // granularity.
            ((ms(base, start)? * 1e3).max(0.0), ms(start, end)? * 1e3)
        }
        (Clock::Cupti(base), Timing::Cupti { id }) => match cupti::take(id) {
            Some(span) => (
                span.start.saturating_sub(base) as f64 / 1e3,
                span.end.saturating_sub(span.start) as f64 / 1e3,
            ),
            None => return Ok(None),
        },
        // A window holds records of its own clock only (a reset empties the queue).
        _ => return Ok(None),
    };
    Ok(Some(ProfiledOp { kind: p.kind.clone(), stream: p.stream, start_us, dur_us, host_us: p.host_us }))
}

/// Start the window's clock: CUPTI's timestamp where the profiler times with CUPTI, else a base
/// event recorded on `stream` and waited for, so that every later record starts after it on any
/// stream; snapshot the pool.
fn open_window(st: &mut State, stream: &Stream) -> Result<Window> {
    let clock = if cupti::available() {
        Clock::Cupti(cupti::timestamp()?)
    } else {
        let base = match st.free.pop() {
            Some(e) => e,
            None => new_event()?,
        };
        // SAFETY: `base` is a live event of this device's context; the stream is live.
        let recorded = unsafe { result::event::record(base.0, stream.raw()) }
            .call("cuEventRecord")
            // SAFETY: as above, and recorded.
            .and_then(|()| unsafe { result::event::synchronize(base.0) }.call("cuEventSynchronize"));
        if let Err(e) = recorded {
            st.free.push(base);
            return Err(e);
        }
        Clock::Event(base)
    };
    let pool_at_start = stream.device.pool.start_window();
    Ok(Window { clock, host_base: Instant::now(), pool_at_start })
}

/// One kernel's row of a [`ProfileReport`].
#[derive(Debug, Clone, PartialEq)]
pub struct KernelStats {
    pub name: &'static str,
    pub calls: usize,
    pub total_ms: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// Fraction of all profiled kernel time.
    pub share: f64,
}

/// The copies of one direction (and host memory kind) of a [`ProfileReport`].
#[derive(Debug, Clone, PartialEq)]
pub struct CopyStats {
    pub direction: CopyDirection,
    pub pinned: bool,
    pub count: usize,
    pub bytes: usize,
    pub total_ms: f64,
}

impl CopyStats {
    /// Bytes per second over the copies' device time, in GB/s (10^9).
    pub fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / (self.total_ms * 1e6)
    }
}

/// The pool's activity while profiling was on (since it was switched on or reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSummary {
    /// Buffers handed out.
    pub allocations: u64,
    /// Of those, served from the cache.
    pub cache_hits: u64,
    /// Of those, allocated from the driver.
    pub cache_misses: u64,
    /// The most bytes in use at once (size-class bytes).
    pub peak_bytes_in_use: usize,
    pub bytes_in_use_at_start: usize,
    /// At the time of the report.
    pub bytes_in_use: usize,
}

/// What [`Context::profile_report`] returns: every profiled launch and copy, per-kernel and
/// per-direction summaries, the pool's activity. `Display` prints the tables.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileReport {
    device: String,
    ordinal: usize,
    note: Option<String>,
    ops: Vec<ProfiledOp>,
    kernels: Vec<KernelStats>,
    copies: Vec<CopyStats>,
    pool: Option<PoolSummary>,
    wall_ms: f64,
    /// What the device times came from.
    timing: &'static str,
    /// Operations profiled but without device times (CUPTI delivered no record of them).
    left_out: usize,
}

impl ProfileReport {
    fn empty(device: String, ordinal: usize, note: &str) -> Self {
        let mut report = Self::new(device, ordinal, Vec::new(), None, 0.0);
        report.note = Some(note.to_string());
        report
    }

    fn new(
        device: String,
        ordinal: usize,
        ops: Vec<ProfiledOp>,
        pool: Option<PoolSummary>,
        wall_ms: f64,
    ) -> Self {
        let mut by_kernel: HashMap<&'static str, Vec<f64>> = HashMap::new();
        let mut by_copy: HashMap<(CopyDirection, bool), CopyStats> = HashMap::new();
        for op in &ops {
            match op.kind {
                ProfiledKind::Kernel { name, .. } => by_kernel.entry(name).or_default().push(op.dur_us),
                ProfiledKind::GraphReplay { .. } => {
                    by_kernel.entry(GRAPH_REPLAY).or_default().push(op.dur_us)
                }
                ProfiledKind::Copy { direction, pinned, bytes } => {
                    let row = by_copy.entry((direction, pinned)).or_insert(CopyStats {
                        direction,
                        pinned,
                        count: 0,
                        bytes: 0,
                        total_ms: 0.0,
                    });
                    row.count += 1;
                    row.bytes += bytes;
                    row.total_ms += op.dur_us / 1e3;
                }
            }
        }
        let all_us: f64 = by_kernel.values().flatten().sum();
        let mut kernels: Vec<KernelStats> = by_kernel
            .into_iter()
            .map(|(name, mut us)| {
                us.sort_by(f64::total_cmp);
                let total_us: f64 = us.iter().sum();
                KernelStats {
                    name,
                    calls: us.len(),
                    total_ms: total_us / 1e3,
                    mean_us: total_us / us.len() as f64,
                    p50_us: percentile(&us, 0.50),
                    p99_us: percentile(&us, 0.99),
                    min_us: us[0],
                    max_us: us[us.len() - 1],
                    share: if all_us > 0.0 { total_us / all_us } else { 0.0 },
                }
            })
            .collect();
        kernels.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then(a.name.cmp(b.name)));
        let mut copies: Vec<CopyStats> = by_copy.into_values().collect();
        copies.sort_by_key(|c| (c.direction, c.pinned));
        let mut ops = ops;
        ops.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        Self { device, ordinal, note: None, ops, kernels, copies, pool, wall_ms, timing: "", left_out: 0 }
    }

    /// One row per kernel, the most total time first.
    pub fn kernels(&self) -> &[KernelStats] {
        &self.kernels
    }

    /// One row per copy direction (pageable and pinned host memory apart).
    pub fn copies(&self) -> &[CopyStats] {
        &self.copies
    }

    /// The pool's activity while profiling was on (None on the CPU backend).
    pub fn pool(&self) -> Option<&PoolSummary> {
        self.pool.as_ref()
    }

    /// Every profiled launch and copy, by device start time.
    pub fn ops(&self) -> &[ProfiledOp] {
        &self.ops
    }

    /// Why the report is empty where it is by design (the CPU backend, never switched on).
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The device, as the context names it.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// What the device times came from: "CUPTI activity records" or "CUDA events" (empty when
    /// nothing was recorded).
    pub fn timing(&self) -> &str {
        self.timing
    }

    /// Operations that were profiled but have no device time (CUPTI delivered no record of
    /// them, e.g. when its buffers overflowed); they are not in the tables.
    pub fn left_out(&self) -> usize {
        self.left_out
    }

    /// Host milliseconds from switching profiling on (or the last reset) to this report.
    pub fn wall_ms(&self) -> f64 {
        self.wall_ms
    }

    /// Total device time of the profiled kernels, ms.
    pub fn kernel_ms(&self) -> f64 {
        // A fold from +0.0: an empty f64 sum is -0.0.
        self.kernels.iter().fold(0.0, |sum, k| sum + k.total_ms)
    }

    /// Every summary and record as JSON (one object: `device`, `note`, `timing`, `left_out`,
    /// `wall_ms`, `kernel_ms`, `kernels`, `copies`, `pool`, `ops`; times in ms for totals and µs
    /// per operation).
    pub fn to_json(&self) -> String {
        let mut s = String::from("{\"device\":");
        json_str(&mut s, &self.device);
        s.push_str(",\"note\":");
        match &self.note {
            Some(n) => json_str(&mut s, n),
            None => s.push_str("null"),
        }
        s.push_str(",\"timing\":");
        json_str(&mut s, self.timing);
        let _ = write!(
            s,
            ",\"left_out\":{},\"wall_ms\":{},\"kernel_ms\":{},\"kernels\":[",
            self.left_out,
            num(self.wall_ms),
            num(self.kernel_ms())
        );
        for (i, k) in self.kernels.iter().enumerate() {
            s.push_str(if i == 0 { "{\"name\":" } else { ",{\"name\":" });
            json_str(&mut s, k.name);
            let _ = write!(
                s,
                ",\"calls\":{},\"total_ms\":{},\"mean_us\":{},\"p50_us\":{},\"p99_us\":{},\"min_us\":{},\"max_us\":{},\"share\":{}}}",
                k.calls,
                num(k.total_ms),
                num(k.mean_us),
                num(k.p50_us),
                num(k.p99_us),
                num(k.min_us),
                num(k.max_us),
                num(k.share)
            );
        }
        s.push_str("],\"copies\":[");
        for (i, c) in self.copies.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"direction\":\"{}\",\"pinned\":{},\"count\":{},\"bytes\":{},\"total_ms\":{},\"gb_per_s\":{}}}",
                if i == 0 { "" } else { "," },
                c.direction.label(),
                c.pinned,
                c.count,
                c.bytes,
                num(c.total_ms),
                num(c.gb_per_s())
            );
        }
        s.push_str("],\"pool\":");
        match &self.pool {
            Some(p) => {
                let _ = write!(
                    s,
                    "{{\"allocations\":{},\"cache_hits\":{},\"cache_misses\":{},\"peak_bytes_in_use\":{},\"bytes_in_use_at_start\":{},\"bytes_in_use\":{}}}",
                    p.allocations, p.cache_hits, p.cache_misses, p.peak_bytes_in_use, p.bytes_in_use_at_start, p.bytes_in_use
                );
            }
            None => s.push_str("null"),
        }
        s.push_str(",\"ops\":[");
        for (i, op) in self.ops.iter().enumerate() {
            s.push_str(if i == 0 { "{" } else { ",{" });
            op_fields(&mut s, op);
            let _ = write!(
                s,
                ",\"stream\":{},\"start_us\":{},\"dur_us\":{},\"host_us\":{}}}",
                op.stream,
                num(op.start_us),
                num(op.dur_us),
                num(op.host_us)
            );
        }
        s.push_str("]}\n");
        s
    }

    /// [`ProfileReport::to_json`] into the file at `path`.
    pub fn write_json(&self, path: impl AsRef<Path>) -> Result<()> {
        write_file("write_json", path.as_ref(), &self.to_json())
    }

    /// The launches and copies as Chrome trace events (`{"traceEvents": [...]}`, complete events
    /// with `ts`/`dur` in µs on the device's timeline, `pid` the device ordinal, `tid` the
    /// stream), which `chrome://tracing` and Perfetto (ui.perfetto.dev) open.
    pub fn to_chrome_trace(&self) -> String {
        let mut s = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
        for (i, op) in self.ops.iter().enumerate() {
            s.push_str(if i == 0 { "\n{\"name\":" } else { ",\n{\"name\":" });
            json_str(&mut s, &op.kind.name());
            let cat = match op.kind {
                ProfiledKind::Kernel { .. } => "kernel",
                ProfiledKind::Copy { .. } => "copy",
                ProfiledKind::GraphReplay { .. } => "graph",
            };
            let _ = write!(
                s,
                ",\"cat\":\"{cat}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{},\"args\":{{",
                num(op.start_us),
                num(op.dur_us),
                self.ordinal,
                op.stream
            );
            op_fields(&mut s, op);
            let _ = write!(s, ",\"host_us\":{}}}}}", num(op.host_us));
        }
        s.push_str("\n]}\n");
        s
    }

    /// [`ProfileReport::to_chrome_trace`] into the file at `path`.
    pub fn write_chrome_trace(&self, path: impl AsRef<Path>) -> Result<()> {
        write_file("write_chrome_trace", path.as_ref(), &self.to_chrome_trace())
    }
}

/// Nearest-rank percentile of sorted, non-empty `v`.
fn percentile(v: &[f64], p: f64) -> f64 {
    let rank = (p * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// The operation's own fields as JSON members (no braces).
fn op_fields(s: &mut String, op: &ProfiledOp) {
    match &op.kind {
        ProfiledKind::Kernel { name, grid, block, shared_bytes } => {
            s.push_str("\"kind\":\"kernel\",\"name\":");
            json_str(s, name);
            let _ = write!(
                s,
                ",\"grid\":[{},{},{}],\"block\":[{},{},{}],\"shared\":{shared_bytes}",
                grid.0, grid.1, grid.2, block.0, block.1, block.2
            );
        }
        ProfiledKind::Copy { direction, pinned, bytes } => {
            let _ = write!(
                s,
                "\"kind\":\"copy\",\"direction\":\"{}\",\"pinned\":{pinned},\"bytes\":{bytes}",
                direction.label()
            );
        }
        ProfiledKind::GraphReplay { nodes } => {
            let _ = write!(s, "\"kind\":\"graph\",\"nodes\":{nodes}");
        }
    }
}

/// A JSON number; `null` for what JSON cannot hold.
fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "null".into()
    }
}

/// `text` as a JSON string literal.
fn json_str(s: &mut String, text: &str) {
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
}

fn write_file(op: &'static str, path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::Io { op, path: path.display().to_string(), source })
}

fn bytes_text(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

impl fmt::Display for ProfileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(note) = &self.note {
            return writeln!(f, "profile of {}: nothing recorded ({note})", self.device);
        }
        let launches: usize = self.kernels.iter().map(|k| k.calls).sum();
        writeln!(
            f,
            "profile of {}: {launches} launches, {:.3} ms of kernel time in {:.1} ms (timed by {})",
            self.device,
            self.kernel_ms(),
            self.wall_ms,
            self.timing
        )?;
        if self.left_out > 0 {
            writeln!(f, "{} operations left out: CUPTI delivered no record of them", self.left_out)?;
        }
        if !self.kernels.is_empty() {
            let w = self.kernels.iter().map(|k| k.name.len()).max().unwrap_or(0).max(6);
            writeln!(
                f,
                "{:<w$} {:>7} {:>10} {:>10} {:>10} {:>10} {:>7}",
                "kernel", "calls", "total ms", "mean µs", "p50 µs", "p99 µs", "share"
            )?;
            for k in &self.kernels {
                writeln!(
                    f,
                    "{:<w$} {:>7} {:>10.3} {:>10.2} {:>10.2} {:>10.2} {:>6.1}%",
                    k.name,
                    k.calls,
                    k.total_ms,
                    k.mean_us,
                    k.p50_us,
                    k.p99_us,
                    k.share * 100.0
                )?;
            }
        }
        if !self.copies.is_empty() {
            writeln!(f, "{:<16} {:>7} {:>12} {:>10} {:>8}", "copy", "count", "bytes", "ms", "GB/s")?;
            for c in &self.copies {
                writeln!(
                    f,
                    "{:<16} {:>7} {:>12} {:>10.3} {:>8.1}",
                    copy_label(c.direction, c.pinned),
                    c.count,
                    bytes_text(c.bytes),
                    c.total_ms,
                    c.gb_per_s()
                )?;
            }
        }
        if let Some(p) = &self.pool {
            writeln!(
                f,
                "pool: {} allocations, {} cache hits, {} from the driver; peak {} in use ({} at start, {} now)",
                p.allocations,
                p.cache_hits,
                p.cache_misses,
                bytes_text(p.peak_bytes_in_use),
                bytes_text(p.bytes_in_use_at_start),
                bytes_text(p.bytes_in_use)
            )?;
        }
        Ok(())
    }
}

/// Profiling stays on while this lives; dropping it restores the state before
/// ([`Context::profiler_guard`]).
#[must_use = "profiling stops when the guard is dropped"]
pub struct ProfileGuard {
    ctx: Context,
    was_on: bool,
}

impl Drop for ProfileGuard {
    fn drop(&mut self) {
        // Switching off cannot fail, nor can switching back on (the window is already open).
        let _ = self.ctx.profile(self.was_on);
    }
}

const CPU_NOTE: &str = "CPU backend: the profiler records CUDA launches and copies only";

impl Context {
    /// Switch the profiler of this context's device on or off. While on, every kernel launch and
    /// copy of every context on the device is timed with CUDA events (at most a few µs each);
    /// pool activity is counted from the first switch on (or [`Context::reset_profile`]), which
    /// also waits for the work queued on this context so far (the timeline's origin). Off costs
    /// one atomic load per launch. On the CPU backend it does nothing.
    pub fn profile(&self, on: bool) -> Result<()> {
        match &self.backend {
            Backend::Cuda(s) => {
                s.device.bind()?;
                s.device.profiler.set(on, s)
            }
            Backend::Cpu => Ok(()),
        }
    }

    /// Whether the profiler of this context's device is on.
    pub fn is_profiling(&self) -> bool {
        match &self.backend {
            Backend::Cuda(s) => s.device.profiler.is_on(),
            Backend::Cpu => false,
        }
    }

    /// Profiling on until the guard is dropped, then back to what it was.
    pub fn profiler_guard(&self) -> Result<ProfileGuard> {
        let was_on = self.is_profiling();
        self.profile(true)?;
        Ok(ProfileGuard { ctx: self.clone(), was_on })
    }

    /// Everything profiled on this context's device since profiling was first switched on (or
    /// reset): waits for the device, then times the records. On the CPU backend, an empty report
    /// with a note.
    pub fn profile_report(&self) -> Result<ProfileReport> {
        match &self.backend {
            Backend::Cuda(s) => {
                s.device.bind()?;
                s.device.profiler.report(&s.device)
            }
            Backend::Cpu => Ok(ProfileReport::empty(self.device().to_string(), 0, CPU_NOTE)),
        }
    }

    /// Forget every record and restart the pool counters; while on, the timeline restarts now.
    pub fn reset_profile(&self) -> Result<()> {
        match &self.backend {
            Backend::Cuda(s) => {
                s.device.bind()?;
                s.device.profiler.reset(s)
            }
            Backend::Cpu => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &'static str, start_us: f64, dur_us: f64) -> ProfiledOp {
        ProfiledOp {
            kind: ProfiledKind::Kernel { name, grid: (4, 1, 1), block: (256, 1, 1), shared_bytes: 0 },
            stream: 7,
            start_us,
            dur_us,
            host_us: 0.0,
        }
    }

    #[test]
    fn rows_summarise_the_records() {
        let mut ops: Vec<ProfiledOp> = (1..=100).map(|i| kernel("a\"b", i as f64 * 10.0, i as f64)).collect();
        ops.push(kernel("c", 0.5, 950.0));
        ops.push(ProfiledOp {
            kind: ProfiledKind::Copy { direction: CopyDirection::HostToDevice, pinned: false, bytes: 4000 },
            stream: 7,
            start_us: 2.0,
            dur_us: 2.0,
            host_us: 1.0,
        });
        let r = ProfileReport::new("dev".into(), 0, ops, None, 5.0);
        let [a, c] = r.kernels() else { panic!("{:?}", r.kernels()) };
        assert_eq!((a.name, a.calls, c.name, c.calls), ("a\"b", 100, "c", 1));
        assert_eq!((a.p50_us, a.p99_us, a.min_us, a.max_us), (50.0, 99.0, 1.0, 100.0));
        assert!((a.total_ms - 5.05).abs() < 1e-9 && (a.mean_us - 50.5).abs() < 1e-9);
        assert!((a.share + c.share - 1.0).abs() < 1e-12 && (c.share - 950.0 / 6000.0).abs() < 1e-12);
        assert_eq!(r.copies().len(), 1);
        assert!((r.copies()[0].gb_per_s() - 2.0).abs() < 1e-9);
        assert!(r.ops().windows(2).all(|w| w[0].start_us <= w[1].start_us));
        let shown = r.to_string();
        assert!(shown.contains("a\"b") && shown.contains("copy HtoD") && shown.contains("15.8%"), "{shown}");

        let json: serde_json::Value = serde_json::from_str(&r.to_json()).expect("JSON");
        assert_eq!(json["kernels"][0]["name"], "a\"b");
        assert_eq!(json["kernels"][0]["calls"], 100);
        assert_eq!(json["copies"][0]["bytes"], 4000);
        assert_eq!(json["ops"].as_array().map(Vec::len), Some(102));
        let trace: serde_json::Value = serde_json::from_str(&r.to_chrome_trace()).expect("trace JSON");
        let events = trace["traceEvents"].as_array().expect("events");
        assert_eq!(events.len(), 102);
        assert!(events.iter().all(|e| e["ph"] == "X" && e["dur"].as_f64() > Some(0.0)));
        assert_eq!(events[0]["name"], "c");
        assert_eq!(events[1]["cat"], "copy");
        assert_eq!(events[1]["args"]["bytes"], 4000);
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\nd\u{1}é");
        assert_eq!(s, r#""a\"b\\c\nd\u0001é""#);
        assert_eq!(num(f64::INFINITY), "null");
        assert_eq!(num(1.5), "1.500");
    }
}
