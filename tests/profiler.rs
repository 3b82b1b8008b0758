//! The profiler: the launches, copies and pool activity of known ops while on, nothing while off,
//! the guard, reset, four threads on three streams, pinned copies, the JSON and Chrome trace
//! exports (parsed back), graph replays, and the CPU backend's empty report.
mod common;
use common::*;
use ferrocuda::{Context, CopyDirection, Error, ProfileReport, ProfiledKind};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

/// Calls per kernel name.
fn kernel_calls(r: &ProfileReport) -> BTreeMap<String, usize> {
    r.kernels().iter().map(|k| (k.name.to_string(), k.calls)).collect()
}

fn expected(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|&(n, c)| (n.to_string(), c)).collect()
}

/// Every recorded time is positive and every row agrees with the records.
fn check_times(r: &ProfileReport) {
    for op in r.ops() {
        assert!(op.dur_us > 0.0 && op.start_us >= 0.0 && op.host_us >= 0.0, "{op:?}");
    }
    for k in r.kernels() {
        assert!(k.total_ms > 0.0 && k.min_us > 0.0 && k.min_us <= k.p50_us, "{k:?}");
        assert!(k.p50_us <= k.p99_us && k.p99_us <= k.max_us, "{k:?}");
        assert!((k.mean_us * k.calls as f64 / 1e3 - k.total_ms).abs() < 1e-6, "{k:?}");
    }
    let shares: f64 = r.kernels().iter().map(|k| k.share).sum();
    assert!(r.kernels().is_empty() || (shares - 1.0).abs() < 1e-9, "shares sum to {shares}");
    for c in r.copies() {
        assert!(c.total_ms > 0.0 && c.gb_per_s() > 0.0, "{c:?}");
    }
}

/// A fresh path in the temporary directory.
fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrocuda-profiler-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn records_known_ops(gpu: &Context) {
    gpu.synchronize().unwrap();
    gpu.reset_profile().unwrap();
    let guard = gpu.profiler_guard().unwrap();
    let a = gpu.randn(&[1000], 1).unwrap();
    let b = gpu.from_slice(&randn_host(1000, 2), &[1000]).unwrap();
    let y = a.add(&b).unwrap().gelu().unwrap();
    let s = y.sum().unwrap();
    let (p, q) = (gpu.randn(&[64, 48], 3).unwrap(), gpu.randn(&[48, 80], 4).unwrap());
    let m = p.matmul(&q).unwrap();
    let c = y.copy().unwrap();
    assert!(s.to_scalar().unwrap().is_finite());
    assert_eq!(m.to_vec().unwrap().len(), 64 * 80);
    drop(guard);
    assert!(!gpu.is_profiling());
    let r = gpu.profile_report().unwrap();
    println!("{r}");
    assert!(r.note().is_none(), "{:?}", r.note());
    assert!(["CUPTI activity records", "CUDA events"].contains(&r.timing()) && r.left_out() == 0, "{r}");

    let gemm: Vec<&str> = r.kernels().iter().map(|k| k.name).filter(|n| n.starts_with("gemm_")).collect();
    let [gemm] = gemm[..] else { panic!("one GEMM kernel expected: {gemm:?}") };
    assert!(gemm.starts_with("gemm_f32_") && gemm.ends_with("_nn"), "{gemm}");
    let want = expected(&[("randn_f32", 3), ("add_f32", 1), ("gelu_f32", 1), ("sum_all_f32", 1), (gemm, 1)]);
    assert_eq!(kernel_calls(&r), want);
    check_times(&r);

    // One stream: the records in device order are the ops in queue order, none overlapping.
    let order: Vec<String> = r.ops().iter().map(|op| op.kind.name()).collect();
    let queued = [
        "randn_f32",
        "copy HtoD",
        "add_f32",
        "gelu_f32",
        "sum_all_f32",
        "randn_f32",
        "randn_f32",
        gemm,
        "copy DtoD",
        "copy DtoH",
        "copy DtoH",
    ];
    assert_eq!(order, queued);
    for w in r.ops().windows(2) {
        assert!(w[1].start_us + 2.0 >= w[0].start_us + w[0].dur_us, "{:?} overlaps {:?}", w[0], w[1]);
        assert!(w[1].host_us >= w[0].host_us, "{w:?}");
    }
    let ProfiledKind::Kernel { grid, block, shared_bytes, .. } = &r.ops()[2].kind else {
        panic!("{:?}", r.ops()[2])
    };
    assert!(grid.0 >= 1 && block.0 >= 32 && *shared_bytes == 0, "{:?}", r.ops()[2]);
    assert!(r.ops().iter().all(|op| op.stream == r.ops()[0].stream));

    let copies: Vec<(CopyDirection, bool, usize, usize)> =
        r.copies().iter().map(|c| (c.direction, c.pinned, c.count, c.bytes)).collect();
    assert_eq!(
        copies,
        [
            (CopyDirection::HostToDevice, false, 1, 4000),
            (CopyDirection::DeviceToHost, false, 2, 4 + 64 * 80 * 4),
            (CopyDirection::DeviceToDevice, false, 1, 4000),
        ]
    );
    // a, b, add, gelu, the sum's partials and result, p, q, m, c.
    let pool = r.pool().expect("pool summary on CUDA");
    assert!(pool.allocations >= 10, "{pool:?}");
    assert_eq!(pool.cache_hits + pool.cache_misses, pool.allocations, "{pool:?}");
    assert!(pool.peak_bytes_in_use >= pool.bytes_in_use_at_start + 4 * 4096, "{pool:?}");
    let shown = r.to_string();
    for part in ["randn_f32", "calls", "p99 µs", "share", "copy DtoH", "GB/s", "pool: "] {
        assert!(shown.contains(part), "{part} missing from\n{shown}");
    }
    drop(c);

    // Reports are cumulative until a reset.
    let again = gpu.profile_report().unwrap();
    assert_eq!(kernel_calls(&again), kernel_calls(&r));
    gpu.reset_profile().unwrap();
    let r = gpu.profile_report().unwrap();
    assert!(r.ops().is_empty() && r.note().is_some(), "{r}");
}

