//! CUDA devices: discovery, properties, and the per-device state every context on it shares
//! (primary context, kernel module, memory pool).
use super::error::{DriverResultExt, Error, Result};
use super::module::KernelModules;
use super::pool::MemoryPool;
use cudarc::driver::{result, sys};
use std::cell::Cell;
use std::fmt;
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
        result::init().map_err(|e| format!("cuInit failed: {e}"))
    })
    .clone()
    .map_err(Error::NoDevice)
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
        // SAFETY: `handle` is valid; the retained primary context is never released (it lives as
        // long as the process, like the runtime API's).
        let raw =
            RawContext(unsafe { result::primary_ctx::retain(handle) }.call("cuDevicePrimaryCtxRetain")?);
        bind(raw)?;
        let modules = KernelModules::load(info.compute_capability)?;
        let dev = Arc::new(CudaDevice { info, raw, modules, pool: MemoryPool::new() });
        open[ordinal] = Some(dev.clone());
        Ok(dev)
    }

    /// Make this device's context current on the calling thread (cheap when it already is).
    pub(crate) fn bind(&self) -> Result<()> {
        bind(self.raw)
    }

    /// (free, total) device memory in bytes.
    pub(crate) fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        result::mem_get_info().call("cuMemGetInfo")
    }
}

fn bind(ctx: RawContext) -> Result<()> {
    thread_local!(static CURRENT: Cell<usize> = const { Cell::new(0) });
    if CURRENT.get() != ctx.0 as usize {
        // SAFETY: `ctx` is a retained primary context.
        unsafe { result::ctx::set_current(ctx.0) }.call("cuCtxSetCurrent")?;
        CURRENT.set(ctx.0 as usize);
    }
    Ok(())
}
