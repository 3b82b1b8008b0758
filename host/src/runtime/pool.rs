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
use super::error::{DriverResultExt, Error, Result};
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

/// Device memory from the pool; returns to it on drop.
pub(crate) struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    class: usize,
    stream: Arc<Stream>,
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
        if self.class > 0 {
            self.stream.device.pool.release(self.ptr, self.class, Arc::downgrade(&self.stream));
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
            return Ok(DeviceBuffer { ptr: 0, bytes: 0, class: 0, stream: stream.clone() });
        }
        let class = size_class(bytes).ok_or(Error::SizeOverflow { op, shape: vec![bytes] })?;
        let cached = {
            let mut st = self.lock();
            st.stats.allocations += 1;
            let list = st.free.entry(class).or_default();
            let same_stream = list.iter().rposition(|b| match &b.stream {
                Some(s) => std::ptr::eq(s.as_ptr(), Arc::as_ptr(stream)),
                None => true,
            });
            let block = same_stream.or(list.len().checked_sub(1)).map(|i| list.swap_remove(i));
            if block.is_some() {
                st.stats.cache_hits += 1;
            } else {
                st.stats.cache_misses += 1;
            }
            block
        };
        let ptr = match cached {
            Some(block) => {
                if let Err(e) = Self::order_after(&block, stream) {
                    // The block still belongs to its old stream's order: back on the list.
                    self.lock().free.entry(class).or_default().push(block);
                    return Err(e);
                }
                block.ptr
            }
            None => self.alloc_from_driver(stream, class, bytes, op)?,
        };
        let mut st = self.lock();
        st.stats.bytes_in_use += class;
        st.stats.peak_bytes_in_use = st.stats.peak_bytes_in_use.max(st.stats.bytes_in_use);
        st.window_peak = st.window_peak.max(st.stats.bytes_in_use);
        Ok(DeviceBuffer { ptr, bytes, class, stream: stream.clone() })
    }

    /// Make `stream` wait for the work that last used `block` on another stream.
    fn order_after(block: &CachedBlock, stream: &Arc<Stream>) -> Result<()> {
        let Some(old) = block.stream.as_ref().filter(|s| !std::ptr::eq(s.as_ptr(), Arc::as_ptr(stream)))
        else {
            return Ok(());
        };
        match old.upgrade() {
            Some(old) => stream.wait_for(&old),
            // The old stream is being dropped right now (its drop synchronises it); wait for the
            // whole device instead.
            None => {
                stream.device.bind()?;
                result::ctx::synchronize().call("cuCtxSynchronize")
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
                Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY && attempt == 0 => {
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