fn off_records_nothing(gpu: &Context) {
    gpu.reset_profile().unwrap();
    gpu.profile(false).unwrap();
    let x = gpu.randn(&[100], 5).unwrap();
    drop(x.add(&x).unwrap().to_vec().unwrap());
    let r = gpu.profile_report().unwrap();
    assert!(r.ops().is_empty() && r.kernels().is_empty() && r.copies().is_empty(), "{r}");

    gpu.profile(true).unwrap();
    let y = gpu.randn(&[100], 6).unwrap();
    gpu.profile(false).unwrap();
    drop(y.add(&x).unwrap().to_vec().unwrap());
    let r = gpu.profile_report().unwrap();
    assert_eq!(kernel_calls(&r), expected(&[("randn_f32", 1)]));
    assert!(r.copies().is_empty(), "{r}");
    check_times(&r);

    // A reset while on restarts the records and the timeline.
    gpu.profile(true).unwrap();
    gpu.reset_profile().unwrap();
    drop(x.add(&y).unwrap());
    let r = gpu.profile_report().unwrap();
    gpu.profile(false).unwrap();
    assert_eq!(kernel_calls(&r), expected(&[("add_f32", 1)]));
    gpu.reset_profile().unwrap();
}

fn guard_turns_profiling_off(gpu: &Context) {
    gpu.reset_profile().unwrap();
    assert!(!gpu.is_profiling());
    {
        let _guard = gpu.profiler_guard().unwrap();
        assert!(gpu.is_profiling());
        // The state is the device's: a clone and another stream see it.
        assert!(gpu.clone().is_profiling() && gpu.new_stream().unwrap().is_profiling());
        drop(gpu.randn(&[10], 7).unwrap());
    }
    assert!(!gpu.is_profiling());
    drop(gpu.randn(&[10], 8).unwrap());
    assert_eq!(kernel_calls(&gpu.profile_report().unwrap()), expected(&[("randn_f32", 1)]));
    // A guard taken while on leaves it on.
    gpu.profile(true).unwrap();
    drop(gpu.profiler_guard().unwrap());
    assert!(gpu.is_profiling());
    gpu.profile(false).unwrap();
    gpu.reset_profile().unwrap();
}

fn four_threads_three_streams(gpu: &Context) {
    gpu.synchronize().unwrap();
    gpu.reset_profile().unwrap();
    let guard = gpu.profiler_guard().unwrap();
    let (adds, _) = adds_on_four_threads(gpu);
    drop(guard);
    let r = gpu.profile_report().unwrap();
    assert_eq!(kernel_calls(&r), expected(&[("randn_f32", 4), ("add_f32", 4 * adds)]));
    check_times(&r);
    let streams: HashSet<usize> = r.ops().iter().map(|op| op.stream).collect();
    assert_eq!(streams.len(), 3, "{streams:?}");
    // Two threads shared one stream: their records still do not overlap on it.
    for stream in streams {
        let on: Vec<_> = r.ops().iter().filter(|op| op.stream == stream).collect();
        for w in on.windows(2) {
            assert!(w[1].start_us + 2.0 >= w[0].start_us + w[0].dur_us, "{:?} overlaps {:?}", w[0], w[1]);
        }
    }
    gpu.reset_profile().unwrap();
}

