//! Thread, block and grid indices, and grid-stride iteration.
use core::arch::nvptx;

macro_rules! special_registers {
    ($($(#[$doc:meta])* $name:ident => $intrinsic:ident;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub fn $name() -> usize {
            // SAFETY: reads a special register; no memory access.
            unsafe { nvptx::$intrinsic() as usize }
        }
    )*};
}

special_registers! {
    /// `threadIdx.x`.
    thread_x => _thread_idx_x;
    /// `threadIdx.y`.
    thread_y => _thread_idx_y;
    /// `blockIdx.x`.
    block_x => _block_idx_x;
    /// `blockIdx.y`.
    block_y => _block_idx_y;
    /// `blockIdx.z`.
    block_z => _block_idx_z;
    /// `blockDim.x`.
    block_dim_x => _block_dim_x;
    /// `blockDim.y`.
    block_dim_y => _block_dim_y;
    /// `gridDim.x`.
    grid_dim_x => _grid_dim_x;
    /// `gridDim.y`.
    grid_dim_y => _grid_dim_y;
}

/// Flat index of this thread in a 1-D launch.
#[inline(always)]
pub fn global_x() -> usize {
    block_x() * block_dim_x() + thread_x()
}

/// Number of threads in a 1-D launch.
#[inline(always)]
pub fn grid_threads_x() -> usize {
    grid_dim_x() * block_dim_x()
}

/// Flat index of this thread inside its block (x fastest).
#[inline(always)]
pub fn thread_in_block() -> usize {
    thread_y() * block_dim_x() + thread_x()
}

/// Lane of this thread in its warp.
#[inline(always)]
pub fn lane() -> usize {
    thread_in_block() & 31
}

/// Warp index of this thread in its block.
#[inline(always)]
pub fn warp_in_block() -> usize {
    thread_in_block() >> 5
}

/// Indices `global_x(), global_x() + grid_threads_x(), ...` below `end`: the grid-stride loop,
/// so that any grid size covers any `end`.
#[inline(always)]
pub fn grid_stride(end: usize) -> GridStride {
    GridStride { next: global_x(), step: grid_threads_x(), end }
}

/// Iterator returned by [`grid_stride`].
pub struct GridStride {
    next: usize,
    step: usize,
    end: usize,
}

impl Iterator for GridStride {
    type Item = usize;
    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        if self.next < self.end {
            let i = self.next;
            self.next += self.step;
            Some(i)
        } else {
            None
        }
    }
}
