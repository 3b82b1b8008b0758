//! CUDA devices: discovery, properties, and the per-device state every context on it shares
//! (primary context, kernel module, memory pool, profiler).
use super::error::{DriverResultExt, Error, Result};
use super::module::KernelModules;
use super::pool::MemoryPool;
use super::profiler::Profiler;
use cudarc::driver::{result, sys, DriverError};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Properties of a CUDA device, read once when it is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// (major, minor), e.g. (9, 0) for an H100.
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub max_threads_per_sm: u32,
    pub total_memory: usize,
    pub l2_bytes: usize,
    /// Shared memory a block may use once it opts in (`cuFuncSetAttribute`).
    pub max_shared_per_block_optin: usize,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.compute_capability;
        write!(
            f,
            "{} (sm_{major}{minor}, {} SMs, {:.1} GiB)",
            self.name,
            self.sm_count,
            self.total_memory as f64 / (1u64 << 30) as f64
        )
    }
}

/// Loads libcuda and initialises the driver once; the reason when that cannot be done.
pub(crate) fn driver() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: only probes whether the shared library can be loaded.
        if !unsafe { sys::is_culib_present() } {
            return Err("libcuda could not be loaded".into());
        }
        result::init().map_err(|e| format!("cuInit failed: {e}"))?;
        ELAPSED_ENTRY.get_or_init(|| {
            resolve_elapsed(|name| {
                // SAFETY: the library loads (checked above); the symbol, if present, has the
                // signature of `ElapsedFn` (the driver API's), and the library is never unloaded.
                unsafe { sys::culib().get::<ElapsedFn>(name) }.ok().map(|f| *f)
            })
        });
        Ok(())
    })
    .clone()
    .map_err(Error::NoDevice)
}

/// `cuEventElapsedTime`'s signature (the `_v2` entry point has the same one).
pub(crate) type ElapsedFn = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;

/// The entry point [`driver`] found for event timing, resolved once at load. cudarc's
/// `result::event::elapsed` calls `cuEventElapsedTime_v2`, which drivers before CUDA 12.8 lack
/// (and cudarc's lazy loader panics on a missing symbol); those have the original entry point,
/// with the same contract.
static ELAPSED_ENTRY: OnceLock<Option<ElapsedFn>> = OnceLock::new();

/// `cuEventElapsedTime_v2` where `lookup` finds it, else `cuEventElapsedTime`.
pub(crate) fn resolve_elapsed(lookup: impl Fn(&[u8]) -> Option<ElapsedFn>) -> Option<ElapsedFn> {
    lookup(b"cuEventElapsedTime_v2\0").or_else(|| lookup(b"cuEventElapsedTime\0"))
}

/// The event-timing entry point of the loaded driver (`driver()` has succeeded).
pub(crate) fn elapsed_fn() -> Result<ElapsedFn> {
    driver()?;
    ELAPSED_ENTRY.get().copied().flatten().ok_or(Error::Driver {
        call: "cuEventElapsedTime",
        source: DriverError(sys::CUresult::CUDA_ERROR_NOT_FOUND),
    })
}

/// Number of CUDA devices (0 where there is no driver).
pub fn cuda_device_count() -> usize {
    driver().and_then(|_| result::device::get_count().call("cuDeviceGetCount")).map_or(0, |n| n as usize)
}

/// Properties of every CUDA device.
pub fn cuda_devices() -> Result<Vec<DeviceInfo>> {
    driver()?;
    let n = result::device::get_count().call("cuDeviceGetCount")?;
    (0..n as usize).map(device_info).collect()
}

fn device_info(ordinal: usize) -> Result<DeviceInfo> {
    use sys::CUdevice_attribute as A;
    let dev = result::device::get(ordinal as i32).call("cuDeviceGet")?;
    // SAFETY: `dev` is a valid device handle from cuDeviceGet.
    let attr = |a| unsafe { result::device::get_attribute(dev, a) }.call("cuDeviceGetAttribute");
    Ok(DeviceInfo {
        ordinal,
        name: result::device::get_name(dev).call("cuDeviceGetName")?,
        compute_capability: (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
        ),
        sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        max_threads_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)? as u32,
        // SAFETY: as above.
        total_memory: unsafe { result::device::total_mem(dev) }.call("cuDeviceTotalMem")?,
        l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize,
        max_shared_per_block_optin: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize,
    })
}

/// A primary context handle that may cross threads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawContext(pub(crate) sys::CUcontext);
// SAFETY: CUDA driver contexts may be made current on any thread; the driver synchronises them.
unsafe impl Send for RawContext {}
// SAFETY: as above.
unsafe impl Sync for RawContext {}

