//! A caching, stream-ordered device memory pool (one per device).
//!
//! Requests are rounded up to a size class (at most 25% waste); a freed block goes to its class's
//! free list, tagged with the stream it was used on. A block reused on the same stream needs no
//! synchronisation (stream order keeps the old work ahead of the new); reused on another stream,
//! that stream first waits for the old one. On an out-of-memory answer the pool returns its cached
//! blocks to the driver and tries once more.
//!
//! Returning blocks to the driver takes them off the free lists first and only then waits for the
//! device: a block released by another thread is released after its last work was queued, so once
//! it is on a list, a device synchronisation begun afterwards covers that work. A block taken off a
//! list goes back to it whenever what follows fails.
//!
//! While a stream is captured into a CUDA graph, every block it is handed, and every block freed
//! on it, belongs to the capture ([`GraphMemory`]): freed blocks are reused inside that capture
//! only (the graph's own order keeps them safe), and they all stay out of the shared lists until
//! the graph is dropped, since every replay writes them again.
use super::device::CudaDevice;
use super::error::{DriverResultExt, Error, Result};
use super::graph::GraphParts;
use super::kernel::{DevPtr, DevPtrMut, DeviceElement};
use super::stream::Stream;
use cudarc::driver::{result, sys};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Counters of one device's pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes of live buffers (size-class bytes).
    pub bytes_in_use: usize,
    /// Bytes held from the driver: in use plus cached.
    pub bytes_reserved: usize,
    /// Highest `bytes_in_use` seen.
    pub peak_bytes_in_use: usize,
    /// Buffers handed out.
    pub allocations: u64,
    /// Requests served from the cache.
    pub cache_hits: u64,
    /// Requests that went to the driver.
    pub cache_misses: u64,
}

struct CachedBlock {
    ptr: sys::CUdeviceptr,
    /// The stream whose work last touched the block; `None` once that stream is gone (idle).
    stream: Option<Weak<Stream>>,
}

#[derive(Default)]
struct PoolState {
    free: HashMap<usize, Vec<CachedBlock>>,
    stats: PoolStats,
    /// Highest `bytes_in_use` since the profiler last opened a window.
    window_peak: usize,
}

pub(crate) struct MemoryPool {
    state: Mutex<PoolState>,
}

/// The class a request of `bytes` is served from: 512 B at least, else the next multiple of
/// an eighth of the next power of two.
pub(crate) fn size_class(bytes: usize) -> Option<usize> {
    let granule = (bytes.checked_next_power_of_two()? / 8).max(512);
    bytes.checked_next_multiple_of(granule)
}

/// Device memory from the pool; returns to it on drop (or to the graph that owns it).
pub(crate) struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    class: usize,
    stream: Arc<Stream>,
    /// The capture (and then graph) the block was handed out to.
    graph: Option<Arc<GraphMemory>>,
}

impl DeviceBuffer {
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }
    /// The buffer as a kernel's input of elements `T`.
    pub(crate) fn dev_ptr<T: DeviceElement>(&self) -> DevPtr<T> {
        DevPtr::new(self.ptr)
    }
    /// The buffer as a kernel's output of elements `T`.
    pub(crate) fn dev_ptr_mut<T: DeviceElement>(&self) -> DevPtrMut<T> {
        DevPtrMut::new(self.ptr)
    }
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
    pub(crate) fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.class == 0 {
            return;
        }
        // A block freed while its stream is captured may still be read by the captured work
        // before the free: the capture keeps it, whoever allocated it.
        let (ptr, class) = (self.ptr, self.class);
        if self.graph.take().is_some_and(|g| g.park(ptr, class))
            || self.stream.capture_memory().is_some_and(|g| g.park(ptr, class))
        {
            return;
        }
        self.stream.device.pool.release(self.ptr, self.class, Arc::downgrade(&self.stream));
    }
}

/// The blocks of one capture and of the graph made from it, and the pinned host copies its
/// uploads read at every replay. While `live`, freed blocks are parked here (reused only by the
/// capture); once the graph is gone ([`GraphMemory::retire`]) they return to the pool.
pub(crate) struct GraphMemory {
    device: Arc<CudaDevice>,
    stream: Weak<Stream>,
    state: Mutex<GraphMemoryState>,
}

