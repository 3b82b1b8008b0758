//! Kernel launches: grid sizing from the device's properties, and the one `unsafe` call.
use super::device::DeviceInfo;
use super::error::{DriverResultExt, Error, Result};
use super::stream::Stream;
use cudarc::driver::{result, sys};

/// Dynamic shared memory a block gets without opting in.
const DEFAULT_SHARED_LIMIT: usize = 48 * 1024;
use std::ffi::c_void;

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// A 1-D grid-stride launch over `items` work items with `block` threads per block: enough
    /// blocks to cover the items, capped at `waves` full occupancies of the device (the loop
    /// covers the rest). The shape depends only on `items` and the device, never on timing.
    pub(crate) fn grid_stride(device: &DeviceInfo, items: usize, block: usize, waves: usize) -> Self {
        let resident = device.sm_count as usize * (device.max_threads_per_sm as usize / block).max(1);
        Self::covering(items.min(resident * waves * block), block)
    }

    /// One thread per work item (up to the grid's limit; kernels loop over any rest): for
    /// streaming kernels, where blocks that finish early make room for new ones.
    pub(crate) fn covering(items: usize, block: usize) -> Self {
        let blocks = items.div_ceil(block).clamp(1, i32::MAX as usize);
        Self { grid: (blocks as u32, 1, 1), block: (block as u32, 1, 1), shared_bytes: 0 }
    }
}

/// Argument list for [`launch`]: each expression must be a reference to a value whose type
/// matches the kernel's parameter (`u64` for pointers and `usize`, `u32`, `f32`).
macro_rules! kernel_args {
    ($($arg:expr),* $(,)?) => {
        [$($arg as *const _ as *mut ::std::ffi::c_void),*]
    };
}
pub(crate) use kernel_args;

/// Launch the kernel `name` of the embedded module on `stream`.
///
/// # Safety
/// `args` match the kernel's parameters in number and type, every pointer among them refers to
/// device memory that stays allocated until the kernel finishes (buffers return to the
/// stream-ordered pool, so holding them until this call returns suffices), and the config
/// satisfies what the kernel's documentation asks of its launch shape.
pub(crate) unsafe fn launch(
    stream: &Stream,
    name: &'static str,
    cfg: LaunchConfig,
    args: &mut [*mut c_void],
) -> Result<()> {
    let device = &stream.device;
    device.bind()?;
    let f = device.module.function(name)?;
    if cfg.shared_bytes as usize > DEFAULT_SHARED_LIMIT {
        // Blocks get more than 48 KiB of dynamic shared memory only when the kernel opts in.
        // SAFETY: `f` is a live kernel handle; the attribute only raises a limit.
        unsafe {
            result::function::set_function_attribute(
                f.0,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                cfg.shared_bytes as i32,
            )
        }
        .call("cuFuncSetAttribute")?;
    }
    result::launch_kernel(f.0, cfg.grid, cfg.block, cfg.shared_bytes, stream.raw(), args).map_err(|source| {
        Error::Launch {
            kernel: name,
            grid: cfg.grid,
            block: cfg.block,
            shared_bytes: cfg.shared_bytes,
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::context::Context;

    #[test]
    fn a_refused_launch_names_the_kernel() {
        let ctx = match Context::cuda(0) {
            Ok(ctx) => ctx,
            Err(e) if std::env::var("FERROCUDA_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
                panic!("FERROCUDA_REQUIRE_GPU=1 but no CUDA device: {e}")
            }
            Err(_) => {
                println!("skipped (no CUDA device)");
                return;
            }
        };
        let stream = ctx.stream("test").unwrap();
        // 2048 threads per block is over every CUDA device's limit.
        let cfg = LaunchConfig { grid: (1, 1, 1), block: (2048, 1, 1), shared_bytes: 0 };
        let (out, value, n) = (0u64, 0f32, 0usize);
        // SAFETY: the driver refuses the shape before anything runs; with n = 0 the kernel would
        // touch no memory anyway.
        let err =
            unsafe { launch(stream, "fill_f32", cfg, &mut kernel_args![&out, &value, &n]) }.unwrap_err();
        assert!(matches!(err, Error::Launch { kernel: "fill_f32", block: (2048, 1, 1), .. }), "{err}");
        assert!(err.to_string().contains("fill_f32"), "{err}");
        // The stream is still usable afterwards.
        assert_eq!(ctx.full(&[5], 1.5).unwrap().to_vec().unwrap(), vec![1.5; 5]);
    }
}
