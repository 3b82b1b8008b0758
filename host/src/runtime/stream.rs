//! Streams, events and pinned host buffers.
use super::capture::{stream_order_forced, Access, CaptureOrder, Footprint, NodeKind};
use super::device::{elapsed_fn, CudaDevice};
use super::error::{DriverResultExt, Error, Result};
use super::pool::GraphMemory;
use super::profiler::{CopyDirection, ProfiledKind};
use cudarc::driver::{result, sys};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What an op queued in a capture left as the stream's capture dependencies: its own node (the
/// driver's answer, read back rather than assumed), which later ops that must follow it follow.
pub(crate) struct CapturedOp {
    nodes: Vec<sys::CUgraphNode>,
    kind: NodeKind,
}

/// The stream-K flags each stream keeps zeroed for the `wgmma` GEMM (`Stream::stream_k_flags`):
/// one per region tile and consumer warpgroup of a launch's stream-K region.
pub(crate) const STREAM_K_FLAGS: usize = 1023;
/// Per-column-block counters of the one-launch column sums (`sum_leading`): a split grid is at
/// most this many column blocks wide (`ColumnPlan`).
pub(crate) const COLUMN_COUNTERS: usize = 1024;

/// A CUDA stream of one device. Work on one stream runs in order; different streams may overlap.
pub struct Stream {
    raw: sys::CUstream,
    pub(crate) device: Arc<CudaDevice>,
    /// Zeroed `u32`s that kernels count on and leave zero: the whole-tensor reductions' block
    /// counter, then `STREAM_K_FLAGS` flags of the `wgmma` GEMM's stream-K region, then
    /// `COLUMN_COUNTERS` counters of the column sums' column blocks. One set per
    /// stream: launches that use them never overlap (a stream runs them in order, and a captured
    /// graph orders them by their write of them, or as barriers: the `wgmma` launches).
    zeroed_words: OnceLock<sys::CUdeviceptr>,
    /// The capture in progress on this stream, if any.
    capture: Mutex<Option<Arc<GraphMemory>>>,
    /// The edges of the capture in progress (the graph nodes of each op queued in it), unless it
    /// keeps the stream's order. Held while an op is queued in the capture.
    capture_order: Mutex<Option<CaptureOrder<CapturedOp>>>,
    /// Whether `capture` is set: the one check every host-synchronising op makes.
    capturing: Arc<AtomicBool>,
    /// Held from the profiler's first event to its last around one operation, so that two
    /// threads queueing on this stream do not land between each other's events.
    profiled_order: Mutex<()>,
}
// SAFETY: a CUstream may be used from any thread; the driver serialises work submitted to it.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Stream {
    pub(crate) fn new(device: Arc<CudaDevice>) -> Result<Arc<Self>> {
        device.bind()?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking).call("cuStreamCreate")?;
        Ok(Arc::new(Self {
            raw,
            device,
            zeroed_words: OnceLock::new(),
            capture: Mutex::new(None),
            capture_order: Mutex::new(None),
            capturing: Arc::new(AtomicBool::new(false)),
            profiled_order: Mutex::new(()),
        }))
    }

    /// Whether this stream is being captured into a graph.
    pub(crate) fn capturing(&self) -> bool {
        self.capturing.load(Ordering::Acquire)
    }

    /// `Error::NotCapturable` naming `op` while this stream is being captured.
    pub(crate) fn refuse_in_capture(&self, op: &'static str) -> Result<()> {
        if self.capturing() {
            return Err(Error::NotCapturable { op });
        }
        Ok(())
    }

    /// The memory of the capture in progress, if any.
    pub(crate) fn capture_memory(&self) -> Option<Arc<GraphMemory>> {
        if !self.capturing() {
            return None;
        }
        self.capture.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Start capturing this stream's work into a graph.
    ///
    /// Relaxed mode: the pool calls `cuMemAlloc` on a cache miss (and `cuMemHostAlloc` for the
    /// graph's staged uploads) during the capture, and a launch may load its kernel's module
    /// (`cuModuleLoadData`, `cuModuleGetFunction`), which the global and thread-local modes refuse
    /// as "potentially unsafe" on the capturing thread. What those modes protect against, a
    /// call that synchronises with the capturing stream, is refused by the crate instead
    /// (`Error::NotCapturable`, checked in every host-synchronising op).
    pub(crate) fn begin_capture(self: &Arc<Self>) -> Result<()> {
        let mut slot = self.capture.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return Err(Error::NotCapturable { op: "capture (already capturing)" });
        }
        // Made now: its first use allocates and clears it synchronously.
        self.zeroed_words()?;
        self.device.bind()?;
        // SAFETY: `raw` is a live stream, not being captured (checked above; every capture of it
        // goes through this function).
        unsafe {
            result::stream::begin_capture(self.raw, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        }
        .call("cuStreamBeginCapture")?;
        *slot = Some(Arc::new(GraphMemory::new(self)));
        *self.capture_order.lock().unwrap_or_else(|p| p.into_inner()) =
            (!stream_order_forced()).then(CaptureOrder::default);
        self.device.captures.fetch_add(1, Ordering::AcqRel);
        self.capturing.store(true, Ordering::Release);
        Ok(())
    }

    /// End the capture begun by [`Stream::begin_capture`]: the captured graph (an error where the
    /// driver invalidated the capture) and the capture's memory, which the caller owns now.
    pub(crate) fn end_capture(&self) -> (Result<sys::CUgraph>, Arc<GraphMemory>) {
        let memory = {
            let mut slot = self.capture.lock().unwrap_or_else(|p| p.into_inner());
            self.capturing.store(false, Ordering::Release);
            slot.take().expect("end_capture follows a successful begin_capture")
        };
        self.device.captures.fetch_sub(1, Ordering::AcqRel);
        let order = self.capture_order.lock().unwrap_or_else(|p| p.into_inner()).take();
        let graph = self.device.bind().and_then(|()| {
            // The stream's end joins every op that nothing follows.
            if let Some(order) = order {
                let mut leaves: Vec<_> = order.leaves().flat_map(|op| op.nodes.iter().copied()).collect();
                let edges = vec![default_edge(); leaves.len()];
                // SAFETY: `raw` is being captured; the nodes are this capture's.
                unsafe { self.set_capture_dependencies(&mut leaves, &edges) }?;
            }
            // SAFETY: `raw` is live and being captured (begun by `begin_capture`).
            unsafe { result::stream::end_capture(self.raw) }.call("cuStreamEndCapture")
        });
        (graph, memory)
    }

    pub(crate) fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// Stable identity of this stream (for pool bookkeeping and error messages).
    pub(crate) fn id(&self) -> usize {
        self.raw as usize
    }

    pub(crate) fn synchronize(&self) -> Result<()> {
        self.refuse_in_capture("synchronize")?;
        self.device.bind()?;
        // SAFETY: `raw` is a live stream.
        unsafe { result::stream::synchronize(self.raw) }.call("cuStreamSynchronize")
    }

    /// The whole-tensor reductions' zeroed block counter (one `u32`; they leave it zero).
    pub(crate) fn reduce_counter(&self) -> Result<sys::CUdeviceptr> {
        self.zeroed_words()
    }

    /// The `wgmma` GEMM's `STREAM_K_FLAGS` zeroed stream-K flags (it leaves them zero).
    pub(crate) fn stream_k_flags(&self) -> Result<sys::CUdeviceptr> {
        Ok(self.zeroed_words()? + 4)
    }

    /// The column sums' `COLUMN_COUNTERS` zeroed counters (they leave them zero).
    pub(crate) fn column_counters(&self) -> Result<sys::CUdeviceptr> {
        Ok(self.zeroed_words()? + 4 * (1 + STREAM_K_FLAGS) as u64)
    }

    fn zeroed_words(&self) -> Result<sys::CUdeviceptr> {
        if let Some(p) = self.zeroed_words.get() {
            return Ok(*p);
        }
        self.device.bind()?;
        let bytes = 4 * (1 + STREAM_K_FLAGS + COLUMN_COUNTERS);
        // SAFETY: a fresh allocation, zeroed before any kernel sees it; freed in Drop.
        let p = unsafe {
            let p = result::malloc_sync(bytes).call("cuMemAlloc")?;
            result::memset_d8_sync(p, 0, bytes).call("cuMemsetD8")?;
            p
        };
        match self.zeroed_words.set(p) {
            Ok(()) => Ok(p),
            Err(p) => {
                // Another thread won the race; keep its words.
                // SAFETY: `p` was allocated above and never handed out.
                unsafe { result::free_sync(p) }.call("cuMemFree")?;
                Ok(*self.zeroed_words.get().expect("set by the winner"))
            }
        }
    }

    /// Queue a copy of `src` into device memory at `dst`.
    ///
    /// The driver documents an asynchronous copy from pageable host memory only as one that
    /// "might be synchronous with respect to host" and that may "synchronize with the stream and
    /// stage the copy into pinned memory"; it does not document when `src` is last read. The
    /// drivers stage pageable sources before they return (cudarc's safe `memcpy_htod` takes a
    /// borrowed slice on the same reading), and this relies on that.
    ///
    /// Refused (`NotCapturable` naming `op`) during a capture: a replay would read `src` again,
    /// long after it is gone, and the user's data would be frozen into the graph.
    ///
    /// # Safety
    /// `dst` is device memory of at least `size_of_val(src)` bytes in this device's context that
    /// no work queued on another stream still uses.
    pub(crate) unsafe fn copy_htod<T>(
        &self,
        op: &'static str,
        dst: sys::CUdeviceptr,
        src: &[T],
    ) -> Result<()> {
        self.refuse_in_capture(op)?;
        self.device.bind()?;
        let kind = || copy(CopyDirection::HostToDevice, false, std::mem::size_of_val(src));
        self.profiled(kind, (Footprint::Direct(&[Access::written(dst)]), NodeKind::Copy), || {
            // SAFETY: the caller's contract; the stream is live.
            unsafe { result::memcpy_htod_async(dst, src, self.raw) }.call("cuMemcpyHtoDAsync")
        })
    }

    /// [`Stream::copy_htod`] of launch metadata (addresses, tensor maps): values fixed by the
    /// buffers and shapes of the launch they serve, so a replay may copy the same bytes again.
    /// During a capture up to `FILL_WORDS_MAX` words go into a `fill_words` launch's parameters,
    /// and anything longer is first copied into page-locked memory that the graph owns.
    ///
    /// # Safety
    /// As [`Stream::copy_htod`], and `T` is plain data without padding.
    pub(crate) unsafe fn copy_htod_const<T: Copy>(&self, dst: sys::CUdeviceptr, src: &[T]) -> Result<()> {
        let Some(memory) = self.capture_memory() else {
            // SAFETY: forwarded.
            return unsafe { self.copy_htod("copy_htod_const", dst, src) };
        };
        // SAFETY: `T` is plain data without padding (the caller's contract): its bytes are
        // initialised.
        let bytes =
            unsafe { std::slice::from_raw_parts(src.as_ptr().cast::<u8>(), std::mem::size_of_val(src)) };
        // A few words travel in a kernel's parameters, which the graph keeps: no page-locked
        // buffer (a process's first one costs ~1 ms) and no copy node.
        if let Some((words, n)) = param_words(bytes).filter(|_| dst % 8 == 0) {
            // SAFETY: `fill_words(out, n, words)` writes `n` ≤ FILL_WORDS_MAX words at `dst`, 8-byte
            // aligned, which holds `bytes.len()` = 8·n bytes by the caller's contract; any launch
            // shape.
            return unsafe {
                crate::kernels::fill_words.launch(
                    self,
                    super::launch::LaunchConfig::covering(1, 32),
                    (super::kernel::DevPtrMut::new(dst), n, words),
                )
            };
        }
        let staged = memory.stage(bytes)?;
        self.device.bind()?;
        self.queue_captured((Footprint::Direct(&[Access::written(dst)]), NodeKind::Copy), || {
            // SAFETY: `staged` is page-locked memory of `bytes.len()` bytes that the graph keeps
            // until no replay can run; `dst` as the caller's contract says.
            unsafe { sys::cuMemcpyHtoDAsync_v2(dst, staged.cast(), bytes.len(), self.raw) }
                .result()
                .call("cuMemcpyHtoDAsync")
        })
    }

    /// Copy device memory at `src` into `dst` and wait for it.
    ///
    /// # Safety
    /// `src` is device memory of at least `size_of_val(dst)` bytes in this device's context whose
    /// producers are ordered before this stream's current end; every bit pattern is a valid `T`.
    pub(crate) unsafe fn copy_dtoh_sync<T>(
        &self,
        op: &'static str,
        dst: &mut [T],
        src: sys::CUdeviceptr,
    ) -> Result<()> {
        self.refuse_in_capture(op)?;
        self.device.bind()?;
        let bytes = std::mem::size_of_val(dst);
        let kind = || copy(CopyDirection::DeviceToHost, false, bytes);
        // Whatever happens to the copy, the synchronisation below runs before `dst`'s borrow ends.
        let queued = self.profiled(kind, (Footprint::Direct(&[Access::read(src)]), NodeKind::Copy), || {
            // SAFETY: the caller's contract; the synchronisation below ends the copy before
            // `dst`'s borrow does, whatever the driver does with a pageable destination.
            unsafe { result::memcpy_dtoh_async(dst, src, self.raw) }.call("cuMemcpyDtoHAsync")
        });
        let synced = self.synchronize();
        queued.and(synced)
    }

    /// Queue a device-to-device copy of `bytes`.
    ///
    /// # Safety
    /// Both ranges are device memory of this device, `dst` not read or written by work on another
    /// stream meanwhile, `src`'s producers ordered before this stream's current end.
    pub(crate) unsafe fn copy_dtod(
        &self,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        self.device.bind()?;
        self.profiled(
            || copy(CopyDirection::DeviceToDevice, false, bytes),
            (Footprint::Direct(&[Access::written(dst), Access::read(src)]), NodeKind::Copy),
            // SAFETY: the caller's contract.
            || unsafe { result::memcpy_dtod_async(dst, src, bytes, self.raw) }.call("cuMemcpyDtoDAsync"),
        )
    }

    /// Queue a copy of `bytes` from page-locked host memory at `src` to device memory at `dst`.
    ///
    /// # Safety
    /// `src` is page-locked host memory of at least `bytes` that stays allocated and unwritten
    /// until the copy is known complete; `dst` as for [`Stream::copy_htod`].
    pub(crate) unsafe fn copy_htod_pinned(
        &self,
        dst: sys::CUdeviceptr,
        src: *const f32,
        bytes: usize,
    ) -> Result<()> {
        self.device.bind()?;
        self.profiled(
            || copy(CopyDirection::HostToDevice, true, bytes),
            (Footprint::Direct(&[Access::written(dst)]), NodeKind::Copy),
            // SAFETY: the caller's contract; the stream is live.
            || {
                unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), bytes, self.raw) }
                    .result()
                    .call("cuMemcpyHtoDAsync")
            },
        )
    }

    /// Queue a copy of `bytes` from device memory at `src` to page-locked host memory at `dst`.
    ///
    /// # Safety
    /// `dst` is page-locked host memory of at least `bytes` that the host does not touch until the
    /// copy is known complete; `src` as for [`Stream::copy_dtoh_sync`], and not handed out again
    /// by the pool before the copy (stream order does that for a buffer of this stream).
    pub(crate) unsafe fn copy_dtoh_pinned(
        &self,
        dst: *mut f32,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        self.device.bind()?;
        self.profiled(
            || copy(CopyDirection::DeviceToHost, true, bytes),
            (Footprint::Direct(&[Access::read(src)]), NodeKind::Copy),
            // SAFETY: the caller's contract; the stream is live.
            || {
                unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, bytes, self.raw) }
                    .result()
                    .call("cuMemcpyDtoHAsync")
            },
        )
    }

    /// Queue work on this stream with `queue`, which touches `footprint`; while the device's
    /// profiler is on, it is timed and recorded as `kind`. The device's context is current.
    #[inline]
    pub(crate) fn profiled(
        &self,
        kind: impl FnOnce() -> ProfiledKind,
        (footprint, node): (Footprint<'_>, NodeKind),
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        // A capture records launches into a graph instead of running them: nothing to time, and
        // an event recorded inside it would become part of the graph.
        if self.capturing() {
            return self.queue_captured((footprint, node), queue);
        }
        let profiler = &self.device.profiler;
        if profiler.is_on() {
            profiler.around(self, kind, queue)
        } else {
            queue()
        }
    }

    /// Queue `queue` into the capture in progress after only the ops it must follow
    /// (`capture.rs`): a programmatic dependent kernel through programmatic edges from kernels,
    /// as a stream-ordered capture would make them.
    fn queue_captured(
        &self,
        (footprint, node): (Footprint<'_>, NodeKind),
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let mut slot = self.capture_order.lock().unwrap_or_else(|p| p.into_inner());
        let Some(order) = slot.as_mut() else { return queue() };
        let blocks = match footprint {
            Footprint::Direct(accesses) => accesses
                .iter()
                .filter(|a| a.addr != 0)
                .map(|a| allocation_start(a.addr).map(|start| (start, a.write)))
                .collect::<Option<Vec<_>>>(),
            Footprint::Opaque => None,
        };
        let deps = order.dependencies(blocks.as_deref());
        let (mut after, mut edges) = (Vec::new(), Vec::new());
        for &op in &deps {
            let dep = order.node(op);
            let programmatic = node == NodeKind::Kernel { programmatic: true }
                && matches!(dep.kind, NodeKind::Kernel { .. });
            after.extend_from_slice(&dep.nodes);
            edges.resize(after.len(), if programmatic { programmatic_edge() } else { default_edge() });
        }
        // SAFETY: `raw` is being captured (the order is set only then, under this lock); the
        // nodes are this capture's.
        unsafe { self.set_capture_dependencies(&mut after, &edges) }?;
        queue()?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let (mut ends, mut count) = (std::ptr::null(), 0usize);
        // SAFETY: `raw` is live; the out-pointers are valid; the id, graph and edge data are not
        // asked for (null).
        unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                self.raw,
                &mut status,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut ends,
                std::ptr::null_mut(),
                &mut count,
            )
        }
        .result()
        .call("cuStreamGetCaptureInfo")?;
        // SAFETY: the driver's array of `count` nodes, valid until the next call on the stream.
        let queued =
            if count == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(ends, count) }.to_vec() };
        order.record(blocks.as_deref(), &deps, CapturedOp { nodes: queued, kind: node });
        Ok(())
    }

    /// Make the next op captured on this stream follow exactly `nodes`, through `edges` (one
    /// each).
    ///
    /// # Safety
    /// `raw` is being captured and `nodes` are nodes of its capture.
    unsafe fn set_capture_dependencies(
        &self,
        nodes: &mut [sys::CUgraphNode],
        edges: &[sys::CUgraphEdgeData],
    ) -> Result<()> {
        assert_eq!(nodes.len(), edges.len(), "an edge per node");
        let flags = sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32;
        // SAFETY: the caller's contract; the driver reads `nodes.len()` nodes and edges.
        unsafe {
            sys::cuStreamUpdateCaptureDependencies_v2(
                self.raw,
                nodes.as_mut_ptr(),
                edges.as_ptr(),
                nodes.len(),
                flags,
            )
        }
        .result()
        .call("cuStreamUpdateCaptureDependencies")
    }

    /// Make later work on this stream wait for all work submitted to `other` so far. Refused
    /// while either is captured: the pool's ownership of a capture's blocks follows one stream.
    /// Held by the event-timed profiler from an operation's start event to its end event.
    pub(crate) fn profiled_order(&self) -> std::sync::MutexGuard<'_, ()> {
        self.profiled_order.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn wait_for(&self, other: &Stream) -> Result<()> {
        self.refuse_in_capture("wait_for")?;
        other.refuse_in_capture("wait_for")?;
        let event = Event::record(other)?;
        self.device.bind()?;
        // SAFETY: both handles are live; the driver keeps the dependency after the event is freed.
        unsafe {
            result::stream::wait_event(self.raw, event.raw, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        }
        .call("cuStreamWaitEvent")
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Errors cannot be returned from drop; a failing driver here means the process is ending.
        if self.device.bind().is_ok() {
            // SAFETY: `raw` is live; every buffer allocated on it (each holds an Arc of this
            // stream) is gone, so after the sync nothing uses the zeroed words or the stream.
            unsafe {
                let _ = result::stream::synchronize(self.raw);
                self.device.pool.forget_stream(self);
                if let Some(p) = self.zeroed_words.get() {
                    let _ = result::free_sync(*p);
                }
                let _ = result::stream::destroy(self.raw);
            }
        }
    }
}

