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

/// Held by each of the library's own GPU tests, which the test harness runs on parallel threads:
/// a capture on one thread breaks when another thread's test frees device memory or destroys a
/// stream meanwhile (implicit device synchronisation).
#[cfg(test)]
pub(crate) fn gpu_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
