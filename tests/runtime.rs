//! The runtime: devices, contexts from many threads, streams, events, pinned copies, the pool,
//! and the typed errors for bad input.
mod common;
use common::*;
use ferrocuda::{Context, Error};
use std::sync::Arc;

fn device_properties(gpu: &Context) {
    let devices = ferrocuda::cuda_devices().unwrap();
    assert!(!devices.is_empty() && devices.len() == ferrocuda::cuda_device_count());
    let info = &devices[0];
    assert!(!info.name.is_empty() && info.sm_count > 0 && info.total_memory > 0 && info.l2_bytes > 0);
    assert!(info.compute_capability.0 >= 5 && info.max_shared_per_block_optin >= 48 * 1024);
    let shown = gpu.device().name();
    assert!(shown.starts_with(&info.name) && shown.contains("SMs") && shown.contains("GiB"), "{shown}");
    let (free, total) = gpu.memory_info().unwrap();
    assert!(free > 0 && free <= total);
}

fn module_loads_once_per_device(gpu: &Context) {
    let again = Context::cuda(0).unwrap();
    assert_eq!(gpu.module_load_time(), again.module_load_time());
    let missing = Context::cuda(ferrocuda::cuda_device_count()).unwrap_err();
    assert!(matches!(missing, Error::NoDevice(_)), "{missing}");
}

fn pool_returns_bytes_on_drop(gpu: &Context) {
    gpu.synchronize().unwrap();
    let before = gpu.pool_stats().unwrap();
    {
        let a = gpu.randn(&[1 << 20], 1).unwrap();
        let b = a.gelu().unwrap().add(&a).unwrap();
        let during = gpu.pool_stats().unwrap();
        assert!(during.bytes_in_use >= before.bytes_in_use + 2 * (4 << 20), "{during:?}");
        drop(b);
    }
    let after = gpu.pool_stats().unwrap();
    assert_eq!(after.bytes_in_use, before.bytes_in_use, "{before:?} -> {after:?}");
    // The same request again is served from the cache.
    let hits = after.cache_hits;
    let t = gpu.zeros(&[1 << 20]).unwrap();
    assert!(gpu.pool_stats().unwrap().cache_hits > hits);
    drop(t);
    gpu.trim_pool().unwrap();
    let trimmed = gpu.pool_stats().unwrap();
    assert_eq!(trimmed.bytes_reserved, trimmed.bytes_in_use, "{trimmed:?}");
    assert!(trimmed.peak_bytes_in_use >= 2 * (4 << 20));
}

fn out_of_memory_is_an_error_and_the_pool_survives(gpu: &Context) {
    let (_, total) = gpu.memory_info().unwrap();
    let before = gpu.pool_stats().unwrap();
    let elems = total / 4 + (1 << 28);
    let err = gpu.zeros(&[elems]).unwrap_err();
    match &err {
        Error::OutOfMemory { op: "full", requested, free } => {
            assert_eq!(*requested, elems * 4);
            assert!(*free < *requested);
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    assert_eq!(gpu.pool_stats().unwrap().bytes_in_use, before.bytes_in_use);
    let x = gpu.full(&[1000], 3.0).unwrap();
    assert_eq!(x.sum().unwrap().to_scalar().unwrap(), 3000.0);
}

fn size_overflow_on(ctx: &Context) {
    let err = ctx.zeros(&[usize::MAX / 2, 3]).unwrap_err();
    assert!(
        matches!(&err, Error::SizeOverflow { op: "full", shape } if shape == &[usize::MAX / 2, 3]),
        "{err}"
    );
    let err = ctx.from_slice(&[1.0, 2.0], &[3]).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "from_slice", .. }), "{err}");
    let t = ctx.zeros(&[2, 6]).unwrap();
    assert_eq!(t.reshape(&[3, 4]).unwrap().shape(), &[3, 4]);
    let err = t.reshape(&[5, 2]).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "reshape", .. }), "{err}");
}

fn gpu_bad_sizes(gpu: &Context) {
    size_overflow_on(gpu);
}

fn cpu_bad_sizes() {
    size_overflow_on(&Context::cpu());
}