/// `bytes` as the words of a `fill_words` launch and their count, where they fit.
fn param_words(bytes: &[u8]) -> Option<(crate::shapes::ParamWords, usize)> {
    let n = bytes.len() / 8;
    if bytes.len() % 8 != 0 || n > crate::shapes::FILL_WORDS_MAX {
        return None;
    }
    let mut words = crate::shapes::ParamWords([0; crate::shapes::FILL_WORDS_MAX]);
    for (w, b) in words.0.iter_mut().zip(bytes.chunks_exact(8)) {
        *w = u64::from_ne_bytes(b.try_into().expect("8 bytes"));
    }
    Some((words, n))
}

/// The start of the device allocation holding `addr`, if it is in one.
fn allocation_start(addr: u64) -> Option<u64> {
    let mut start: sys::CUdeviceptr = 0;
    // SAFETY: the attribute is a device pointer, written to `start`; an address outside every
    // allocation is an error answer, not undefined behaviour.
    unsafe {
        sys::cuPointerGetAttribute(
            (&raw mut start).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            addr,
        )
    }
    .result()
    .ok()
    .map(|()| start)
}

/// A full dependency.
fn default_edge() -> sys::CUgraphEdgeData {
    sys::CUgraphEdgeData { from_port: 0, to_port: 0, type_: 0, reserved: [0; 5] }
}

