//! Typed kernel handles, generated from `gpu-kernels/src/kernels.rs` (the table the kernel crate
//! checks its kernels against), and their launch: the one `unsafe` call into the driver.
//!
//! `kernels::add_f32` is a [`Kernel`] whose argument tuple is
//! `(DevPtr<f32>, DevPtr<f32>, DevPtrMut<f32>, usize)`: a call site that passes a wrong type, a
//! wrong count, or a pointer of the wrong element type does not compile.
use super::capture::{Access, Footprint, NodeKind};
use super::error::{DriverResultExt, Error, Result};
use super::launch::LaunchConfig;
use super::module::Function;
use super::profiler::ProfiledKind;
use super::stream::Stream;
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::marker::PhantomData;

/// Shared memory (static and dynamic together) a block gets without opting in.
const DEFAULT_SHARED_LIMIT: usize = 48 * 1024;
/// Blocks a cluster may have without the non-portable opt-in.
const PORTABLE_CLUSTER: u32 = 8;

/// Element types a kernel's pointers may point to.
pub trait DeviceElement: Copy + 'static {}
impl DeviceElement for f32 {}
impl DeviceElement for u16 {}
impl DeviceElement for u8 {}
impl DeviceElement for u32 {}
impl DeviceElement for u64 {}

/// A device address a kernel reads through (`*const T` in its signature); 0 is null.
#[repr(transparent)]
pub struct DevPtr<T> {
    addr: u64,
    elem: PhantomData<fn() -> T>,
}

/// A device address a kernel writes through (`*mut T` in its signature); 0 is null.
#[repr(transparent)]
pub struct DevPtrMut<T> {
    addr: u64,
    elem: PhantomData<fn() -> T>,
}

macro_rules! device_pointer {
    ($($ptr:ident),*) => {$(
        impl<T> Clone for $ptr<T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $ptr<T> {}
        impl<T: DeviceElement> $ptr<T> {
            /// The pointer to device address `addr` (memory of this process's device buffers).
            pub(crate) fn new(addr: u64) -> Self {
                Self { addr, elem: PhantomData }
            }

            /// The pointer `elems` elements further; null stays null.
            pub(crate) fn offset(self, elems: usize) -> Self {
                if self.addr == 0 {
                    return self;
                }
                Self::new(self.addr + (elems * std::mem::size_of::<T>()) as u64)
            }
        }
    )*};
}
device_pointer!(DevPtr, DevPtrMut);

impl<T: DeviceElement> DevPtr<T> {
    /// The null pointer, for optional inputs (a kernel checks for 0 before reading).
    pub(crate) fn null() -> Self {
        Self::new(0)
    }
}

impl<T: DeviceElement> DevPtrMut<T> {
    /// The null pointer, for optional outputs (a kernel checks for 0 before writing).
    pub(crate) fn null() -> Self {
        Self::new(0)
    }
}

impl<T: DeviceElement> From<DevPtrMut<T>> for DevPtr<T> {
    fn from(p: DevPtrMut<T>) -> Self {
        DevPtr::new(p.addr)
    }
}

/// Types a kernel argument may have on the host: each has the size, alignment and bits of the
/// kernel parameter it stands for.
///
/// # Safety
/// Implementors are plain data with exactly the layout of a PTX kernel parameter of their type.
pub unsafe trait DeviceArg: Copy {
    /// The memory the kernel reaches through this argument (pointers only).
    fn access(&self) -> Option<Access> {
        None
    }
}
// SAFETY: scalars are passed by value with their own layout; the pointers are `repr(transparent)`
// over a u64, the layout of a 64-bit PTX address.
unsafe impl DeviceArg for f32 {}
// SAFETY: as above.
unsafe impl DeviceArg for u32 {}
// SAFETY: as above.
unsafe impl DeviceArg for u64 {}
// SAFETY: as above (usize is 64-bit on the host and on nvptx64).
unsafe impl DeviceArg for usize {}
// SAFETY: `repr(C, align(8))` over u64s, the layout of the kernel's by-value `.param` array.
unsafe impl DeviceArg for crate::shapes::ParamWords {}
// SAFETY: `repr(C, align(16))` over u64s, the layout of the kernel's by-value `.param` array
// (build.rs raises its PTX alignment to 64; the driver places it by the kernel's own layout).
unsafe impl DeviceArg for crate::shapes::TensorMaps {}
// SAFETY: as above.
unsafe impl<T: DeviceElement> DeviceArg for DevPtr<T> {
    fn access(&self) -> Option<Access> {
        (self.addr != 0).then(|| Access::read(self.addr))
    }
}
// SAFETY: as above.
unsafe impl<T: DeviceElement> DeviceArg for DevPtrMut<T> {
    fn access(&self) -> Option<Access> {
        (self.addr != 0).then(|| Access::written(self.addr))
    }
}

