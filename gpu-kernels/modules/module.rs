//! One kernel module: a cdylib that links the kernel crate built with this module's feature, so
//! that its PTX holds exactly the module's kernels. Each module is its own package, so cargo
//! caches each one's build and a kernel edit rebuilds only the modules that compile that file.
#![no_std]

extern crate gpu_kernels;
