//! Device times of launches and copies from CUPTI's activity records, where libcupti loads (it
//! is found like libcuda, by name on the library path; `FERROCUDA_PROFILER=events` keeps the
//! profiler on CUDA events).
//!
//! The driver writes a kernel's or copy's start and end into a record without anything queued
//! on the stream. The records name the driver call that queued the operation by CUPTI's
//! correlation id, which a callback on the launch and copy calls hands to the launching thread as
//! the call enters the driver (a thread-local the profiler reads once the call returns): nothing
//! else runs on the launch path. The records arrive in buffers that CUPTI hands back on its own
//! thread, where they are reduced to times by correlation id until the profiler's report takes
//! them.
use super::error::{Error, Result};
use cudarc::cupti::result::{activity, CuptiError};
use cudarc::cupti::sys::{self, CUpti_ActivityKind as Kind, CUpti_driver_api_trace_cbid_enum as Call};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Set to `events` to time with CUDA events even where libcupti loads.
pub const PROFILER_VAR: &str = "FERROCUDA_PROFILER";

const BUFFER_BYTES: usize = 4 << 20;
const BUFFER_ALIGN: usize = 8;
/// The activity kinds the profiler needs: launches and copies.
const KINDS: [Kind; 2] = [Kind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, Kind::CUPTI_ACTIVITY_KIND_MEMCPY];
/// The driver calls the runtime queues profiled work with (`kernel.rs`, `stream.rs`, `graph.rs`):
/// the callback fires on these alone.
const QUEUEING_CALLS: [Call; 7] = [
    Call::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    Call::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    Call::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    Call::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
    Call::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
    Call::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,
    Call::CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2,
];

thread_local! {
    /// CUPTI's correlation id of the last queueing call this thread made (0: none since
    /// [`forget_last_call`]).
    static LAST_CALL: Cell<u32> = const { Cell::new(0) };
}

/// Start and end of one operation on the device, ns on CUPTI's clock ([`timestamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
}

/// What the completed buffers held, by CUPTI's correlation id.
#[derive(Default)]
struct Collected {
    spans: HashMap<u32, Span>,
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
}

unsafe extern "C" fn on_queueing_call(
    _userdata: *mut std::ffi::c_void,
    _domain: sys::CUpti_CallbackDomain,
    _cbid: sys::CUpti_CallbackId,
    data: *const std::ffi::c_void,
) {
    // SAFETY: for the driver API domain CUPTI passes a live `CUpti_CallbackData`.
    let data = unsafe { &*data.cast::<sys::CUpti_CallbackData>() };
    if data.callbackSite == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER {
        LAST_CALL.with(|c| c.set(data.correlationId));
    }
}

/// A pageable copy may come in several records of one correlation id, and a graph replay in one
/// record per node: their hull.
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
            let id = addr_of!((*k).correlationId).read_unaligned();
            found.spans.entry(id).and_modify(|s| *s = merge(*s, span)).or_insert(span);
        } else if kind == Kind::CUPTI_ACTIVITY_KIND_MEMCPY as u32 {
            let m = record.cast::<sys::CUpti_ActivityMemcpy6>();
            let span = Span {
                start: addr_of!((*m).start).read_unaligned(),
                end: addr_of!((*m).end).read_unaligned(),
            };
            let id = addr_of!((*m).correlationId).read_unaligned();
            found.spans.entry(id).and_modify(|s| *s = merge(*s, span)).or_insert(span);
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

/// CUPTI's handle of the queueing-call callback.
struct Subscriber(sys::CUpti_SubscriberHandle);
// SAFETY: the handle is an opaque token CUPTI accepts from any thread.
unsafe impl Send for Subscriber {}

/// Profilers recording now, and whether CUPTI is attached to the process (its buffer callbacks
/// registered, the callback subscribed): attached, it hooks every launch even with no activity
/// kind enabled, so it is detached once no profiler needs it.
struct Attachment {
    recording: usize,
    attached: Option<Subscriber>,
}

fn attachment() -> std::sync::MutexGuard<'static, Attachment> {
    static ATTACHMENT: Mutex<Attachment> = Mutex::new(Attachment { recording: 0, attached: None });
    ATTACHMENT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Register the buffer callbacks and subscribe the queueing-call callback (CUPTI takes one
/// subscriber a process: under another tool that holds it, this fails and the profiler says so).
fn attach() -> Result<Subscriber> {
    activity::register_callbacks(Some(buffer_requested), Some(buffer_completed))
        .map_err(|e| error("cuptiActivityRegisterCallbacks", e))?;
    let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: `handle` is writable; the callback is a plain function that lives forever.
    unsafe { sys::cuptiSubscribe(&mut handle, Some(on_queueing_call), std::ptr::null_mut()) }
        .result()
        .map_err(|e| error("cuptiSubscribe", e))?;
    let subscriber = Subscriber(handle);
    for call in QUEUEING_CALLS {
        // SAFETY: `handle` was just subscribed.
        unsafe {
            sys::cuptiEnableCallback(
                1,
                handle,
                sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
                call as u32,
            )
        }
        .result()
        .map_err(|e| error("cuptiEnableCallback", e))?;
    }
    Ok(subscriber)
}

/// Start (or stop) one profiler's recording of launches and copies (the kinds are
/// process-wide: on while any profiler records).
pub(crate) fn enable(on: bool) -> Result<()> {
    let mut at = attachment();
    if on {
        if at.attached.is_none() {
            at.attached = Some(attach()?);
        }
        for kind in KINDS {
            activity::enable(kind).map_err(|e| error("cuptiActivityEnable", e))?;
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
    if at.recording == 0 {
        if let Some(subscriber) = at.attached.take() {
            flush()?;
            // SAFETY: subscribed by `attach` and not unsubscribed since.
            unsafe { sys::cuptiUnsubscribe(subscriber.0) }
                .result()
                .map_err(|e| error("cuptiUnsubscribe", e))?;
            cudarc::cupti::result::finalize().map_err(|e| error("cuptiFinalize", e))?;
        }
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

/// Forget this thread's last queueing call, before it makes the one to be profiled.
pub(crate) fn forget_last_call() {
    LAST_CALL.with(|c| c.set(0));
}

/// CUPTI's correlation id of this thread's last queueing call since [`forget_last_call`].
pub(crate) fn last_call() -> Option<u32> {
    Some(LAST_CALL.with(Cell::get)).filter(|&id| id != 0)
}

/// Hand every record CUPTI holds to the buffer callback (after a device synchronisation, all of
/// the work queued so far).
pub(crate) fn flush() -> Result<()> {
    activity::flush_all(sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED as u32)
        .map_err(|e| error("cuptiActivityFlushAll", e))
}

/// The span of the operation queued by the driver call `id`, once its records have arrived
/// (taken out).
pub(crate) fn take(id: u32) -> Option<Span> {
    collected().spans.remove(&id)
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
        // A kind the profiler does not read leaves nothing.
        let mut other: sys::CUpti_ActivityKernel10 = record();
        other.kind = Kind::CUPTI_ACTIVITY_KIND_MEMSET;
        other.correlationId = 9;
        read(&other, &mut found);
        assert_eq!(found.spans[&7], Span { start: 1_000, end: 3_500 });
        assert_eq!(found.spans[&8], Span { start: 5_000, end: 7_000 });
        assert!(!found.spans.contains_key(&9));
    }
}
