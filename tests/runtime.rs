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

fn context_new_falls_back_to_cpu() {
    let ctx = Context::new().unwrap();
    assert_eq!(ctx.is_cuda(), Context::cuda_available());
    let cpu = Context::cpu();
    assert!(!cpu.device().is_cuda() && cpu.pool_stats().is_none());
    assert!(matches!(cpu.record_event(), Err(Error::NoDevice(_))));
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
        ("gpu_streams_events_and_pinned_copies", Case::Gpu(streams_events_and_pinned_copies)),
        ("cpu_bad_sizes", Case::Cpu(cpu_bad_sizes)),
        ("cpu_context_new_falls_back_to_cpu", Case::Cpu(context_new_falls_back_to_cpu)),
    ]);
}
