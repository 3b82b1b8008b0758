//! Device times of launches and copies from CUPTI's activity records, where libcupti loads (it
//! is found like libcuda, by name on the library path; `FERROCUDA_PROFILER=events` keeps the
//! profiler on CUDA events).
//!
//! The driver writes a kernel's or copy's start and end into a record without anything queued
//! on the stream, so the launching thread only brackets each operation with an external
//! correlation id (a push and a pop on a thread-local stack of libcupti); the records arrive in
//! buffers that CUPTI hands back on its own thread, where they are reduced to times by
//! correlation id until the profiler's report takes them.
use super::error::{Error, Result};
use cudarc::cupti::result::{activity, CuptiError};
use cudarc::cupti::sys::{self, CUpti_ActivityKind as Kind, CUpti_ExternalCorrelationKind};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Set to `events` to time with CUDA events even where libcupti loads.
pub const PROFILER_VAR: &str = "FERROCUDA_PROFILER";

const BUFFER_BYTES: usize = 4 << 20;
const BUFFER_ALIGN: usize = 8;
const EXTERNAL: CUpti_ExternalCorrelationKind =
    CUpti_ExternalCorrelationKind::CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
/// The activity kinds the profiler needs: launches, copies, and our ids for both (CUPTI writes an
/// external correlation record only beside a driver API record, hence the driver API kind).
const KINDS: [Kind; 4] = [
    Kind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    Kind::CUPTI_ACTIVITY_KIND_MEMCPY,
    Kind::CUPTI_ACTIVITY_KIND_DRIVER,
    Kind::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
];
/// Driver calls every launch makes besides the launch (binding the context): no records for them.
const QUIET: [sys::CUpti_driver_api_trace_cbid_enum; 2] = [
    sys::CUpti_driver_api_trace_cbid_enum::CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent,
    sys::CUpti_driver_api_trace_cbid_enum::CUPTI_DRIVER_TRACE_CBID_cuCtxSetCurrent,
];

/// Start and end of one operation on the device, ns on CUPTI's clock ([`timestamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
}

/// What the completed buffers held, by CUPTI's correlation id and by ours.
#[derive(Default)]
struct Collected {
    spans: HashMap<u32, Span>,
    correlation: HashMap<u64, u32>,
}

fn collected() -> std::sync::MutexGuard<'static, Collected> {
    static COLLECTED: OnceLock<Mutex<Collected>> = OnceLock::new();
    COLLECTED.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

fn layout() -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).expect("a valid layout")
}

unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    // SAFETY: CUPTI passes writable out-pointers; the buffer is freed in `buffer_completed`.
    unsafe {
        *buffer = std::alloc::alloc(layout());
        *size = if (*buffer).is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

unsafe extern "C" fn buffer_completed(
    _ctx: cudarc::driver::sys::CUcontext,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    let mut found = Collected::default();
    let mut record: *mut sys::CUpti_Activity = std::ptr::null_mut();
    // SAFETY: `buffer` is one of ours with `valid` bytes of records; CUPTI walks them.
    while unsafe { activity::get_next_record(buffer, valid, &mut record) }.is_ok() {
        // SAFETY: every record starts with its kind (read as a plain u32: CUPTI may know kinds
        // this build does not), and its layout is the one of that kind, whose leading fields
        // read here are the same in every record version CUPTI 12 and 13 write.
        unsafe { read_record(record.cast::<u8>(), &mut found) };
    }
    // SAFETY: allocated by `buffer_requested` with this layout; CUPTI is done with it.
    unsafe { std::alloc::dealloc(buffer, layout()) };
    let mut all = collected();
    for (id, span) in found.spans {
        all.spans.entry(id).and_modify(|s| *s = merge(*s, span)).or_insert(span);
    }
    all.correlation.extend(found.correlation);
}

/// A pageable copy may come in several records of one correlation id: their hull.
fn merge(a: Span, b: Span) -> Span {
    Span { start: a.start.min(b.start), end: a.end.max(b.end) }
}

/// # Safety
/// `record` points at a complete activity record.
unsafe fn read_record(record: *const u8, found: &mut Collected) {
    use std::ptr::addr_of;
    // SAFETY: the caller's contract. Each cast matches the kind just read, and only fields that
    // sit at the same offsets in every version of the record CUPTI 12 and 13 write are read
    // (through raw field addresses: the records are packed, and an older, shorter version may
    // end where this build's struct goes on).
    unsafe {
        let kind = record.cast::<u32>().read_unaligned();
        if kind == Kind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32
            || kind == Kind::CUPTI_ACTIVITY_KIND_KERNEL as u32
        {
            let k = record.cast::<sys::CUpti_ActivityKernel10>();
            let span = Span {
                start: addr_of!((*k).start).read_unaligned(),
                end: addr_of!((*k).end).read_unaligned(),
            };
            found.spans.insert(addr_of!((*k).correlationId).read_unaligned(), span);
        } else if kind == Kind::CUPTI_ACTIVITY_KIND_MEMCPY as u32 {
            let m = record.cast::<sys::CUpti_ActivityMemcpy6>();
            let span = Span {
                start: addr_of!((*m).start).read_unaligned(),
                end: addr_of!((*m).end).read_unaligned(),
            };
            let id = addr_of!((*m).correlationId).read_unaligned();
            found.spans.entry(id).and_modify(|s| *s = merge(*s, span)).or_insert(span);
        } else if kind == Kind::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION as u32 {
            let e = record.cast::<sys::CUpti_ActivityExternalCorrelation>();
            if addr_of!((*e).externalKind).cast::<u32>().read_unaligned() == EXTERNAL as u32 {
                let id = addr_of!((*e).correlationId).read_unaligned();
                found.correlation.insert(addr_of!((*e).externalId).read_unaligned(), id);
            }
        }
    }
}

fn error(call: &'static str, e: CuptiError) -> Error {
    Error::Profiler { call, reason: format!("{e:?}") }
}

/// Whether the profiler times with CUPTI: libcupti loads and `FERROCUDA_PROFILER` is not
/// `events`. Decided once per process; loading the library attaches nothing.
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if std::env::var(PROFILER_VAR).is_ok_and(|v| v == "events") {
            return false;
        }
        // SAFETY: only probes whether the library loads.
        unsafe { sys::is_culib_present() }
    })
}

/// Profilers recording now, and whether CUPTI is attached to the process (its buffer callbacks
/// registered): attached, it hooks every launch even with no activity kind enabled, so it is
/// detached once no profiler needs it.
struct Attachment {
    recording: usize,
    attached: bool,
}

fn attachment() -> std::sync::MutexGuard<'static, Attachment> {
    static ATTACHMENT: Mutex<Attachment> = Mutex::new(Attachment { recording: 0, attached: false });
    ATTACHMENT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Start (or stop) one profiler's recording of launches and copies (the kinds are
/// process-wide: on while any profiler records).
pub(crate) fn enable(on: bool) -> Result<()> {
    let mut at = attachment();
    if on {
        if !at.attached {
            activity::register_callbacks(Some(buffer_requested), Some(buffer_completed))
                .map_err(|e| error("cuptiActivityRegisterCallbacks", e))?;
            at.attached = true;
        }
        for kind in KINDS {
            activity::enable(kind).map_err(|e| error("cuptiActivityEnable", e))?;
        }
        for cbid in QUIET {
            // An older CUPTI without per-call filtering records them too: only slower.
            let _ = activity::enable_driver_api(cbid as u32, 0);
        }
        at.recording += 1;
        return Ok(());
    }
    at.recording = at.recording.saturating_sub(1);
    if at.recording == 0 {
        for kind in KINDS {
            activity::disable(kind).map_err(|e| error("cuptiActivityDisable", e))?;
        }
    }
    Ok(())
}

