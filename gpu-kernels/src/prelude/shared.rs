//! Shared memory, declared once.
//!
//! `shared_array!(static NAME: [T; LEN]);` is the single source of truth for a static shared array:
//! it declares the Rust side, and `build.rs` reads the same invocation to generate the
//! `addrspace(3)` LLVM definition that the link step adds (a Rust `static` cannot be placed in
//! shared memory by rustc itself). `LEN` is integer literals joined by `*` and `+`.
//! Dynamic shared memory (sized by the launch) is reached through [`dynamic_shared`].

/// Declare a static shared-memory array; see the module documentation.
#[macro_export]
macro_rules! shared_array {
    (static $name:ident : [$t:ty; $($len:tt)+]) => {
        unsafe extern "C" {
            static mut $name: [$t; $($len)+];
        }
    };
}

unsafe extern "C" {
    // Defined by the generated shared-memory module: an addrspacecast of the launch's dynamic
    // shared memory to a generic pointer, inlined by opt.
    fn ferrocuda_dyn_smem() -> *mut u8;
}

/// Generic pointer to the first element of a static shared array (`&raw mut NAME`).
#[inline(always)]
pub fn shared_ptr<T, const N: usize>(array: *mut [T; N]) -> *mut T {
    array.cast()
}

/// The launch's dynamic shared memory as `*mut T` (16-byte aligned; its size is the
/// `shared_mem_bytes` the host launched with).
#[inline(always)]
pub fn dynamic_shared<T>() -> *mut T {
    // SAFETY: returns the address of the dynamic shared window; no access happens here.
    unsafe { ferrocuda_dyn_smem().cast() }
}