/// The host type of a kernel parameter type of `kernels.rs`.
pub trait KernelParam {
    type Arg: DeviceArg;
}
impl<T: DeviceElement> KernelParam for *const T {
    type Arg = DevPtr<T>;
}
impl<T: DeviceElement> KernelParam for *mut T {
    type Arg = DevPtrMut<T>;
}
macro_rules! scalar_params {
    ($($t:ty),*) => {$(
        impl KernelParam for $t {
            type Arg = $t;
        }
    )*};
}
scalar_params!(f32, u32, u64, usize, crate::shapes::ParamWords, crate::shapes::TensorMaps);

/// A kernel's whole argument list: a tuple of [`DeviceArg`]s.
pub trait KernelArgs {
    /// Call `f` with the address of each argument, as the driver takes them.
    fn with_addresses<Out>(&self, f: impl FnOnce(&mut [*mut c_void]) -> Out) -> Out;
    /// The non-null pointers among the arguments, reads and writes.
    fn accesses(&self) -> Vec<Access>;
}

macro_rules! kernel_args_for_tuples {
    ($first:ident $($rest:ident)*) => {
        kernel_args_for_tuples!(@impl $first $($rest)*);
        kernel_args_for_tuples!($($rest)*);
    };
    () => {};
    (@impl $($t:ident)+) => {
        impl<$($t: DeviceArg),+> KernelArgs for ($($t,)+) {
            #[allow(non_snake_case)]
            fn with_addresses<Out>(&self, f: impl FnOnce(&mut [*mut c_void]) -> Out) -> Out {
                let ($($t,)+) = self;
                f(&mut [$($t as *const $t as *mut c_void),+])
            }
            #[allow(non_snake_case)]
            fn accesses(&self) -> Vec<Access> {
                let ($($t,)+) = self;
                [$($t.access()),+].into_iter().flatten().collect()
            }
        }
    };
}
kernel_args_for_tuples!(A B C D E F G H I J K L M N O P Q R S T U V W X);

/// What identifies a kernel at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    pub(crate) name: &'static str,
    /// Index into `kernels::MODULES`.
    pub(crate) module: usize,
    /// Index among all kernels of the table (the per-device function cache's slot).
    pub(crate) index: usize,
    /// Whether the kernel reaches memory through addresses it reads from device memory (a
    /// parameter named `slots` or `maps`), not only through its pointer arguments.
    pub(crate) indirect: bool,
}

/// A kernel of the embedded modules, launched with arguments of type `A`.
pub struct Kernel<A> {
    pub(crate) info: KernelInfo,
    args: PhantomData<fn(A)>,
}

impl<A> Clone for Kernel<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Kernel<A> {}

impl<A: KernelArgs> Kernel<A> {
    pub(crate) const fn new(name: &'static str, module: usize, index: usize, indirect: bool) -> Self {
        Self { info: KernelInfo { name, module, index, indirect }, args: PhantomData }
    }