fn one_context_four_threads(gpu: &Context) {
    let ctx = Arc::new(gpu.clone());
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                for i in 0..25u64 {
                    let n = 10_000 + (t * 1000 + i) as usize;
                    let x = ctx.randn(&[n], t * 100 + i).unwrap();
                    let y = x.mul_scalar(2.0).unwrap().sub(&x).unwrap();
                    let got = y.to_vec().unwrap();
                    let want = Context::cpu().randn(&[n], t * 100 + i).unwrap().to_vec().unwrap();
                    assert_eq!(got, want, "thread {t} iteration {i}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("worker thread");
    }
}

/// The profiler test's multi-threaded workload with the profiler off, against the CPU backend
/// (the same additions in the same order: bit for bit).
fn four_threads_three_streams(gpu: &Context) {
    let (adds, results) = adds_on_four_threads(gpu);
    for (i, (y, x)) in results.into_iter().enumerate() {
        let xc = Context::cpu().from_slice(&x.to_vec().unwrap(), x.shape()).unwrap();
        let want = (0..adds).try_fold(xc.clone(), |acc, _| acc.add(&xc)).unwrap();
        assert_same(&format!("thread {i}"), &y.to_vec().unwrap(), &want.to_vec().unwrap());
    }
}

fn streams_events_and_pinned_copies(gpu: &Context) {
    let other = gpu.new_stream().unwrap();
    let n = (1 << 20) + 3;
    let mut pinned = gpu.pinned(n).unwrap();
    let data = randn_host(n, 77);
    pinned.as_mut_slice().unwrap().copy_from_slice(&data);
    let start = other.record_event().unwrap();
    let x = other.from_pinned(&pinned, &[n]).unwrap();
    let y = x.relu().unwrap();
    let end = other.record_event().unwrap();
    let mut back = other.pinned(n).unwrap();
    y.copy_to_pinned(&mut back).unwrap();
    let want: Vec<f32> = data.iter().map(|&v| v.max(0.0)).collect();
    assert_eq!(back.as_slice().unwrap(), &want[..]);
    assert!(start.elapsed_ms(&end).unwrap() >= 0.0);
    // Ordering between streams: gpu waits for other, then uses a copy of its tensor.
    gpu.wait_for(&other).unwrap();
    assert_eq!(y.to_context(gpu).unwrap().to_vec().unwrap(), want);
}

/// Two threads upload from one `&PinnedBuffer` at once, one on a stream kept busy, one on an idle
/// stream; then the host overwrites the buffer. Every upload must have read the old contents: the
/// buffer tracked one pending copy, so the idle stream's event could replace the busy one's and
/// the host wrote while the busy stream's copy was still queued.
fn pinned_uploads_from_two_threads(gpu: &Context) {
    let sanitizer = under_sanitizer();
    let (rounds, side) = if sanitizer { (3, 256) } else { (20, 2048) };
    let busy = gpu.new_stream().unwrap();
    let idle = gpu.new_stream().unwrap();
    let n = 1 << 20;
    let data = randn_host(n, 90);
    let weight = busy.randn(&[side, side], 91).unwrap();
    for round in 0..rounds {
        let mut pinned = gpu.pinned(n).unwrap();
        pinned.as_mut_slice().unwrap().copy_from_slice(&data);
        // Queue enough work on `busy` that its upload runs well after the call returns.
        let mut chain = weight.clone();
        for _ in 0..3 {
            chain = chain.matmul(&weight).unwrap();
        }
        let gate = std::sync::Barrier::new(2);
        let up = |ctx: &Context| {
            gate.wait();
            ctx.from_pinned(&pinned, &[n]).unwrap()
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| up(&busy));
            let b = s.spawn(|| up(&idle));
            (a.join().unwrap(), b.join().unwrap())
        });
        pinned.as_mut_slice().unwrap().fill(-1.0);
        assert_same(&format!("round {round}, upload on the busy stream"), &a.to_vec().unwrap(), &data);
        assert_same(&format!("round {round}, upload on the idle stream"), &b.to_vec().unwrap(), &data);
        drop(chain);
    }
}

/// Another context (as another CUDA library would make) made current on this thread between our
/// calls: every call still allocates, copies and launches in the device's primary context. With the
/// current context cached per thread, allocations went to the other context (and died with it)
/// and launches failed.
fn two_contexts_alternating_on_one_thread(gpu: &Context) {
    use cudarc::driver::{result, sys};
    let device = result::device::get(0).unwrap();
    let mut theirs: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a fresh context of device 0, destroyed at the end of this test.
    unsafe { sys::cuCtxCreate_v4(&mut theirs, std::ptr::null_mut(), 0, device) }.result().unwrap();
    let rounds = 12;
    let w = gpu.from_slice(&randn_host(64 * 48, 80), &[64, 48]).unwrap();
    let mut pinned = gpu.pinned(4096).unwrap();
    let mut kept = Vec::new();
    for i in 0..rounds {
        let other = || {
            // SAFETY: `theirs` is alive until the end of the test.
            unsafe { result::ctx::set_current(theirs) }.unwrap();
        };
        other();
        // Their own allocation, in their context.
        // SAFETY: freed below, in the same context.
        let their_block = unsafe { result::malloc_sync(1 << 16) }.unwrap();
        other();
        // A size class the pool has not seen: a fresh driver allocation.
        let n = (1 << 18) * (i + 3) + 1;
        let x = gpu.full(&[n], i as f32).unwrap();
        other();
        let data = randn_host(17 * 64, 81 + i as u64);
        let a = gpu.from_slice(&data, &[17, 64]).unwrap();
        other();
        let y = a.matmul(&w).unwrap();
        other();
        pinned.as_mut_slice().unwrap().copy_from_slice(&randn_host(4096, 82));
        let p = gpu.from_pinned(&pinned, &[4096]).unwrap();
        other();
        let want = Context::cpu()
            .from_slice(&data, &[17, 64])
            .unwrap()
            .matmul(&w.to_context(&Context::cpu()).unwrap())
            .unwrap();
        assert_close(&format!("round {i}"), &y.to_vec().unwrap(), &want.to_vec().unwrap(), 1e-5);
        other();
        assert_same(&format!("round {i}, pinned upload"), &p.to_vec().unwrap(), &randn_host(4096, 82));
        other();
        // SAFETY: allocated above in `theirs`, current again.
        unsafe { result::free_sync(their_block) }.unwrap();
        kept.push((x, n, i as f32));
    }
    // Their context goes away; everything we allocated while it was current lives on.
    // SAFETY: no handle of it is used afterwards.
    unsafe { sys::cuCtxDestroy_v2(theirs) }.result().unwrap();
    for (x, n, value) in kept {
        let got = x.to_vec().unwrap();
        assert!(got.len() == n && got.iter().all(|&v| v == value), "a buffer died with the other context");
    }
    gpu.trim_pool().unwrap();
}