fn pinned_copies_are_recorded(gpu: &Context) {
    gpu.reset_profile().unwrap();
    let n = 1 << 16;
    let mut src = gpu.pinned(n).unwrap();
    src.as_mut_slice().unwrap().copy_from_slice(&randn_host(n, 9));
    let mut dst = gpu.pinned(n).unwrap();
    let guard = gpu.profiler_guard().unwrap();
    let t = gpu.from_pinned(&src, &[n]).unwrap();
    t.copy_to_pinned(&mut dst).unwrap();
    assert_same("pinned round trip", dst.as_slice().unwrap(), src.as_slice().unwrap());
    drop(guard);
    let r = gpu.profile_report().unwrap();
    let copies: Vec<(CopyDirection, bool, usize, usize)> =
        r.copies().iter().map(|c| (c.direction, c.pinned, c.count, c.bytes)).collect();
    assert_eq!(
        copies,
        [(CopyDirection::HostToDevice, true, 1, n * 4), (CopyDirection::DeviceToHost, true, 1, n * 4)]
    );
    assert!(r.kernels().is_empty(), "{r}");
    check_times(&r);
    gpu.reset_profile().unwrap();
}

fn exports_parse(gpu: &Context) {
    gpu.reset_profile().unwrap();
    let guard = gpu.profiler_guard().unwrap();
    let x = gpu.randn(&[4096], 11).unwrap();
    let y = x.gelu().unwrap().add(&x).unwrap().copy().unwrap();
    let other = gpu.new_stream().unwrap();
    let z = other.randn(&[4096], 12).unwrap().relu().unwrap();
    drop((y.to_vec().unwrap(), z.to_vec().unwrap()));
    drop(guard);
    let r = gpu.profile_report().unwrap();
    check_times(&r);

    let trace_path = temp_file("trace.json");
    r.write_chrome_trace(&trace_path).unwrap();
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace_path).unwrap()).expect("trace is JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    assert_eq!(events.len(), r.ops().len());
    let ordinal = match gpu.device() {
        ferrocuda::Device::Cuda(info) => info.ordinal as u64,
        other => panic!("{other}"),
    };
    let mut tids = HashSet::new();
    for (e, op) in events.iter().zip(r.ops()) {
        assert_eq!(e["ph"], "X", "{e}");
        assert!(e["ts"].as_f64().is_some_and(|ts| ts >= 0.0), "{e}");
        assert!(e["dur"].as_f64().is_some_and(|d| d > 0.0), "{e}");
        assert_eq!(e["pid"].as_u64(), Some(ordinal), "{e}");
        tids.insert(e["tid"].as_u64().expect("tid"));
        assert_eq!(e["name"].as_str(), Some(op.kind.name().as_str()), "{e}");
        match &op.kind {
            ProfiledKind::Kernel { grid, shared_bytes, .. } => {
                assert_eq!(e["cat"], "kernel", "{e}");
                assert_eq!(e["args"]["grid"][0].as_u64(), Some(grid.0 as u64), "{e}");
                assert_eq!(e["args"]["shared"].as_u64(), Some(*shared_bytes as u64), "{e}");
            }
            ProfiledKind::Copy { bytes, .. } => {
                assert_eq!(e["cat"], "copy", "{e}");
                assert_eq!(e["args"]["bytes"].as_u64(), Some(*bytes as u64), "{e}");
            }
            ProfiledKind::GraphReplay { nodes } => {
                assert_eq!(e["cat"], "graph", "{e}");
                assert_eq!(e["args"]["nodes"].as_u64(), Some(*nodes as u64), "{e}");
            }
        }
    }
    assert_eq!(tids.len(), 2, "{tids:?}");

    let json_path = temp_file("summary.json");
    r.write_json(&json_path).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).expect("summary is JSON");
    let names: Vec<&str> =
        json["kernels"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(names, r.kernels().iter().map(|k| k.name).collect::<Vec<_>>());
    assert_eq!(json["ops"].as_array().unwrap().len(), r.ops().len());
    let copied: u64 = json["copies"].as_array().unwrap().iter().map(|c| c["bytes"].as_u64().unwrap()).sum();
    assert_eq!(copied, 4096 * 4 * 3, "{}", json["copies"]);
    assert!(json["pool"]["allocations"].as_u64().unwrap() > 0, "{}", json["pool"]);
    gpu.reset_profile().unwrap();
}

