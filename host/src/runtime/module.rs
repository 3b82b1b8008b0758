//! The embedded PTX module: loaded once per device, kernel handles cached by name.
use super::error::{DriverResultExt, Result};
use cudarc::driver::{result, sys};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The PTX that `build.rs` built from `gpu-kernels/`.
pub const KERNELS_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"));

#[derive(Clone, Copy)]
struct RawModule(sys::CUmodule);
#[derive(Clone, Copy)]
pub(crate) struct RawFunction(pub(crate) sys::CUfunction);
// SAFETY: module and function handles are immutable driver objects usable from any thread.
unsafe impl Send for RawModule {}
// SAFETY: as above.
unsafe impl Sync for RawModule {}
// SAFETY: as above.
unsafe impl Send for RawFunction {}
// SAFETY: as above.
unsafe impl Sync for RawFunction {}

pub(crate) struct KernelModule {
    module: RawModule,
    functions: Mutex<HashMap<&'static str, RawFunction>>,
    pub(crate) load_time: Duration,
}

impl KernelModule {
    /// JIT-load the PTX into the current context.
    pub(crate) fn load() -> Result<Self> {
        let started = Instant::now();
        let image = CString::new(KERNELS_PTX).expect("PTX text has no NUL byte");
        // SAFETY: `image` is a NUL-terminated PTX string that outlives the call.
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }.call("cuModuleLoadData")?;
        Ok(Self {
            module: RawModule(module),
            functions: Mutex::new(HashMap::new()),
            load_time: started.elapsed(),
        })
    }

    /// The kernel called `name` (an `.entry` of the PTX).
    pub(crate) fn function(&self, name: &'static str) -> Result<RawFunction> {
        let mut cache = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = cache.get(name) {
            return Ok(*f);
        }
        let cname = CString::new(name).expect("kernel names have no NUL byte");
        // SAFETY: the module is loaded and never unloaded.
        let f = RawFunction(
            unsafe { result::module::get_function(self.module.0, cname) }.call("cuModuleGetFunction")?,
        );
        cache.insert(name, f);
        Ok(f)
    }
}
