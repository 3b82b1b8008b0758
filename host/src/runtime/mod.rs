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
fn gpu_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Device 0 for one of the library's own GPU tests, with the lock that keeps them apart; `None`
/// (said on stdout) without a device, a panic under `FERROCUDA_REQUIRE_GPU=1`.
#[cfg(test)]
pub(crate) fn test_gpu() -> Option<(context::Context, std::sync::MutexGuard<'static, ()>)> {
    let serial = gpu_test_lock();
    match context::Context::cuda(0) {
        Ok(ctx) => Some((ctx, serial)),
        Err(e) if std::env::var("FERROCUDA_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("FERROCUDA_REQUIRE_GPU=1 but no CUDA device: {e}")
        }
        Err(_) => {
            println!("skipped (no CUDA device)");
            None
        }
    }
}
