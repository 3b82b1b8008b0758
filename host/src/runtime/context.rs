//! `Context`: a device (CUDA or the CPU backend) and, on CUDA, the stream its work goes to.
use super::device::{driver, CudaDevice, DeviceInfo};
use super::error::{Error, Result};
use super::module::ModuleSource;
use super::pool::PoolStats;
use super::stream::{Event, PinnedBuffer, Stream};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

/// Where a context runs its work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    Cuda(DeviceInfo),
    /// The CPU backend (rayon), used when there is no CUDA device or on request.
    Cpu {
        threads: usize,
    },
}

impl Device {
    /// e.g. "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.2 GiB)" or "CPU backend (16 threads)".
    pub fn name(&self) -> String {
        self.to_string()
    }
    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cuda(info) => info.fmt(f),
            Device::Cpu { threads } => write!(f, "CPU backend ({threads} threads)"),
        }
    }
}

#[derive(Clone)]
pub(crate) enum Backend {
    Cuda(Arc<Stream>),
    Cpu,
}

/// The handle every tensor belongs to. Cheap to clone; `Send + Sync`, so one context can be
/// driven from many threads (their work is ordered on its stream).
#[derive(Clone)]
pub struct Context {
    pub(crate) backend: Backend,
    /// Whether f32 matrix products may use TF32 tensor cores (shared by the clones).
    allow_tf32: Arc<AtomicBool>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Context({})", self.label())
    }
}

impl Context {
    /// CUDA device 0 on a new stream; without a usable CUDA device, the CPU backend (said once on
    /// stderr).
    pub fn new() -> Result<Self> {
        match Self::cuda(0) {
            Ok(ctx) => Ok(ctx),
            Err(Error::NoDevice(reason)) => {
                static NOTICE: Once = Once::new();
                NOTICE.call_once(|| eprintln!("ferrocuda: no CUDA device ({reason}); using the CPU backend"));
                Ok(Self::cpu())
            }
            Err(e) => Err(e),
        }
    }

    /// CUDA device `ordinal` on a new stream; `Error::NoDevice` where there is none.
    pub fn cuda(ordinal: usize) -> Result<Self> {
        let device = CudaDevice::open(ordinal)?;
        Ok(Self::with_backend(Backend::Cuda(Stream::new(device)?)))
    }

    /// The CPU backend.
    pub fn cpu() -> Self {
        Self::with_backend(Backend::Cpu)
    }

    fn with_backend(backend: Backend) -> Self {
        Self { backend, allow_tf32: Arc::new(AtomicBool::new(false)) }
    }

    /// Let f32 matrix products on this context (and its clones) use TF32 tensor cores: about 10
    /// mantissa bits per product term instead of 23, several times the speed (PyTorch's
    /// `allow_tf32`). Off by default: exact f32.
    pub fn set_allow_tf32(&self, allow: bool) {
        self.allow_tf32.store(allow, Ordering::Relaxed);
    }

    /// Whether f32 matrix products may use TF32; see [`Context::set_allow_tf32`].
    pub fn allow_tf32(&self) -> bool {
        self.allow_tf32.load(Ordering::Relaxed)
    }

    /// Whether a CUDA device can be opened (libcuda present, at least one device).
    pub fn cuda_available() -> bool {
        driver().is_ok() && super::device::cuda_device_count() > 0
    }

    /// Another context on the same device with its own stream (work on the two may overlap).
    pub fn new_stream(&self) -> Result<Self> {
        match &self.backend {
            Backend::Cuda(s) => Ok(Self {
                backend: Backend::Cuda(Stream::new(s.device.clone())?),
                allow_tf32: Arc::new(AtomicBool::new(self.allow_tf32())),
            }),
            Backend::Cpu => Ok(Self::cpu()),
        }
    }

