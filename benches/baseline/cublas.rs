//! cuBLAS SGEMM as the baseline of the matmul benches (loaded at run time through cudarc; the
//! library itself never calls cuBLAS). Row-major `C[M,N] = A[M,K]·B[K,N]` is column-major
//! `Cᵀ = Bᵀ·Aᵀ`, so the call passes B first.
use cudarc::cublas::{sys, CudaBlas};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;

pub struct Cublas {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
}

impl Cublas {
    /// cuBLAS on device 0, or `None` (with the reason) where it cannot be loaded.
    pub fn new() -> Result<Self, String> {
        // SAFETY: only probes whether the library can be loaded.
        if !unsafe { sys::is_culib_present() } {
            return Err("libcublas not found (add its folder to LD_LIBRARY_PATH)".into());
        }
        let ctx = CudaContext::new(0).map_err(|e| e.to_string())?;
        let stream = ctx.new_stream().map_err(|e| e.to_string())?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| e.to_string())?;
        Ok(Self { ctx, stream, blas })
    }

    /// Median ms of `C = A·B` (f32 in and out; TF32 tensor cores when `tf32`) over `reps` calls
    /// after warm-up, on random inputs.
    pub fn sgemm_ms(&self, m: usize, n: usize, k: usize, tf32: bool, reps: usize) -> Result<f64, String> {
        self.gemm_ms::<f32>(m, n, k, tf32, reps)
    }

    /// As [`Cublas::sgemm_ms`] for `T` = f32, f16 or bf16 (16-bit: f32 accumulation).
    pub fn gemm_ms<T>(&self, m: usize, n: usize, k: usize, tf32: bool, reps: usize) -> Result<f64, String>
    where
        T: ferrocuda::Element + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
        CudaBlas: cudarc::cublas::Gemm<T>,
    {
        let mode = if tf32 {
            sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            sys::cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: a live handle; the mode only selects the algorithms.
        let status = unsafe { sys::cublasSetMathMode(*self.blas.handle(), mode) };
        if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(format!("cublasSetMathMode: {status:?}"));
        }
        let fill = |len: usize, seed: u64| -> Result<CudaSlice<T>, String> {
            let host: Vec<T> = (0..len as u64)
                .map(|i| T::from_f32(((i.wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0))
                .collect();
            self.stream.clone_htod(&host).map_err(|e| e.to_string())
        };
        let (a, b) = (fill(m * k, 1)?, fill(k * n, 2)?);
        let mut c = self.stream.alloc_zeros::<T>(m * n).map_err(|e| e.to_string())?;
        let call = |c: &mut CudaSlice<T>| -> Result<(), String> {
            use cudarc::cublas::{Gemm, GemmConfig};
            let cfg = GemmConfig {
                transa: sys::cublasOperation_t::CUBLAS_OP_N,
                transb: sys::cublasOperation_t::CUBLAS_OP_N,
                m: n as i32,
                n: m as i32,
                k: k as i32,
                alpha: T::from_f32(1.0),
                lda: n as i32,
                ldb: k as i32,
                beta: T::from_f32(0.0),
                ldc: n as i32,
            };
            // SAFETY: b is [K, N] and a is [M, K] row-major, i.e. column-major [N, K] and
            // [K, M]; c holds M·N floats; all three live on this stream.
            unsafe { self.blas.gemm(cfg, &b, &a, c) }.map_err(|e| e.to_string())
        };
        for _ in 0..3 {
            call(&mut c)?;
        }
        let start = self
            .ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| e.to_string())?;
        let end = self
            .ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| e.to_string())?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps.max(1) {
            start.record(&self.stream).map_err(|e| e.to_string())?;
            call(&mut c)?;
            end.record(&self.stream).map_err(|e| e.to_string())?;
            end.synchronize().map_err(|e| e.to_string())?;
            times.push(start.elapsed_ms(&end).map_err(|e| e.to_string())? as f64);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    }
}
