//! Barriers, memory fences, atomics and trap.
use core::arch::{asm, nvptx};

/// `__syncthreads()`: every thread of the block arrives before any continues, and their
/// shared- and global-memory writes before it are visible to the block after it.
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: a block-wide barrier; callers keep it out of divergent code.
    unsafe { nvptx::_syncthreads() }
}

/// Acquire-release fence at GPU scope: orders this thread's memory accesses before and after it
/// as seen by every thread of the grid.
#[inline(always)]
pub fn fence_gpu() {
    // SAFETY: a fence has no operands.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) }
}

/// `atomicAdd` on a `u32` in global memory at GPU scope; returns the old value.
///
/// # Safety
/// `p` points to a live, 4-byte-aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn atomic_add_u32(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    asm!("atom.global.gpu.relaxed.add.u32 {old}, [{p}], {v};",
         old = out(reg32) old, p = in(reg64) p, v = in(reg32) v, options(nostack));
    old
}

/// `ld.acquire.gpu` of a `u32`: what another block wrote before its release (or its fence and
/// atomic) on this address happens before what this thread does after.
///
/// # Safety
/// `p` points to a live, 4-byte-aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn load_acquire_u32(p: *const u32) -> u32 {
    let v: u32;
    asm!("ld.acquire.gpu.global.u32 {v}, [{p}];", p = in(reg64) p, v = out(reg32) v, options(nostack));
    v
}

/// Programmatic dependent launch, at a kernel's start: lets the grid launched after this one on
/// the stream start its blocks now (they wait in their own call until this grid has finished),
/// then waits until the grid before this one has finished and its writes are visible. Without
/// the launch attribute that allows it, both are no-ops. Called before the kernel touches global
/// memory, so that a grid started early reads nothing its predecessor writes, and writes
/// nothing its predecessor reads.
#[inline(always)]
pub fn grid_dependency_sync() {
    #[cfg(any(feature = "sm90a", target_feature = "sm_90"))]
    // SAFETY: scheduling controls with no operands.
    unsafe {
        asm!("griddepcontrol.launch_dependents;", "griddepcontrol.wait;", options(nostack))
    }
}

/// This block's rank in its cluster (0 on targets without clusters).
#[inline(always)]
pub fn cluster_rank() -> u32 {
    #[cfg(any(feature = "sm90a", target_feature = "sm_90"))]
    {
        let r: u32;
        // SAFETY: reads a special register.
        unsafe { asm!("mov.u32 {r}, %cluster_ctarank;", r = out(reg32) r, options(pure, nomem, nostack)) };
        r
    }
    #[cfg(not(any(feature = "sm90a", target_feature = "sm_90")))]
    0
}

/// Blocks in this block's cluster (1 without clusters, and on targets that have none).
#[inline(always)]
pub fn cluster_blocks() -> u32 {
    #[cfg(any(feature = "sm90a", target_feature = "sm_90"))]
    {
        let n: u32;
        // SAFETY: reads a special register.
        unsafe { asm!("mov.u32 {n}, %cluster_nctarank;", n = out(reg32) n, options(pure, nomem, nostack)) };
        n
    }
    #[cfg(not(any(feature = "sm90a", target_feature = "sm_90")))]
    1
}

/// Every thread of every block of the cluster arrives before any continues; shared-memory
/// writes (and `mbarrier` initialisations) before it are visible to the cluster after it. The
/// arrive's default semantics are release and the wait's acquire; the portable modules, whose
/// PTX predates the explicit modifiers (8.0), leave them implicit.
#[cfg(any(feature = "sm90a", target_feature = "sm_90"))]
#[inline(always)]
pub fn cluster_sync() {
    // SAFETY: a barrier; callers reach it with every thread of the cluster.
    unsafe {
        #[cfg(feature = "sm90a")]
        asm!(
            "barrier.cluster.arrive.release.aligned;",
            "barrier.cluster.wait.acquire.aligned;",
            options(nostack)
        );
        #[cfg(not(feature = "sm90a"))]
        asm!("barrier.cluster.arrive.aligned;", "barrier.cluster.wait.aligned;", options(nostack));
    }
}

/// The f32 at shared-memory address `addr` (as [`shared_addr`](super::tensor_core::shared_addr)
/// gives it) of the cluster's block `rank`.
///
/// # Safety
/// That block is running and wrote the value before a cluster barrier this thread has passed,
/// and it does not pass its next cluster barrier before this read (so it cannot exit or reuse
/// the address).
#[cfg(any(feature = "sm90a", target_feature = "sm_90"))]
#[inline(always)]
pub unsafe fn load_cluster_shared_f32(addr: u32, rank: u32) -> f32 {
    let v: f32;
    asm!("{{ .reg .b32 remote; mapa.shared::cluster.u32 remote, {a}, {r}; ld.shared::cluster.f32 {v}, [remote]; }}",
         a = in(reg32) addr, r = in(reg32) rank, v = out(reg32) v, options(nostack, readonly));
    v
}

/// The four f32 at shared-memory address `addr` (16-byte aligned) of the cluster's block `rank`.
///
/// # Safety
/// As [`load_cluster_shared_f32`].
#[cfg(any(feature = "sm90a", target_feature = "sm_90"))]
#[inline(always)]
pub unsafe fn load_cluster_shared_f32x4(addr: u32, rank: u32) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    asm!("{{ .reg .b32 remote; mapa.shared::cluster.u32 remote, {x}, {r}; ld.shared::cluster.v4.f32 {{{a}, {b}, {c}, {d}}}, [remote]; }}",
         x = in(reg32) addr, r = in(reg32) rank, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c,
         d = out(reg32) d, options(nostack, readonly));
    [a, b, c, d]
}

/// Abort the kernel (a launch failure on the host).
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` ends the thread; nothing follows.
    unsafe { nvptx::trap() }
}