    /// Launch on `stream`.
    ///
    /// # Safety
    /// Every pointer in `args` refers to device memory of `stream`'s device, valid for what the
    /// kernel reads and writes given the other arguments, and stays allocated until the kernel
    /// finishes (buffers return to the stream-ordered pool, so holding them until this call
    /// returns suffices); the config satisfies what the kernel's documentation asks of its launch
    /// shape.
    pub unsafe fn launch(&self, stream: &Stream, cfg: LaunchConfig, args: A) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.launch_clustered(stream, cfg, 1, args) }
    }

    /// Launch on `stream` in clusters of `cluster` blocks along x (1: a plain launch).
    ///
    /// # Safety
    /// As [`Kernel::launch`]; `cfg.grid.0` is a multiple of `cluster`, and the kernel expects
    /// clusters of that size.
    pub unsafe fn launch_clustered(
        &self,
        stream: &Stream,
        cfg: LaunchConfig,
        cluster: u32,
        args: A,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.launch_with(stream, (cfg, cluster), args, None) }
    }

    /// Launch a kernel that reaches memory through addresses in device tables (`slots`), naming
    /// every address it reaches that way in `reached`: a capture orders it by those and its
    /// pointer arguments, instead of after everything before it.
    ///
    /// # Safety
    /// As [`Kernel::launch`]; `reached` holds every device address the kernel reads or writes
    /// through its tables (an allocation's any address stands for the whole allocation), the
    /// written ones marked.
    pub unsafe fn launch_reaching(
        &self,
        stream: &Stream,
        cfg: LaunchConfig,
        args: A,
        reached: &[Access],
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.launch_with(stream, (cfg, 1), args, Some(reached)) }
    }

    /// # Safety
    /// As [`Kernel::launch_clustered`] and, with `reached`, [`Kernel::launch_reaching`].
    unsafe fn launch_with(
        &self,
        stream: &Stream,
        (cfg, cluster): (LaunchConfig, u32),
        args: A,
        reached: Option<&[Access]>,
    ) -> Result<()> {
        // What the capture orders by; outside one nothing reads it.
        let accesses = match (stream.capturing(), self.info.indirect, reached) {
            (false, ..) | (true, true, None) => Vec::new(),
            (true, _, reached) => [args.accesses().as_slice(), reached.unwrap_or(&[])].concat(),
        };
        let footprint = if self.info.indirect && reached.is_none() {
            Footprint::Opaque
        } else {
            Footprint::Direct(&accesses)
        };
        args.with_addresses(|addresses| {
            // SAFETY: forwarded from this function's contract; the addresses point into `args`,
            // which outlives the call, and their types are the table's, which the kernel build
            // checked against the kernel.
            unsafe { launch_raw(stream, self.info, cfg, cluster, footprint, addresses) }
        })
    }

    /// How many clusters of `cluster` blocks of the launch shape `cfg` (its grid ignored) the
    /// device runs at once (`cuOccupancyMaxActiveClusters`): clusters beyond it wait for a
    /// free set of SMs.
    pub fn max_active_clusters(&self, stream: &Stream, cfg: LaunchConfig, cluster: u32) -> Result<usize> {
        let f = opt_in(stream, self.info, cfg, cluster)?;
        let mut attribute = [cluster_attribute(cluster)];
        let config = driver_config(stream, cfg, &mut attribute);
        let mut clusters = 0;
        // SAFETY: `f` is a live kernel handle; `config` and the attribute it points to live
        // across the call, which only writes `clusters`.
        unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, f.raw.0, &config) }
            .result()
            .call("cuOccupancyMaxActiveClusters")?;
        Ok(clusters.max(0) as usize)
    }
}

/// The launch attribute asking for clusters of `cluster` blocks along x.
fn cluster_attribute(cluster: u32) -> sys::CUlaunchAttribute {
    // SAFETY: plain data; all zeros is a valid value of every field.
    let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute.value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: cluster, y: 1, z: 1 };
    attribute
}

/// The launch attribute letting a kernel start while its stream predecessor's last blocks run
/// (programmatic dependent launch; the kernel waits for it with `griddepcontrol.wait`).
fn dependent_attribute() -> sys::CUlaunchAttribute {
    // SAFETY: plain data; all zeros is a valid value of every field.
    let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    attribute
}