/// A programmatic dependency: the kernel downstream may start once every block upstream has
/// triggered or exited, and waits for the upstream kernel's memory with `griddepcontrol.wait`.
fn programmatic_edge() -> sys::CUgraphEdgeData {
    sys::CUgraphEdgeData {
        from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
        to_port: 0,
        type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
        reserved: [0; 5],
    }
}

fn copy(direction: CopyDirection, pinned: bool, bytes: usize) -> ProfiledKind {
    ProfiledKind::Copy { direction, pinned, bytes }
}

/// A CUDA event recorded on a stream.
pub struct Event {
    raw: sys::CUevent,
    device: Arc<CudaDevice>,
    /// The capture flag of the stream it was last recorded on: waiting for it while that stream
    /// is captured is refused.
    recorded_on: Mutex<Option<Arc<AtomicBool>>>,
}
// SAFETY: events may be recorded, queried and waited on from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// A new event on the stream's device, not yet recorded.
    pub(crate) fn new(stream: &Stream) -> Result<Self> {
        stream.device.bind()?;
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).call("cuEventCreate")?;
        Ok(Event { raw, device: stream.device.clone(), recorded_on: Mutex::new(None) })
    }

    /// A new event recorded now on `stream`.
    pub(crate) fn record(stream: &Stream) -> Result<Self> {
        let event = Self::new(stream)?;
        event.record_on(stream)?;
        Ok(event)
    }

    /// (Re-)record this event at the current end of `stream`'s queue.
    pub(crate) fn record_on(&self, stream: &Stream) -> Result<()> {
        if !Arc::ptr_eq(&self.device, &stream.device) {
            return Err(Error::DeviceMismatch {
                op: "record_event",
                lhs: self.device.info.to_string(),
                rhs: stream.device.info.to_string(),
            });
        }
        self.device.bind()?;
        // SAFETY: both handles are live and belong to the same device.
        unsafe { result::event::record(self.raw, stream.raw) }.call("cuEventRecord")?;
        *self.recorded_on.lock().unwrap_or_else(|p| p.into_inner()) = Some(stream.capturing.clone());
        Ok(())
    }

    fn refuse_in_capture(&self, op: &'static str) -> Result<()> {
        let recorded_on = self.recorded_on.lock().unwrap_or_else(|p| p.into_inner());
        if recorded_on.as_ref().is_some_and(|c| c.load(Ordering::Acquire)) {
            return Err(Error::NotCapturable { op });
        }
        Ok(())
    }

    /// Block until the work before the event has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.refuse_in_capture("Event::synchronize")?;
        self.device.bind()?;
        // SAFETY: `raw` is a live, recorded event.
        unsafe { result::event::synchronize(self.raw) }.call("cuEventSynchronize")
    }

    /// Milliseconds of device time from `self` to `later` (both on the same device).
    pub fn elapsed_ms(&self, later: &Event) -> Result<f32> {
        if !Arc::ptr_eq(&self.device, &later.device) {
            return Err(Error::DeviceMismatch {
                op: "elapsed_ms",
                lhs: self.device.info.to_string(),
                rhs: later.device.info.to_string(),
            });
        }
        self.refuse_in_capture("Event::elapsed_ms")?;
        later.refuse_in_capture("Event::elapsed_ms")?;
        let elapsed = elapsed_fn()?;
        later.synchronize()?;
        let mut ms = 0.0f32;
        // SAFETY: `elapsed` is the driver's cuEventElapsedTime(_v2) (resolved at load); both
        // events are live, of one device, recorded; `later` has completed; `ms` is writable.
        unsafe { elapsed(&mut ms, self.raw, later.raw) }.result().call("cuEventElapsedTime")?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: `raw` is live and dropped once; the driver defers the release until the
            // event has completed.
            let _ = unsafe { result::event::destroy(self.raw) };
        }
    }
}

