//! Every ferrocuda GPU kernel, in Rust.
//!
//! Built for `nvptx64-nvidia-cuda` by the root crate's `build.rs` into one PTX module that the host
//! embeds. Kernels are `extern "ptx-kernel"` functions named `<op>_<dtype>`; they reach the hardware
//! only through [`prelude`], which holds every intrinsic, inline PTX string and shared-memory
//! declaration once.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx, link_llvm_intrinsics, asm_experimental_arch, stmt_expr_attributes)]
#![allow(internal_features, clippy::missing_safety_doc)]

#[macro_use]
pub mod prelude;

pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod layout;
pub mod matmul;
pub mod nn;
pub mod optim;
pub mod pool;
pub mod random;
pub mod reduce;
pub mod shapes;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    prelude::trap()
}
