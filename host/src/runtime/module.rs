//! The embedded kernel modules (one per `module` of `gpu-kernels/src/kernels.rs`), each loaded
//! into a device's context at the first launch of one of its kernels, and the per-device cache of
//! kernel handles.
//!
//! Each module is embedded as a cubin (machine code, assembled by ptxas at build time) and, for the
//! portable ones, as deflated PTX. A device loads the cubin when its architecture runs it (same
//! major version and at least the cubin's minor; an `sm_90a` cubin only on compute capability
//! 9.0): no compilation at run time. Elsewhere the driver JIT-compiles the PTX (tens of seconds the
//! first time on a machine, then cached by the driver; said once on stderr). The sm_90a modules
//! (wgmma, TMA) are used only on compute capability 9.0 and not with `FERROCUDA_DISABLE_SM90A=1`.
//! Opening a device loads nothing (a cubin takes ~0.5 ms to load, all of them ~10 ms on an H100),
//! and neither does a stream capture: a launch recorded into a graph loads its module like any
//! other (relaxed capture mode allows it; `tests/graphs.rs` captures a module's first use).
//! Kernels that begin with `grid_dependency_sync` (listed by the build, which checks that nothing
//! precedes it) launch as programmatic dependents on compute capability 9.0 and later when their
//! grid has at most a block an SM: the driver starts their blocks as their predecessor's last
//! ones run, which hides most of the gap between two small kernels in a row.
use super::error::{DriverResultExt, Error, Result};
use super::kernel::KernelInfo;
use crate::kernels::{KERNEL_COUNT, MODULES};
use cudarc::driver::{result, sys};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

/// Set to `1` to keep H100s on the portable modules (and so the mma.sync GEMMs).
pub const DISABLE_SM90A_VAR: &str = "FERROCUDA_DISABLE_SM90A";

/// Set to `1` to launch every kernel after its stream predecessor has finished (no programmatic
/// dependent launches; for comparisons).
pub const DISABLE_DEPENDENT_LAUNCH_VAR: &str = "FERROCUDA_DISABLE_PDL";

/// One module as `build.rs` embedded it.
pub(crate) struct EmbeddedModule {
    pub name: &'static str,
    /// The target it was built for, e.g. `sm_90` or `sm_90a`.
    pub arch: &'static str,
    /// Empty when the build found no ptxas; deflated where `cubin_len` is not 0.
    pub cubin: &'static [u8],
    /// The cubin's length where `cubin` holds it deflated (the large modules), else 0.
    pub cubin_len: usize,
    /// Empty for sm_90a modules.
    pub ptx_deflated: &'static [u8],
    pub ptx_len: usize,
}

include!(concat!(env!("OUT_DIR"), "/modules.rs"));

/// How a device got its kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleSource {
    /// Machine code built for this architecture: no compilation at load.
    Cubin,
    /// PTX compiled by the driver (or taken from its cache).
    JitPtx,
}

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

/// A kernel's handle and what its launches need to know about its shared memory, read or set once
/// per device rather than on every launch.
pub(crate) struct Function {
    pub(crate) raw: RawFunction,
    /// Its static shared memory (`CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`).
    pub(crate) static_shared: usize,
    /// May be launched as a programmatic dependent of its stream predecessor (compute capability
    /// 9.0 and later; the launch does so for grids of at most a block an SM): its blocks may start
    /// while that kernel's last ones run, and wait (`griddepcontrol.wait`, which the build found
    /// before any memory access) until it has finished.
    pub(crate) dependent: bool,
    /// The dynamic shared memory it may use, as last raised by [`Function::allow_dynamic_shared`]
    /// (0: the driver's default, which needs no opt-in below the 48 KiB total).
    opted_in: AtomicU32,
    /// Serialises raises, so that a smaller request never lowers a larger one another thread set
    /// (and relies on) in between.
    raising: Mutex<()>,
    /// Clusters past the portable 8 blocks are allowed (set once, never cleared).
    non_portable_clusters: AtomicBool,
}