/// `cuLaunchKernelEx`'s description of the launch `cfg` on `stream` with `attributes`.
fn driver_config(
    stream: &Stream,
    cfg: LaunchConfig,
    attributes: &mut [sys::CUlaunchAttribute],
) -> sys::CUlaunchConfig {
    sys::CUlaunchConfig {
        gridDimX: cfg.grid.0,
        gridDimY: cfg.grid.1,
        gridDimZ: cfg.grid.2,
        blockDimX: cfg.block.0,
        blockDimY: cfg.block.1,
        blockDimZ: cfg.block.2,
        sharedMemBytes: cfg.shared_bytes,
        hStream: stream.raw(),
        attrs: attributes.as_mut_ptr(),
        numAttrs: attributes.len() as u32,
    }
}

/// The kernel's handle in the stream's context, opted in to `cfg`'s shared memory and clusters of
/// `cluster` blocks.
fn opt_in(stream: &Stream, kernel: KernelInfo, cfg: LaunchConfig, cluster: u32) -> Result<&Function> {
    let device = &stream.device;
    device.bind()?;
    let f = device.modules.function(kernel)?;
    // Static and dynamic shared memory together past 48 KiB only when the kernel opts in.
    if cfg.shared_bytes > 0 && cfg.shared_bytes as usize + f.static_shared > DEFAULT_SHARED_LIMIT {
        f.allow_dynamic_shared(cfg.shared_bytes)?;
    }
    if cluster > PORTABLE_CLUSTER {
        f.allow_non_portable_clusters()?;
    }
    Ok(f)
}

/// # Safety
/// As [`Kernel::launch_clustered`], with `args` the addresses of arguments of the kernel's types.
unsafe fn launch_raw(
    stream: &Stream,
    kernel: KernelInfo,
    cfg: LaunchConfig,
    cluster: u32,
    footprint: Footprint<'_>,
    args: &mut [*mut c_void],
) -> Result<()> {
    let f = opt_in(stream, kernel, cfg, cluster)?;
    let kind = || ProfiledKind::Kernel {
        name: kernel.name,
        grid: cfg.grid,
        block: cfg.block,
        shared_bytes: cfg.shared_bytes,
    };
    // Early starts pay where a kernel is mostly its launch gap: grids of at most a block an SM.
    // A larger grid's early blocks wait on whichever SMs its predecessor frees first, and ran
    // slower there (sum_rows (4096, 4096) 0.030 -> 0.038 ms, softmax (1024, 768) 0.008 ->
    // 0.011 ms back to back; docs/perf-notes.md).
    let blocks = cfg.grid.0 as u64 * cfg.grid.1 as u64 * cfg.grid.2 as u64;
    let dependent = f.dependent && blocks <= stream.device.info.sm_count as u64;
    stream.profiled(kind, (footprint, NodeKind::Kernel { programmatic: dependent }), || {
        let mut attributes = [cluster_attribute(cluster), dependent_attribute()];
        let wanted = match (cluster > 1, dependent) {
            (false, false) => &mut attributes[..0],
            (true, false) => &mut attributes[..1],
            (false, true) => &mut attributes[1..],
            (true, true) => &mut attributes[..],
        };
        let launched = if wanted.is_empty() {
            // SAFETY: forwarded from this function's contract; `f` is the kernel's live handle
            // in the stream's context.
            unsafe {
                result::launch_kernel(f.raw.0, cfg.grid, cfg.block, cfg.shared_bytes, stream.raw(), args)
            }
        } else {
            let config = driver_config(stream, cfg, wanted);
            // SAFETY: forwarded from this function's contract; `f` is the kernel's live handle
            // in the stream's context; `config` and its attributes live across the call; a
            // dependent kernel waits for its predecessor before touching memory (the build
            // checked it for every kernel it marks).
            unsafe { sys::cuLaunchKernelEx(&config, f.raw.0, args.as_mut_ptr(), std::ptr::null_mut()) }
                .result()
        };
        launched.map_err(|source| Error::Launch {
            kernel: kernel.name,
            grid: cfg.grid,
            block: cfg.block,
            shared_bytes: cfg.shared_bytes,
            source,
        })
    })
}