/// Detach CUPTI from the process when no profiler records (after the records wanted were
/// flushed): launches cost what they cost without it again.
pub(crate) fn detach() -> Result<()> {
    let mut at = attachment();
    if at.attached && at.recording == 0 {
        flush()?;
        cudarc::cupti::result::finalize().map_err(|e| error("cuptiFinalize", e))?;
        at.attached = false;
    }
    Ok(())
}

/// Now on the clock of the records' times, ns.
pub(crate) fn timestamp() -> Result<u64> {
    let mut t = 0u64;
    // SAFETY: `t` is writable.
    unsafe { sys::cuptiGetTimestamp(&mut t) }.result().map_err(|e| error("cuptiGetTimestamp", e))?;
    Ok(t)
}

/// Tag the driver calls this thread makes until [`untag`] with `id`.
pub(crate) fn tag(id: u64) -> Result<()> {
    activity::push_external_correlation_id(EXTERNAL, id)
        .map_err(|e| error("cuptiActivityPushExternalCorrelationId", e))
}

pub(crate) fn untag() -> Result<()> {
    let mut last = 0u64;
    // SAFETY: `last` is writable.
    unsafe { activity::pop_external_correlation_id(EXTERNAL, &mut last) }
        .map_err(|e| error("cuptiActivityPopExternalCorrelationId", e))
}

/// Hand every record CUPTI holds to the buffer callback (after a device synchronisation, all of
/// the work queued so far).
pub(crate) fn flush() -> Result<()> {
    activity::flush_all(sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED as u32)
        .map_err(|e| error("cuptiActivityFlushAll", e))
}

/// The span of the operation tagged `id`, once its records have arrived (taken out).
pub(crate) fn take(id: u64) -> Option<Span> {
    let mut all = collected();
    let correlation = *all.correlation.get(&id)?;
    let span = all.spans.remove(&correlation)?;
    all.correlation.remove(&id);
    Some(span)
}

/// Forget what arrived (a reset of the profile).
pub(crate) fn clear() {
    *collected() = Collected::default();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zeroed record of type `T` (all of CUPTI's record structs are plain data).
    fn record<T>() -> T {
        // SAFETY: the activity records are integers, enums whose 0 is a variant, and raw pointers.
        unsafe { std::mem::zeroed() }
    }

    fn read<T>(r: &T, found: &mut Collected) {
        // SAFETY: `r` is a complete record of the kind it says.
        unsafe { read_record((r as *const T).cast(), found) }
    }

    #[test]
    fn records_become_spans_by_correlation_id() {
        let mut found = Collected::default();
        let mut k: sys::CUpti_ActivityKernel10 = record();
        k.kind = Kind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        (k.start, k.end, k.correlationId) = (1_000, 3_500, 7);
        read(&k, &mut found);
        // A pageable copy in two pieces under one correlation id: their hull.
        let mut m: sys::CUpti_ActivityMemcpy6 = record();
        m.kind = Kind::CUPTI_ACTIVITY_KIND_MEMCPY;
        (m.start, m.end, m.correlationId) = (5_000, 6_000, 8);
        read(&m, &mut found);
        (m.start, m.end) = (6_100, 7_000);
        read(&m, &mut found);
        let mut e: sys::CUpti_ActivityExternalCorrelation = record();
        e.kind = Kind::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        (e.externalKind, e.externalId, e.correlationId) = (EXTERNAL, 42, 8);
        read(&e, &mut found);
        // Another tool's external ids are not ours.
        e.externalKind = CUpti_ExternalCorrelationKind::CUPTI_EXTERNAL_CORRELATION_KIND_OPENACC;
        e.externalId = 43;
        read(&e, &mut found);
        assert_eq!(found.spans[&7], Span { start: 1_000, end: 3_500 });
        assert_eq!(found.spans[&8], Span { start: 5_000, end: 7_000 });
        assert_eq!(found.correlation.get(&42), Some(&8));
        assert!(!found.correlation.contains_key(&43));
    }
}
