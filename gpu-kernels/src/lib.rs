//! Every ferrocuda GPU kernel, in Rust.
//!
//! Built for `nvptx64-nvidia-cuda` by the root crate's `build.rs`, one module of
//! `src/kernels.rs` at a time (each a package of `modules/` that enables that module's feature),
//! into PTX and cubins that the host embeds. Kernels are `extern "ptx-kernel"` functions named
//! `<op>_<dtype>`, each declared in `src/kernels.rs`; they reach the hardware only through
//! [`prelude`], which holds every intrinsic, inline PTX string and shared-memory declaration once.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx, link_llvm_intrinsics, asm_experimental_arch, stmt_expr_attributes)]
#![allow(internal_features, clippy::missing_safety_doc)]
// A module build compiles the helpers of the families it needs, not all their users.
#![allow(dead_code, unused_imports, unused_macros)]

#[macro_use]
pub mod prelude;

// Each module build (a cargo feature named after a `module` of `kernels.rs`) compiles only its
// families; helpers that another module's kernels share are unused there.
#[cfg(any(feature = "attention", feature = "attention_sm90a", feature = "attention_bwd_sm90a"))]
pub mod attention;
#[cfg(any(feature = "conv", feature = "matmul_sm90a"))]
pub mod conv;
#[cfg(any(feature = "elementwise", feature = "nn"))]
pub mod elementwise;
#[cfg(feature = "layout")]
pub mod layout;
#[cfg(any(feature = "matmul", feature = "matmul_tiny", feature = "conv", feature = "matmul_sm90a"))]
pub mod matmul;
#[cfg(any(feature = "nn", feature = "rows"))]
pub mod nn;
#[cfg(feature = "optim")]
pub mod optim;
#[cfg(feature = "pool")]
pub mod pool;
#[cfg(any(feature = "random", feature = "nn"))]
pub mod random;
#[cfg(any(feature = "reduce", feature = "rows"))]
pub mod reduce;
pub mod shapes;

/// Checks every entry of `kernels.rs` whose module this build compiles: each kernel must coerce to
/// the function-pointer type its entry declares.
macro_rules! kernel_table {
    ($(module $module:ident($feature:literal, $arch:ident) {
        $($($path:ident)::+ {
            $([$($name:ident),+ $(,)?]($($arg:ident: $ty:ty),* $(,)?);)*
        })*
    })*) => {$(
        #[cfg(feature = $feature)]
        const _: () = {$(
            check_kernels!(($($path)::+) $([$($name)+] ($($ty),*))*);
        )*};
    )*};
}
/// One file's kernels, one at a time (macro_rules cannot repeat the path and the parameter list
/// inside the repetition of names): `(path) [names] (parameter types) [names] (...) ...`.
macro_rules! check_kernels {
    (($($path:ident)::+) [$first:ident $($rest:ident)*] $params:tt $($more:tt)*) => {
        let _: unsafe extern "ptx-kernel" fn $params = crate::$($path)::+::$first;
        check_kernels!(($($path)::+) [$($rest)*] $params $($more)*);
    };
    ($path:tt [] $params:tt $($more:tt)*) => {
        check_kernels!($path $($more)*);
    };
    ($path:tt) => {};
}
mod kernels;

// A wrong declaration of a real kernel (its `value` is f32), compiled only by
// scripts/check-kernel-signatures.sh, which expects this build to fail with a type mismatch.
#[cfg(feature = "signature_mismatch_probe")]
kernel_table! {
    module elementwise("elementwise", portable) {
        elementwise::fill {
            [fill_f32](out: *mut f32, value: f64, n: usize);
        }
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    prelude::trap()
}
