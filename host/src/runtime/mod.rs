//! The host runtime: devices, streams and events, the memory pool, the kernel module, launches,
//! the profiler.
pub(crate) mod capture;
pub(crate) mod context;
pub(crate) mod cupti;
pub(crate) mod device;
pub(crate) mod error;
pub(crate) mod graph;
#[macro_use]
pub(crate) mod kernel;
pub(crate) mod launch;
pub(crate) mod module;
pub(crate) mod pool;
pub(crate) mod profiler;
pub(crate) mod stream;