fn context_new_falls_back_to_cpu() {
    let ctx = Context::new().unwrap();
    assert_eq!(ctx.is_cuda(), Context::cuda_available());
    let cpu = Context::cpu();
    assert!(!cpu.device().is_cuda() && cpu.pool_stats().is_none());
    assert!(matches!(cpu.record_event(), Err(Error::NoDevice(_))));
}

/// A chain of small kernels, each reading its predecessor's output (and the pool handing each
/// the buffer its predecessor's input just left): with programmatic dependent launches a kernel's
/// blocks start while its predecessor runs, and must still see all of its writes.
fn dependent_launches_see_their_predecessors_writes(gpu: &Context) {
    let n = (1 << 22) + 3;
    let ones = gpu.full(&[n], 1.0).unwrap();
    let mut x = gpu.full(&[n], 0.0).unwrap();
    for _ in 0..150 {
        x = x.add(&ones).unwrap().relu().unwrap();
    }
    let got = x.to_vec().unwrap();
    let wrong = got.iter().filter(|&&v| v != 150.0).count();
    assert_eq!(wrong, 0, "{wrong} of {n} values differ from 150 (first {:?})", &got[..4]);
}

/// The same through the tiny GEMM, the kernel shape whose non-coherent loads ptxas once scheduled
/// above the dependency wait (a wrong MLP with dependent launches, a right one without):
/// `x ← tanh(x·W + b)` 60 times, alternating `x·W` and `x·Wᵀ` over K = 96 (three chunks), against
/// the CPU backend. The map contracts (‖W‖ ≈ 0.78 an application), so each step's rounding (within
/// the f32 tolerance of 1e-5) adds up to at most ~4.5 steps' worth: 5e-5.
fn dependent_tiny_products_match_cpu(gpu: &Context) {
    let (m, k) = (64, 96);
    let chain = |ctx: &Context| {
        let w: Vec<f32> = randn_host(k * k, 41).iter().map(|v| v * 0.08).collect();
        let w = ctx.from_slice(&w, &[k, k]).unwrap();
        let b = ctx.from_slice(&randn_host(m * k, 43), &[m, k]).unwrap();
        let mut x = ctx.from_slice(&randn_host(m * k, 42), &[m, k]).unwrap();
        for i in 0..60 {
            let y = if i % 2 == 0 { x.matmul(&w) } else { x.matmul_t(&w) }.unwrap();
            x = y.add(&b).unwrap().tanh().unwrap();
        }
        x.to_vec().unwrap()
    };
    assert_close("x ← tanh(x·W + b), 60 times", &chain(gpu), &chain(&Context::cpu()), 5e-5);
}

fn main() {
    run(&[
        ("gpu_device_properties", Case::Gpu(device_properties)),
        ("gpu_module_loads_once_per_device", Case::Gpu(module_loads_once_per_device)),
        ("gpu_pool_returns_bytes_on_drop", Case::Gpu(pool_returns_bytes_on_drop)),
        (
            "gpu_out_of_memory_is_an_error_and_the_pool_survives",
            Case::Gpu(out_of_memory_is_an_error_and_the_pool_survives),
        ),
        ("gpu_bad_sizes", Case::Gpu(gpu_bad_sizes)),
        ("gpu_one_context_four_threads", Case::Gpu(one_context_four_threads)),
        ("gpu_four_threads_three_streams", Case::Gpu(four_threads_three_streams)),
        ("gpu_streams_events_and_pinned_copies", Case::Gpu(streams_events_and_pinned_copies)),
        ("gpu_pinned_uploads_from_two_threads", Case::Gpu(pinned_uploads_from_two_threads)),
        ("gpu_two_contexts_alternating_on_one_thread", Case::Gpu(two_contexts_alternating_on_one_thread)),
        (
            "gpu_dependent_launches_see_their_predecessors_writes",
            Case::Gpu(dependent_launches_see_their_predecessors_writes),
        ),
        ("gpu_dependent_tiny_products_match_cpu", Case::Gpu(dependent_tiny_products_match_cpu)),
        ("cpu_bad_sizes", Case::Cpu(cpu_bad_sizes)),
        ("cpu_context_new_falls_back_to_cpu", Case::Cpu(context_new_falls_back_to_cpu)),
    ]);
}