    pub fn device(&self) -> Device {
        match &self.backend {
            Backend::Cuda(s) => Device::Cuda(s.device.info.clone()),
            Backend::Cpu => Device::Cpu { threads: rayon::current_num_threads() },
        }
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self.backend, Backend::Cuda(_))
    }

    /// Wait until all work queued on this context has finished.
    pub fn synchronize(&self) -> Result<()> {
        match &self.backend {
            Backend::Cuda(s) => s.synchronize(),
            Backend::Cpu => Ok(()),
        }
    }

    /// Later work on this context waits for everything queued on `other` so far.
    pub fn wait_for(&self, other: &Context) -> Result<()> {
        match (&self.backend, &other.backend) {
            (Backend::Cuda(a), Backend::Cuda(b)) if Arc::ptr_eq(&a.device, &b.device) => a.wait_for(b),
            (Backend::Cpu, Backend::Cpu) => Ok(()),
            _ => Err(self.mismatch("wait_for", other)),
        }
    }

    /// An event recorded now on this context's stream (CUDA only), for timing and ordering.
    pub fn record_event(&self) -> Result<Event> {
        let stream = self.stream("record_event")?;
        stream.refuse_in_capture("record_event")?;
        Event::record(stream)
    }

    /// Record `event` (made by [`Context::record_event`] on this device) again, now, on this
    /// context's stream: timing loops reuse two events instead of creating one per launch.
    pub fn rerecord_event(&self, event: &Event) -> Result<()> {
        let stream = self.stream("rerecord_event")?;
        stream.refuse_in_capture("rerecord_event")?;
        event.record_on(stream)
    }

    /// The device's memory pool counters (CUDA only).
    pub fn pool_stats(&self) -> Option<PoolStats> {
        match &self.backend {
            Backend::Cuda(s) => Some(s.device.pool.stats()),
            Backend::Cpu => None,
        }
    }

    /// Return the pool's cached blocks to the driver (waits for the device first; refused while
    /// a stream of the device is being captured).
    pub fn trim_pool(&self) -> Result<()> {
        match &self.backend {
            Backend::Cuda(s) => s.device.pool.trim(s),
            Backend::Cpu => Ok(()),
        }
    }

    /// (free, total) bytes of device memory (CUDA only).
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        let stream = self.stream("memory_info")?;
        stream.refuse_in_capture("memory_info")?;
        stream.device.memory_info()
    }

    /// How this context's device got its kernels: prebuilt cubins, or PTX compiled by the driver
    /// (CUDA only).
    pub fn module_source(&self) -> Option<ModuleSource> {
        match &self.backend {
            Backend::Cuda(s) => Some(s.device.modules.source),
            Backend::Cpu => None,
        }
    }

    /// How long loading this device's kernel modules has taken so far (CUDA only): each is loaded
    /// at the first launch of one of its kernels.
    pub fn module_load_time(&self) -> Option<Duration> {
        match &self.backend {
            Backend::Cuda(s) => Some(s.device.modules.load_time()),
            Backend::Cpu => None,
        }
    }

    /// Whether this context's device runs the Hopper (sm_90a: `wgmma`, TMA) kernels: compute
    /// capability 9.0 and `FERROCUDA_DISABLE_SM90A` not set to 1 when the device was opened.
    pub fn uses_sm90a_kernels(&self) -> bool {
        match &self.backend {
            Backend::Cuda(s) => s.device.modules.sm90a,
            Backend::Cpu => false,
        }
    }

    /// Page-locked host memory of `len` floats for asynchronous copies (CUDA only).
    pub fn pinned(&self, len: usize) -> Result<PinnedBuffer> {
        PinnedBuffer::new(self.stream("pinned")?.device.clone(), len)
    }

    /// `Error::NotCapturable` naming `op` while this context's stream is being captured.
    pub(crate) fn refuse_in_capture(&self, op: &'static str) -> Result<()> {
        match &self.backend {
            Backend::Cuda(s) => s.refuse_in_capture(op),
            Backend::Cpu => Ok(()),
        }
    }

    pub(crate) fn stream(&self, op: &'static str) -> Result<&Arc<Stream>> {
        match &self.backend {
            Backend::Cuda(s) => Ok(s),
            Backend::Cpu => {
                Err(Error::NoDevice(format!("{op} needs a CUDA context; this one is the CPU backend")))
            }
        }
    }

    /// Whether tensors of the two contexts may meet in one op: the CPU backend, or one stream.
    pub(crate) fn same_queue(&self, other: &Context) -> bool {
        match (&self.backend, &other.backend) {
            (Backend::Cuda(a), Backend::Cuda(b)) => Arc::ptr_eq(a, b),
            (Backend::Cpu, Backend::Cpu) => true,
            _ => false,
        }
    }

    pub(crate) fn mismatch(&self, op: &'static str, other: &Context) -> Error {
        Error::DeviceMismatch { op, lhs: self.label(), rhs: other.label() }
    }

    fn label(&self) -> String {
        match &self.backend {
            Backend::Cuda(s) => format!("cuda:{} stream {:#x}", s.device.info.ordinal, s.id()),
            Backend::Cpu => "cpu".into(),
        }
    }
}
