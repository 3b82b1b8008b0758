//! The crate's one error type. Every failure names the operation (and the shapes where they matter).
use crate::tensor::DType;
use cudarc::driver::DriverError;

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong; user input never panics.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("CUDA driver call {call} failed: {source}")]
    Driver {
        call: &'static str,
        #[source]
        source: DriverError,
    },
    #[error("kernel {kernel} failed to launch (grid {grid:?}, block {block:?}, {shared_bytes} B shared): {source}")]
    Launch {
        kernel: &'static str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        #[source]
        source: DriverError,
    },
    #[error("{op}: out of memory: asked for {requested} bytes, {free} bytes free on the device")]
    OutOfMemory { op: &'static str, requested: usize, free: usize },
    #[error("{op}: shape mismatch: {lhs:?} vs {rhs:?}")]
    ShapeMismatch { op: &'static str, lhs: Vec<usize>, rhs: Vec<usize> },
    #[error("{op}: dtype mismatch: {lhs:?} vs {rhs:?}")]
    DTypeMismatch { op: &'static str, lhs: DType, rhs: DType },
    #[error("{op}: dtype {dtype:?} is not supported yet")]
    UnsupportedDType { op: &'static str, dtype: DType },
    #[error("{op}: tensors live on different devices or streams: {lhs} vs {rhs}")]
    DeviceMismatch { op: &'static str, lhs: String, rhs: String },
    #[error("{op}: size overflow for shape {shape:?}")]
    SizeOverflow { op: &'static str, shape: Vec<usize> },
    #[error("{op}: {reason} (shape {shape:?})")]
    InvalidArgument { op: &'static str, shape: Vec<usize>, reason: String },
    #[error("kernel {kernel} is in module {module}, which this device does not load (built without it, or an sm_90a module on another GPU)")]
    KernelUnavailable { kernel: &'static str, module: &'static str },
    #[error("embedded kernel module {module} is corrupt: {reason}")]
    CorruptModule { module: &'static str, reason: String },
    /// An op that a CUDA graph capture cannot record (a host synchronisation, a read-back, an
    /// upload from pageable memory, ...) was called on a stream while it was being captured.
    #[error("{op} cannot run while its stream is being captured into a CUDA graph (it would synchronise with the host, or a replay would read host memory that is gone); do it before the capture or between replays")]
    NotCapturable { op: &'static str },
    #[error("CUPTI call {call} failed: {reason}")]
    Profiler { call: &'static str, reason: String },
    #[error("{op}: {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// An op inside a layer failed; `layer` describes the layer (type and sizes).
    #[error("{layer}: {source}")]
    Layer { layer: String, source: Box<Error> },
}

/// Names the driver call that a `DriverError` came from.
pub(crate) trait DriverResultExt<T> {
    fn call(self, call: &'static str) -> Result<T>;
}

impl<T> DriverResultExt<T> for std::result::Result<T, DriverError> {
    fn call(self, call: &'static str) -> Result<T> {
        self.map_err(|source| Error::Driver { call, source })
    }
}