impl Function {
    /// Let launches take `bytes` of dynamic shared memory (`cuFuncSetAttribute`), once per larger
    /// value; never lowers the limit.
    pub(crate) fn allow_dynamic_shared(&self, bytes: u32) -> Result<()> {
        if self.opted_in.load(Ordering::Acquire) >= bytes {
            return Ok(());
        }
        let _raising = self.raising.lock().unwrap_or_else(|p| p.into_inner());
        if self.opted_in.load(Ordering::Acquire) >= bytes {
            return Ok(());
        }
        // SAFETY: `raw` is a live kernel handle; the attribute only raises a limit.
        unsafe {
            result::function::set_function_attribute(
                self.raw.0,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
        }
        .call("cuFuncSetAttribute")?;
        self.opted_in.store(bytes, Ordering::Release);
        Ok(())
    }

    /// Let launches take clusters of more than 8 blocks (up to 16 on the H100), once.
    pub(crate) fn allow_non_portable_clusters(&self) -> Result<()> {
        if self.non_portable_clusters.load(Ordering::Acquire) {
            return Ok(());
        }
        // SAFETY: `raw` is a live kernel handle; the attribute only allows larger clusters, and
        // setting it twice from two threads sets the same value.
        unsafe {
            result::function::set_function_attribute(
                self.raw.0,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                1,
            )
        }
        .call("cuFuncSetAttribute")?;
        self.non_portable_clusters.store(true, Ordering::Release);
        Ok(())
    }
}

/// The modules of one device's context (loaded on first use), and its kernel handles.
pub(crate) struct KernelModules {
    /// By `MODULES` index: what this device loads for the module (`None`: a module it does not
    /// use), and the module once loaded.
    plans: Vec<Option<Plan>>,
    modules: Box<[OnceLock<RawModule>]>,
    /// Held while a module loads, so that two threads never load one twice.
    loading: Mutex<()>,
    functions: Box<[OnceLock<Function>]>,
    /// Time spent loading modules so far, ns.
    load_ns: AtomicU64,
    pub(crate) source: ModuleSource,
    /// Whether the sm_90a modules (the `wgmma` kernels) are used.
    pub(crate) sm90a: bool,
    /// Whether kernels that wait for their predecessor launch as programmatic dependents.
    dependent_launch: bool,
    compute_capability: (u32, u32),
}

/// How a device gets one module.
#[derive(Clone, Copy)]
enum Plan {
    Cubin(&'static EmbeddedModule),
    Ptx(&'static EmbeddedModule),
}

/// Whether machine code for `arch` (`sm_XY` or `sm_XYa`) runs on a device of `cc`.
fn cubin_runs_on(arch: &str, cc: (u32, u32)) -> bool {
    let Some(digits) = arch.strip_prefix("sm_") else { return false };
    let (digits, exact) = match digits.strip_suffix('a') {
        Some(d) => (d, true),
        None => (digits, false),
    };
    let Ok(v) = digits.parse::<u32>() else { return false };
    let (major, minor) = (v / 10, v % 10);
    if exact {
        cc == (major, minor)
    } else {
        cc.0 == major && cc.1 >= minor
    }
}

impl KernelModules {
    /// The modules a device of `compute_capability` uses, none loaded yet.
    pub(crate) fn new(compute_capability: (u32, u32)) -> Self {
        let sm90a_wanted =
            compute_capability == (9, 0) && std::env::var(DISABLE_SM90A_VAR).map_or(true, |v| v != "1");
        let plans: Vec<Option<Plan>> = MODULES
            .iter()
            .map(|&(name, arch)| match EMBEDDED_MODULES.iter().find(|m| m.name == name) {
                Some(_) if arch == "sm_90a" && !sm90a_wanted => None,
                Some(m) if !m.cubin.is_empty() && cubin_runs_on(m.arch, compute_capability) => {
                    Some(Plan::Cubin(m))
                }
                Some(m) if !m.ptx_deflated.is_empty() => Some(Plan::Ptx(m)),
                _ => None,
            })
            .collect();
        let source = match plans.iter().any(|p| matches!(p, Some(Plan::Ptx(_)))) {
            true => ModuleSource::JitPtx,
            false => ModuleSource::Cubin,
        };
        let sm90a = MODULES.iter().zip(&plans).any(|(&(_, arch), p)| arch == "sm_90a" && p.is_some());
        let dependent_launch = compute_capability.0 >= 9
            && std::env::var(DISABLE_DEPENDENT_LAUNCH_VAR).map_or(true, |v| v != "1");
        Self {
            modules: (0..plans.len()).map(|_| OnceLock::new()).collect(),
            plans,
            loading: Mutex::new(()),
            functions: (0..KERNEL_COUNT).map(|_| OnceLock::new()).collect(),
            load_ns: AtomicU64::new(0),
            source,
            sm90a,
            dependent_launch,
            compute_capability,
        }
    }

    /// Time spent loading modules so far.
    pub(crate) fn load_time(&self) -> Duration {
        Duration::from_nanos(self.load_ns.load(Ordering::Relaxed))
    }

    /// Module `index` of `MODULES`, loaded into the current context (the device's) if it was not.
    fn module(&self, index: usize) -> Result<Option<RawModule>> {
        let Some(plan) = self.plans[index] else { return Ok(None) };
        if let Some(m) = self.modules[index].get() {
            return Ok(Some(*m));
        }
        let _loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = self.modules[index].get() {
            return Ok(Some(*m));
        }
        let started = Instant::now();
        let raw = match plan {
            Plan::Cubin(m) => load_cubin(m)?,
            Plan::Ptx(m) => {
                jit_notice(m.arch, self.compute_capability);
                load_ptx(m)?
            }
        };
        self.load_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(Some(*self.modules[index].get_or_init(|| raw)))
    }

    /// The handle of `kernel` and its shared-memory facts, looked up once per device.
    pub(crate) fn function(&self, kernel: KernelInfo) -> Result<&Function> {
        if let Some(f) = self.functions[kernel.index].get() {
            return Ok(f);
        }
        let Some(module) = self.module(kernel.module)? else {
            return Err(Error::KernelUnavailable { kernel: kernel.name, module: MODULES[kernel.module].0 });
        };
        let cname = CString::new(kernel.name).expect("kernel names have no NUL byte");
        // SAFETY: the module is loaded and never unloaded (the device stays open for the process).
        let raw = RawFunction(
            unsafe { result::module::get_function(module.0, cname) }.call("cuModuleGetFunction")?,
        );
        // SAFETY: `raw` is a live kernel handle; the query reads one attribute.
        let static_shared = unsafe {
            result::function::get_function_attribute(
                raw.0,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
            )
        }
        .call("cuFuncGetAttribute")? as usize;
        let dependent = self.dependent_launch && DEPENDENT_LAUNCH_KERNELS.binary_search(&kernel.name).is_ok();
        let f = Function {
            raw,
            static_shared,
            dependent,
            opted_in: AtomicU32::new(0),
            raising: Mutex::new(()),
            non_portable_clusters: AtomicBool::new(false),
        };
        Ok(self.functions[kernel.index].get_or_init(|| f))
    }
}

fn jit_notice(arch: &str, cc: (u32, u32)) {
    static NOTICE: Once = Once::new();
    NOTICE.call_once(|| {
        eprintln!(
            "ferrocuda: no cubin for this GPU (sm_{}{}; built for {arch}): the driver compiles the \
             kernels' PTX now, which takes tens of seconds the first time on a machine and is then \
             cached by the driver",
            cc.0, cc.1
        )
    });
}

fn load_image(image: &[u8]) -> Result<RawModule> {
    // SAFETY: `image` is a complete cubin that outlives the call.
    Ok(RawModule(unsafe { result::module::load_data(image.as_ptr().cast()) }.call("cuModuleLoadData")?))
}

fn load_cubin(m: &EmbeddedModule) -> Result<RawModule> {
    if m.cubin_len == 0 {
        return load_image(m.cubin);
    }
    let image = miniz_oxide::inflate::decompress_to_vec_with_limit(m.cubin, m.cubin_len)
        .map_err(|e| Error::CorruptModule { module: m.name, reason: format!("{e:?}") })?;
    load_image(&image)
}

fn load_ptx(m: &EmbeddedModule) -> Result<RawModule> {
    let mut text = miniz_oxide::inflate::decompress_to_vec_with_limit(m.ptx_deflated, m.ptx_len)
        .map_err(|e| Error::CorruptModule { module: m.name, reason: format!("{e:?}") })?;
    text.push(0);
    load_image(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubins_run_on_their_major_version_and_arch_specific_ones_on_their_exact_version() {
        assert!(cubin_runs_on("sm_90", (9, 0)));
        assert!(cubin_runs_on("sm_80", (8, 6)) && cubin_runs_on("sm_80", (8, 9)));
        assert!(!cubin_runs_on("sm_86", (8, 0)));
        assert!(!cubin_runs_on("sm_90", (10, 0)) && !cubin_runs_on("sm_90", (8, 9)));
        assert!(cubin_runs_on("sm_90a", (9, 0)));
        assert!(!cubin_runs_on("sm_90a", (10, 0)) && !cubin_runs_on("sm_100a", (10, 3)));
        assert!(!cubin_runs_on("compute_90", (9, 0)));
    }

    #[test]
    fn dependent_launch_kernels_are_sorted_portable_kernels_of_the_table() {
        assert!(DEPENDENT_LAUNCH_KERNELS.windows(2).all(|w| w[0] < w[1]));
        for &k in DEPENDENT_LAUNCH_KERNELS {
            let &(module, _) = crate::kernels::KERNEL_NAMES.iter().find(|(_, n)| *n == k).expect(k);
            assert_eq!(MODULES[module].1, "portable", "{k}");
        }
        // The step kernels of small models, and the row kernels.
        for k in
            ["add_f32", "relu_f32", "adam_step_dev", "gemm_f32_tiny_nt", "softmax_f32", "layernorm_fwd_bf16"]
        {
            assert!(DEPENDENT_LAUNCH_KERNELS.contains(&k), "{k}");
        }
    }

    #[test]
    fn every_portable_module_carries_its_ptx_and_the_table_matches_the_build() {
        for &(name, arch) in MODULES {
            let Some(m) = EMBEDDED_MODULES.iter().find(|m| m.name == name) else {
                // Only the sm_90a modules may be absent (a FERROCUDA_SM other than sm_90).
                assert_eq!(arch, "sm_90a", "module {name} was not embedded");
                continue;
            };
            if arch == "portable" {
                let ptx = miniz_oxide::inflate::decompress_to_vec_with_limit(m.ptx_deflated, m.ptx_len)
                    .expect("the embedded PTX inflates");
                assert_eq!(ptx.len(), m.ptx_len);
                assert!(std::str::from_utf8(&ptx).is_ok_and(|t| t.contains(".visible .entry")), "{name}");
            } else {
                assert!(m.ptx_deflated.is_empty() && m.arch == arch, "{name}");
            }
            // A cubin, embedded as it is or deflated, is an ELF image.
            let cubin = match m.cubin_len {
                0 => m.cubin.to_vec(),
                len => miniz_oxide::inflate::decompress_to_vec_with_limit(m.cubin, len)
                    .expect("the embedded cubin inflates"),
            };
            assert!(m.cubin.is_empty() || cubin.starts_with(b"\x7fELF"), "{name}");
            assert!(
                m.cubin_len == 0 || (cubin.len() == m.cubin_len && m.cubin.len() < m.cubin_len),
                "{name}"
            );
        }
    }
}