/// Everything shared by the contexts (streams) of one device.
pub(crate) struct CudaDevice {
    pub(crate) info: DeviceInfo,
    raw: RawContext,
    pub(crate) modules: KernelModules,
    pub(crate) pool: MemoryPool,
    /// Streams of this device being captured into graphs right now.
    pub(crate) captures: AtomicUsize,
    pub(crate) profiler: Profiler,
    /// Clusters of two blocks of each `wgmma` GEMM kernel (by its index in the kernel table) the
    /// device runs at once, asked of the driver on the kernel's first clustered launch.
    pub(crate) wgmma_clusters: Mutex<HashMap<usize, usize>>,
}

impl CudaDevice {
    /// The device with this ordinal, opened on first use and shared afterwards, so the module is
    /// loaded once per device per process.
    pub(crate) fn open(ordinal: usize) -> Result<Arc<CudaDevice>> {
        static OPEN: OnceLock<Mutex<Vec<Option<Arc<CudaDevice>>>>> = OnceLock::new();
        driver()?;
        let count = result::device::get_count().call("cuDeviceGetCount")? as usize;
        if ordinal >= count {
            return Err(Error::NoDevice(format!("device {ordinal} asked for, {count} present")));
        }
        let mut open = OPEN.get_or_init(|| Mutex::new(Vec::new())).lock().unwrap_or_else(|p| p.into_inner());
        if open.len() < count {
            open.resize(count, None);
        }
        if let Some(dev) = &open[ordinal] {
            return Ok(dev.clone());
        }
        let info = device_info(ordinal)?;
        let handle = result::device::get(ordinal as i32).call("cuDeviceGet")?;
        // SAFETY: `handle` is valid; once the device is open the retained primary context is never
        // released (it lives as long as the process, like the runtime API's).
        let raw =
            RawContext(unsafe { result::primary_ctx::retain(handle) }.call("cuDevicePrimaryCtxRetain")?);
        let modules = KernelModules::new(info.compute_capability);
        let dev = Arc::new(CudaDevice {
            info,
            raw,
            modules,
            pool: MemoryPool::new(),
            captures: AtomicUsize::new(0),
            profiler: Profiler::new(),
            wgmma_clusters: Mutex::new(HashMap::new()),
        });
        open[ordinal] = Some(dev.clone());
        Ok(dev)
    }

    /// Make this device's context current on the calling thread (one `cuCtxGetCurrent` when it
    /// already is). Every entry that touches the driver calls it.
    pub(crate) fn bind(&self) -> Result<()> {
        bind(self.raw)
    }

    /// Whether a stream of this device is being captured (device-wide waits would break it).
    pub(crate) fn capturing(&self) -> bool {
        self.captures.load(Ordering::Acquire) > 0
    }

    /// (free, total) device memory in bytes.
    pub(crate) fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        result::mem_get_info().call("cuMemGetInfo")
    }
}

/// Asks the driver which context is current rather than caching it per thread: other code on the
/// thread (another CUDA library, cudarc, the runtime API) may make its own context current between
/// two of our calls, and a stale cache would send allocations and copies to that context.
fn bind(ctx: RawContext) -> Result<()> {
    if result::ctx::get_current().call("cuCtxGetCurrent")? != Some(ctx.0) {
        // SAFETY: `ctx` is a retained primary context.
        unsafe { result::ctx::set_current(ctx.0) }.call("cuCtxSetCurrent")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn v1(ms: *mut f32, _: sys::CUevent, _: sys::CUevent) -> sys::CUresult {
        // SAFETY: the test passes a valid pointer.
        unsafe { *ms = 1.0 };
        sys::CUresult::CUDA_SUCCESS
    }

    unsafe extern "C" fn v2(ms: *mut f32, _: sys::CUevent, _: sys::CUevent) -> sys::CUresult {
        // SAFETY: as above.
        unsafe { *ms = 2.0 };
        sys::CUresult::CUDA_SUCCESS
    }

    fn called(f: Option<ElapsedFn>) -> f32 {
        let mut ms = 0.0;
        // SAFETY: both test entries only write `ms`.
        unsafe { f.expect("an entry point")(&mut ms, std::ptr::null_mut(), std::ptr::null_mut()) };
        ms
    }

    #[test]
    fn event_timing_falls_back_to_the_original_entry_point() {
        let old_driver = |name: &[u8]| (name == b"cuEventElapsedTime\0").then_some(v1 as ElapsedFn);
        assert_eq!(called(resolve_elapsed(old_driver)), 1.0);
        let new_driver =
            |name: &[u8]| Some(if name == b"cuEventElapsedTime_v2\0" { v2 } else { v1 } as ElapsedFn);
        assert_eq!(called(resolve_elapsed(new_driver)), 2.0);
        assert!(resolve_elapsed(|_| None).is_none());
    }
}
