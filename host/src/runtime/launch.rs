//! Launch shapes: grid sizing from the device's properties. The launch itself is
//! [`Kernel::launch`](super::kernel::Kernel::launch).
use super::device::DeviceInfo;

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::error::Error;
    use crate::runtime::kernel::DevPtrMut;

    #[test]
    fn a_refused_launch_names_the_kernel() {
        let Some((ctx, _serial)) = crate::runtime::test_gpu() else { return };
        let stream = ctx.stream("test").unwrap();
        // 2048 threads per block is over every CUDA device's limit.
        let cfg = LaunchConfig { grid: (1, 1, 1), block: (2048, 1, 1), shared_bytes: 0 };
        // SAFETY: the driver refuses the shape before anything runs; with n = 0 the kernel would
        // touch no memory anyway.
        let err =
            unsafe { crate::kernels::fill_f32.launch(stream, cfg, (DevPtrMut::new(0), 0.0, 0)) }.unwrap_err();
        assert!(matches!(err, Error::Launch { kernel: "fill_f32", block: (2048, 1, 1), .. }), "{err}");
        assert!(err.to_string().contains("fill_f32"), "{err}");
        // The stream is still usable afterwards.
        assert_eq!(ctx.full(&[5], 1.5).unwrap().to_vec().unwrap(), vec![1.5; 5]);
    }
}
