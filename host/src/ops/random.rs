//! Counter-based random tensors: `rand` (uniform [0, 1)) and `randn` (standard normal).
//! Kernels: `gpu-kernels/src/random/`. Both backends compile the same Philox and transforms
//! (`philox.rs`), so a seed gives the same bits on the GPU and the CPU.
use super::CPU_CHUNK;
use crate::kernels;
use crate::runtime::context::{Backend, Context};
use crate::runtime::error::Result;
use crate::runtime::kernel::{DevPtrMut, Kernel};
use crate::runtime::launch::LaunchConfig;
use crate::shapes::ELEMENTWISE_BLOCK;
use crate::tensor::{element_count, Tensor};
use rayon::prelude::*;

#[path = "../../../gpu-kernels/src/random/philox.rs"]
pub(crate) mod philox;

fn generate(
    ctx: &Context,
    shape: &[usize],
    seed: u64,
    op: &'static str,
    kernel: Kernel<(DevPtrMut<f32>, usize, u64)>,
    f: fn(u64, u64) -> [f32; 4],
) -> Result<Tensor> {
    match &ctx.backend {
        Backend::Cpu => {
            let mut out = vec![0.0f32; element_count(op, shape)?];
            out.par_chunks_mut(4).with_min_len(CPU_CHUNK / 4).enumerate().for_each(|(group, dst)| {
                let v = f(seed, group as u64);
                dst.copy_from_slice(&v[..dst.len()]);
            });
            Ok(Tensor::from_cpu(ctx, shape, out))
        }
        Backend::Cuda(stream) => {
            let out = Tensor::uninit(ctx, shape, op)?;
            let n = out.len();
            if n > 0 {
                let cfg = LaunchConfig::covering(n.div_ceil(4), ELEMENTWISE_BLOCK);
                // SAFETY: `<rand|randn>_f32(out, n, seed)`: a live buffer of `n` floats (16-byte
                // aligned); any grid is valid.
                unsafe { kernel.launch(stream, cfg, (out.ptr_mut(), n, seed))? };
            }
            Ok(out)
        }
    }
}

impl Context {
    /// Standard-normal samples; element `i` depends only on `(seed, i)`, on every backend.
    pub fn randn(&self, shape: &[usize], seed: u64) -> Result<Tensor> {
        generate(self, shape, seed, "randn", kernels::randn_f32, philox::normal4)
    }

    /// Uniform samples in [0, 1); element `i` depends only on `(seed, i)`, on every backend.
    pub fn rand(&self, shape: &[usize], seed: u64) -> Result<Tensor> {
        generate(self, shape, seed, "rand", kernels::rand_f32, philox::uniform4)
    }
}