/// The constants of one signature's kernels, one at a time (the argument type cannot be repeated
/// inside the repetition of names).
macro_rules! kernel_constants {
    ($module:ident; $args:ty; $indirect:expr; $first:ident $($rest:ident)*) => {
        #[allow(non_upper_case_globals, dead_code)]
        pub const $first: crate::runtime::kernel::Kernel<$args> = crate::runtime::kernel::Kernel::new(
            stringify!($first),
            ModuleIndex::$module as usize,
            KernelIndex::$first as usize,
            $indirect,
        );
        kernel_constants!($module; $args; $indirect; $($rest)*);
    };
    ($module:ident; $args:ty; $indirect:expr;) => {};
}

/// Whether a kernel with these parameter names reads device addresses from memory: by the
/// table's convention (`gpu-kernels/src/kernels.rs`), a parameter named `slots` (optimizer
/// tensor tables) or `maps` (TMA tensor maps).
pub(crate) const fn reaches_through_tables(params: &[&str]) -> bool {
    const fn same(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }
    let mut i = 0;
    while i < params.len() {
        if same(params[i], "slots") || same(params[i], "maps") {
            return true;
        }
        i += 1;
    }
    false
}

/// Reads `kernels.rs` into typed [`Kernel`] constants, `MODULES` and `KERNEL_COUNT`.
macro_rules! kernel_table {
    ($(module $module:ident($feature:literal, $arch:ident) {
        $($($path:ident)::+ {
            $([$($name:ident),+ $(,)?]($($arg:ident: $ty:ty),* $(,)?);)*
        })*
    })*) => {
        /// Each module's name and target (`portable` or `sm_90a`), in table order.
        pub(crate) const MODULES: &[(&str, &str)] = &[$((stringify!($module), stringify!($arch))),*];

        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        enum ModuleIndex { $($module,)* }
        #[allow(non_camel_case_types)]
        enum KernelIndex { $($($($($name,)+)*)*)* Count }
        /// Kernels in the table.
        pub(crate) const KERNEL_COUNT: usize = KernelIndex::Count as usize;
        /// Each kernel's module index and name, in table order.
        #[cfg(test)]
        pub(crate) const KERNEL_NAMES: &[(usize, &str)] =
            &[$($($($((ModuleIndex::$module as usize, stringify!($name)),)+)*)*)*];

        $($($(
            kernel_constants!(
                $module;
                ($(<$ty as crate::runtime::kernel::KernelParam>::Arg,)*);
                crate::runtime::kernel::reaches_through_tables(&[$(stringify!($arg)),*]);
                $($name)+
            );
        )*)*)*
    };
}

/// One op's kernels for f32, f16 and bf16 tensors (the 16-bit ones take u16 buffers).
pub(crate) struct ByDType<F, H> {
    pub f32: Kernel<F>,
    pub f16: Kernel<H>,
    pub bf16: Kernel<H>,
}

/// `by_dtype!(add_f32, add_f16, add_bf16)`: the [`ByDType`] table of three kernels of `kernels`.
macro_rules! by_dtype {
    ($f32:ident, $f16:ident, $bf16:ident) => {
        crate::runtime::kernel::ByDType {
            f32: crate::kernels::$f32,
            f16: crate::kernels::$f16,
            bf16: crate::kernels::$bf16,
        }
    };
}

/// `launch_by_dtype!(table, dtype, |k| unsafe { k.launch(...) })`: the launch expression is
/// written once and type-checked for each dtype's kernel (each infers its own pointer types).
macro_rules! launch_by_dtype {
    ($table:expr, $dtype:expr, |$k:ident| $launch:expr) => {{
        let table = &$table;
        match $dtype {
            crate::tensor::DType::F32 => {
                let $k = &table.f32;
                $launch
            }
            crate::tensor::DType::F16 => {
                let $k = &table.f16;
                $launch
            }
            crate::tensor::DType::BF16 => {
                let $k = &table.bf16;
                $launch
            }
        }
    }};
}
