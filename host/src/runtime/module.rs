//! The embedded PTX modules: one loaded per device, kernel handles cached by name.
//!
//! Devices of compute capability exactly 9.0 (H100/H200) load the sm_90a module, which holds
//! every kernel plus the Hopper-only ones (`wgmma`, TMA); other devices, or any device when
//! `FERROCUDA_DISABLE_SM90A=1`, load the portable one.
use super::error::{DriverResultExt, Result};
use cudarc::driver::{result, sys};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The PTX that `build.rs` built from `gpu-kernels/`.
pub const KERNELS_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"));
/// The same kernels plus the Hopper-only ones, for `.target sm_90a` (empty when the build was
/// given a prebuilt PTX without one).
pub const KERNELS_PTX_SM90A: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels_sm90a.ptx"));

/// Set to `1` to keep H100s on the portable module (and so the mma.sync GEMMs).
pub const DISABLE_SM90A_VAR: &str = "FERROCUDA_DISABLE_SM90A";

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
    /// Whether this is the sm_90a module (the `wgmma` kernels exist).
    pub(crate) sm90a: bool,
}

impl KernelModule {
    /// JIT-load the PTX for a device of `compute_capability` into the current context.
    pub(crate) fn load(compute_capability: (u32, u32)) -> Result<Self> {
        let started = Instant::now();
        let sm90a = compute_capability == (9, 0)
            && !KERNELS_PTX_SM90A.is_empty()
            && std::env::var(DISABLE_SM90A_VAR).map_or(true, |v| v != "1");
        let ptx = if sm90a { KERNELS_PTX_SM90A } else { KERNELS_PTX };
        let image = CString::new(ptx).expect("PTX text has no NUL byte");
        // SAFETY: `image` is a NUL-terminated PTX string that outlives the call.
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }.call("cuModuleLoadData")?;
        Ok(Self {
            module: RawModule(module),
            functions: Mutex::new(HashMap::new()),
            load_time: started.elapsed(),
            sm90a,
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