/// A copy that may still be using a [`PinnedBuffer`], and how to wait for it.
enum Pending {
    /// The event recorded right after the copy.
    Event(Event),
    /// The copy was queued (or may have been) but no event could be recorded after it: the whole
    /// stream is waited for.
    Stream(Arc<Stream>),
}

impl Pending {
    fn wait(&self) -> Result<()> {
        match self {
            Pending::Event(e) => e.synchronize(),
            Pending::Stream(s) => s.synchronize(),
        }
    }
}

/// Page-locked host memory for asynchronous copies. Any access from the host first waits for
/// every copy in flight, so the host never sees a half-written buffer nor writes one a copy still
/// reads; while a wait fails (a broken context), host access fails and dropping the buffer leaks
/// it rather than free memory a copy may still use.
pub struct PinnedBuffer {
    ptr: *mut f32,
    len: usize,
    device: Arc<CudaDevice>,
    /// Every copy that may be in flight. The lock is held from the wait before a copy until its
    /// completion is recorded here, so two threads copying from one buffer (on different streams)
    /// both land in the list.
    pending: Mutex<Vec<Pending>>,
}
// SAFETY: the buffer is plain host memory; `pending` serialises the host against the device.
unsafe impl Send for PinnedBuffer {}
// SAFETY: as above; shared access only reads after every pending copy is complete.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    pub(crate) fn new(device: Arc<CudaDevice>, len: usize) -> Result<Self> {
        let bytes = len.checked_mul(4).ok_or(Error::SizeOverflow { op: "pinned", shape: vec![len] })?;
        device.bind()?;
        let ptr = if bytes == 0 {
            std::ptr::NonNull::<f32>::dangling().as_ptr()
        } else {
            // SAFETY: a fresh page-locked allocation, zero-filled below before any read.
            let p = unsafe { result::malloc_host(bytes, 0) }.call("cuMemHostAlloc")? as *mut f32;
            // SAFETY: `p` points to `len` writable floats.
            unsafe { std::ptr::write_bytes(p, 0, len) };
            p
        };
        Ok(Self { ptr, len, device, pending: Mutex::new(Vec::new()) })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for every pending copy; each leaves the list only once its wait succeeded.
    fn wait_locked(pending: &mut Vec<Pending>) -> Result<()> {
        while let Some(copy) = pending.last() {
            copy.wait()?;
            pending.pop();
        }
        Ok(())
    }

    fn wait(&self) -> Result<()> {
        Self::wait_locked(&mut self.lock())
    }

    /// The contents, after every copy in flight has finished.
    pub fn as_slice(&self) -> Result<&[f32]> {
        self.wait()?;
        // SAFETY: `ptr` holds `len` initialised floats and no copy is in flight; a copy started
        // later through `&self` only reads the buffer (uploads), writes need `&mut self`.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }

    /// The contents for writing, after every copy in flight has finished.
    pub fn as_mut_slice(&mut self) -> Result<&mut [f32]> {
        self.wait()?;
        // SAFETY: as above, and `&mut self` excludes every other host access and new copies.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) })
    }

    /// Start a copy that involves this buffer on `stream`; later host access waits for it. If
    /// the copy fails or its completion cannot be recorded, later access waits for the stream.
    /// Refused (`NotCapturable` naming `op`) while `stream` is captured: the completion
    /// tracking would not follow the replays.
    pub(crate) fn begin_copy(
        &self,
        op: &'static str,
        stream: &Arc<Stream>,
        copy: impl FnOnce(*mut f32) -> Result<()>,
    ) -> Result<()> {
        stream.refuse_in_capture(op)?;
        let mut pending = self.lock();
        Self::wait_locked(&mut pending)?;
        // A failing copy call may have queued work (the driver reports earlier asynchronous
        // errors through any call), so every outcome is tracked.
        let queued = copy(self.ptr).and_then(|()| Event::record(stream));
        match queued {
            Ok(event) => {
                pending.push(Pending::Event(event));
                Ok(())
            }
            Err(e) => {
                pending.push(Pending::Stream(stream.clone()));
                Err(e)
            }
        }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.wait().is_ok() && self.len > 0 && self.device.bind().is_ok() {
            // SAFETY: allocated by cuMemHostAlloc, no copy in flight, freed once.
            let _ = unsafe { result::free_host(self.ptr.cast()) };
        }
    }
}