struct GraphMemoryState {
    live: bool,
    parked: HashMap<usize, Vec<sys::CUdeviceptr>>,
    /// Page-locked host buffers (addresses) that the graph's upload nodes copy from.
    staged: Vec<usize>,
    /// Graphs dropped while this capture was running: their stream could not be synchronised
    /// then; they go once this memory retires.
    deferred: Vec<GraphParts>,
}

impl GraphMemory {
    pub(crate) fn new(stream: &Arc<Stream>) -> Self {
        Self {
            device: stream.device.clone(),
            stream: Arc::downgrade(stream),
            state: Mutex::new(GraphMemoryState {
                live: true,
                parked: HashMap::new(),
                staged: Vec::new(),
                deferred: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GraphMemoryState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep a freed block while the capture or its graph lives; false once it is gone.
    fn park(&self, ptr: sys::CUdeviceptr, class: usize) -> bool {
        let mut st = self.lock();
        if st.live {
            st.parked.entry(class).or_default().push(ptr);
        }
        st.live
    }

    /// A parked block of `class`, for reuse inside the capture.
    fn take(&self, class: usize) -> Option<sys::CUdeviceptr> {
        self.lock().parked.get_mut(&class).and_then(Vec::pop)
    }

    /// A page-locked copy of `src` that lives as long as the graph; its address.
    pub(crate) fn stage(&self, src: &[u8]) -> Result<*const u8> {
        self.device.bind()?;
        // SAFETY: a fresh page-locked allocation of `src.len()` bytes, filled below, freed in
        // `retire` once no replay can read it.
        let p = unsafe { result::malloc_host(src.len(), 0) }.call("cuMemHostAlloc")? as *mut u8;
        // SAFETY: `p` has room for `src.len()` bytes and does not overlap `src`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        self.lock().staged.push(p as usize);
        Ok(p)
    }

    /// Keep a graph dropped during this capture until this memory retires.
    pub(crate) fn defer(&self, parts: GraphParts) {
        self.lock().deferred.push(parts);
    }

    /// The graph is gone, or the capture failed: parked blocks go back to the pool (stream order
    /// covers the replays queued before; blocks still held by tensors follow on their drop) and
    /// the staged host buffers are freed.
    ///
    /// # Safety
    /// No replay of the graph is still running (the caller synchronised its stream) or none ever
    /// ran: the staged buffers are freed at once.
    pub(crate) unsafe fn retire(&self) {
        let (parked, staged, deferred) = {
            let mut st = self.lock();
            st.live = false;
            (std::mem::take(&mut st.parked), std::mem::take(&mut st.staged), std::mem::take(&mut st.deferred))
        };
        drop(deferred);
        for (class, ptrs) in parked {
            for ptr in ptrs {
                self.device.pool.release(ptr, class, self.stream.clone());
            }
        }
        if !staged.is_empty() && self.device.bind().is_ok() {
            for p in staged {
                // SAFETY: allocated by cuMemHostAlloc in `stage`; the caller's contract says no
                // copy reads it any more.
                let _ = unsafe { result::free_host(p as *mut std::ffi::c_void) };
            }
        }
    }
}

impl MemoryPool {
    pub(crate) fn new() -> Self {
        Self { state: Mutex::new(PoolState::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn stats(&self) -> PoolStats {
        self.lock().stats
    }

    /// The counters now, and the peak restarted from the bytes in use (the profiler's window).
    pub(crate) fn start_window(&self) -> PoolStats {
        let mut st = self.lock();
        st.window_peak = st.stats.bytes_in_use;
        st.stats
    }

    /// The counters and the peak since [`MemoryPool::start_window`].
    pub(crate) fn window_stats(&self) -> (PoolStats, usize) {
        let st = self.lock();
        (st.stats, st.window_peak)
    }

    /// A buffer of at least `bytes` for work on `stream`. Zero bytes allocate nothing.
    pub(crate) fn alloc(&self, stream: &Arc<Stream>, bytes: usize, op: &'static str) -> Result<DeviceBuffer> {
        if bytes == 0 {
            return Ok(DeviceBuffer { ptr: 0, bytes: 0, class: 0, stream: stream.clone(), graph: None });
        }
        let class = size_class(bytes).ok_or(Error::SizeOverflow { op, shape: vec![bytes] })?;
        let graph = stream.capture_memory();
        if let Some(ptr) = graph.as_ref().and_then(|g| g.take(class)) {
            // Still counted in use: parked blocks never left the capture.
            let mut st = self.lock();
            st.stats.allocations += 1;
            st.stats.cache_hits += 1;
            return Ok(DeviceBuffer { ptr, bytes, class, stream: stream.clone(), graph });
        }
        let cached = {
            let mut st = self.lock();
            st.stats.allocations += 1;
            let list = st.free.entry(class).or_default();
            let same_stream = list.iter().rposition(|b| match &b.stream {
                Some(s) => std::ptr::eq(s.as_ptr(), Arc::as_ptr(stream)),
                None => true,
            });
            // A capture takes no block of another stream: the wait for that stream's work would
            // join the other stream to the capture.
            let other = if graph.is_some() { None } else { list.len().checked_sub(1) };
            let block = same_stream.or(other).map(|i| list.swap_remove(i));
            if block.is_some() {
                st.stats.cache_hits += 1;
            } else {
                st.stats.cache_misses += 1;
            }
            block
        };
        let reused = match cached {
            Some(block) => match Self::order_after(&block, stream) {
                Ok(true) => Some(block.ptr),
                ordered => {
                    // The block still belongs to its old stream's order: back on the list.
                    self.lock().free.entry(class).or_default().push(block);
                    ordered?;
                    None
                }
            },
            None => None,
        };
        let ptr = match reused {
            Some(ptr) => ptr,
            None => self.alloc_from_driver(stream, class, bytes, op)?,
        };
        let mut st = self.lock();
        st.stats.bytes_in_use += class;
        st.stats.peak_bytes_in_use = st.stats.peak_bytes_in_use.max(st.stats.bytes_in_use);
        st.window_peak = st.window_peak.max(st.stats.bytes_in_use);
        Ok(DeviceBuffer { ptr, bytes, class, stream: stream.clone(), graph })
    }

    /// Make `stream` wait for the work that last used `block` on another stream; false where that
    /// cannot be done now without breaking a capture (the old stream is being captured, or the
    /// device-wide wait would meet one).
    fn order_after(block: &CachedBlock, stream: &Arc<Stream>) -> Result<bool> {
        let Some(old) = block.stream.as_ref().filter(|s| !std::ptr::eq(s.as_ptr(), Arc::as_ptr(stream)))
        else {
            return Ok(true);
        };
        match old.upgrade() {
            Some(old) if old.capturing() => Ok(false),
            Some(old) => stream.wait_for(&old).map(|()| true),
            None if stream.device.capturing() => Ok(false),
            // The old stream is being dropped right now (its drop synchronises it); wait for the
            // whole device instead.
            None => {
                stream.device.bind()?;
                result::ctx::synchronize().call("cuCtxSynchronize").map(|()| true)
            }
        }
    }

    fn alloc_from_driver(
        &self,
        stream: &Stream,
        class: usize,
        bytes: usize,
        op: &'static str,
    ) -> Result<sys::CUdeviceptr> {
        stream.device.bind()?;
        for attempt in 0..2 {
            // SAFETY: a fresh allocation; its contents are written before they are read.
            match unsafe { result::malloc_sync(class) } {
                Ok(ptr) => {
                    self.lock().stats.bytes_reserved += class;
                    return Ok(ptr);
                }
                // Trimming waits for the whole device, which a capture on it cannot take.
                Err(e)
                    if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY
                        && attempt == 0
                        && !stream.device.capturing() =>
                {
                    self.trim(stream)?;
                }
                Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => {
                    let (free, _) = stream.device.memory_info()?;
                    return Err(Error::OutOfMemory { op, requested: bytes, free });
                }
                Err(e) => return Err(Error::Driver { call: "cuMemAlloc", source: e }),
            }
        }
        unreachable!("the second attempt returns")
    }

    fn release(&self, ptr: sys::CUdeviceptr, class: usize, stream: Weak<Stream>) {
        let mut st = self.lock();
        st.stats.bytes_in_use -= class;
        st.free.entry(class).or_default().push(CachedBlock { ptr, stream: Some(stream) });
    }

    /// The stream is gone (after a synchronisation): its cached blocks are idle.
    pub(crate) fn forget_stream(&self, stream: *const Stream) {
        for block in self.lock().free.values_mut().flatten() {
            if block.stream.as_ref().is_some_and(|s| std::ptr::eq(s.as_ptr(), stream)) {
                block.stream = None;
            }
        }
    }

    /// Return every cached block to the driver (after the device has finished using them).
    pub(crate) fn trim(&self, stream: &Stream) -> Result<()> {
        if stream.device.capturing() {
            return Err(Error::NotCapturable { op: "trim_pool" });
        }
        let blocks: Vec<(usize, CachedBlock)> = {
            let mut st = self.lock();
            st.free.drain().flat_map(|(class, list)| list.into_iter().map(move |b| (class, b))).collect()
        };
        // After the drain: every work queued on a drained block was queued before this call.
        let synced = stream.device.bind().and_then(|()| result::ctx::synchronize().call("cuCtxSynchronize"));
        if let Err(e) = synced {
            self.put_back(blocks);
            return Err(e);
        }
        self.free_blocks(blocks, |ptr| {
            // SAFETY: drained blocks are owned by the pool alone and the device has finished
            // every work queued on them (synchronised above).
            unsafe { result::free_sync(ptr) }.call("cuMemFree")
        })
    }

    /// Free each block with `free`; a block whose free fails goes back to its list (and stays
    /// reserved), and the first error is returned once every block was tried.
    fn free_blocks(
        &self,
        blocks: Vec<(usize, CachedBlock)>,
        mut free: impl FnMut(sys::CUdeviceptr) -> Result<()>,
    ) -> Result<()> {
        let mut first_error = None;
        let mut kept = Vec::new();
        for (class, block) in blocks {
            match free(block.ptr) {
                Ok(()) => self.lock().stats.bytes_reserved -= class,
                Err(e) => {
                    first_error.get_or_insert(e);
                    kept.push((class, block));
                }
            }
        }
        self.put_back(kept);
        first_error.map_or(Ok(()), Err)
    }

    fn put_back(&self, blocks: Vec<(usize, CachedBlock)>) {
        let mut st = self.lock();
        for (class, block) in blocks {
            st.free.entry(class).or_default().push(block);
        }
    }

    /// Cached blocks (all classes).
    #[cfg(test)]
    fn cached(&self) -> usize {
        self.lock().free.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err() -> Error {
        Error::Driver {
            call: "cuMemFree",
            source: cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_UNKNOWN),
        }
    }

    #[test]
    fn a_failed_free_keeps_the_blocks_it_could_not_free() {
        let pool = MemoryPool::new();
        let blocks: Vec<(usize, CachedBlock)> =
            (1..=4).map(|p| (512, CachedBlock { ptr: p * 4096, stream: Some(Weak::new()) })).collect();
        pool.lock().stats.bytes_reserved = 4 * 512;
        let mut tried = Vec::new();
        let result = pool.free_blocks(blocks, |ptr| {
            tried.push(ptr);
            if ptr == 2 * 4096 {
                Err(err())
            } else {
                Ok(())
            }
        });
        assert!(matches!(result, Err(Error::Driver { call: "cuMemFree", .. })));
        // Every block was tried, the one that failed is cached again and still counted.
        assert_eq!(tried.len(), 4);
        assert_eq!(pool.cached(), 1);
        assert_eq!(pool.stats().bytes_reserved, 512);
        assert_eq!(pool.lock().free[&512][0].ptr, 2 * 4096);
    }

    #[test]
    fn blocks_put_back_stay_cached() {
        let pool = MemoryPool::new();
        pool.put_back(vec![(1024, CachedBlock { ptr: 8192, stream: None })]);
        assert_eq!(pool.cached(), 1);
    }
}