/// Replays of a captured graph: one record each, spanning its nodes (the capture itself records
/// nothing), beside the eager launches around them; in the table and in the trace.
fn graph_replays_are_recorded(gpu: &Context) {
    let x = gpu.randn(&[1 << 20], 13).unwrap();
    let mut out = None;
    let graph = gpu
        .capture(|| {
            // Three kernels: two independent, one joining them.
            out = Some(x.relu()?.add(&x.gelu()?)?);
            Ok(())
        })
        .unwrap();
    gpu.synchronize().unwrap();
    gpu.reset_profile().unwrap();
    let guard = gpu.profiler_guard().unwrap();
    for _ in 0..5 {
        graph.launch().unwrap();
    }
    let eager = x.relu().unwrap();
    drop((out.unwrap().to_vec().unwrap(), eager.to_vec().unwrap()));
    drop(guard);
    let r = gpu.profile_report().unwrap();
    println!("{r}");
    check_times(&r);
    assert_eq!(kernel_calls(&r), expected(&[("graph replay", 5), ("relu_f32", 1)]), "{r}");
    let replays: Vec<_> =
        r.ops().iter().filter(|op| op.kind == ProfiledKind::GraphReplay { nodes: 3 }).collect();
    assert_eq!(replays.len(), 5, "{r}");
    // A replay spans its three kernels over 2^20 values: longer than the eager relu alone.
    let relu = r.ops().iter().find(|op| op.kind.name() == "relu_f32").expect("eager relu");
    assert!(replays.iter().all(|op| op.dur_us > relu.dur_us), "{r}");
    let trace = r.to_chrome_trace();
    assert_eq!(trace.matches("\"cat\":\"graph\"").count(), 5, "{trace}");
    gpu.reset_profile().unwrap();
}

fn cpu_backend_report_is_empty() {
    let cpu = Context::cpu();
    cpu.profile(true).unwrap();
    assert!(!cpu.is_profiling());
    let guard = cpu.profiler_guard().unwrap();
    let x = cpu.randn(&[100], 1).unwrap();
    drop(x.add(&x).unwrap().sum().unwrap().to_vec().unwrap());
    drop(guard);
    cpu.reset_profile().unwrap();
    let r = cpu.profile_report().unwrap();
    assert!(r.ops().is_empty() && r.kernels().is_empty() && r.copies().is_empty() && r.pool().is_none());
    let note = r.note().expect("a note");
    assert!(note.contains("CPU backend"), "{note}");
    assert!(r.to_string().contains(note), "{r}");

    let trace_path = temp_file("cpu-trace.json");
    r.write_chrome_trace(&trace_path).unwrap();
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace_path).unwrap()).unwrap();
    assert_eq!(trace["traceEvents"].as_array().map(Vec::len), Some(0));
    let json_path = temp_file("cpu-summary.json");
    r.write_json(&json_path).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(json["note"].as_str(), Some(note));
    assert!(json["pool"].is_null() && json["kernels"].as_array().unwrap().is_empty());

    let missing = temp_file("no-such-dir").join("trace.json");
    let err = r.write_chrome_trace(&missing).unwrap_err();
    assert!(
        matches!(&err, Error::Io { op: "write_chrome_trace", path, .. } if path.ends_with("trace.json")),
        "{err}"
    );
}

fn main() {
    run(&[
        ("records_known_ops", Case::Gpu(records_known_ops)),
        ("off_records_nothing", Case::Gpu(off_records_nothing)),
        ("guard_turns_profiling_off", Case::Gpu(guard_turns_profiling_off)),
        ("four_threads_three_streams", Case::Gpu(four_threads_three_streams)),
        ("pinned_copies_are_recorded", Case::Gpu(pinned_copies_are_recorded)),
        ("exports_parse", Case::Gpu(exports_parse)),
        ("graph_replays_are_recorded", Case::Gpu(graph_replays_are_recorded)),
        ("cpu_backend_report_is_empty", Case::Cpu(cpu_backend_report_is_empty)),
    ]);
}
