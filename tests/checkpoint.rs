//! Checkpoints (safetensors): round trips of every dtype on both backends, metadata, typed errors
//! for bad files, and interop with Python's safetensors + PyTorch (`scripts/safetensors_interop.py`)
//! where a `python3` with both is found (the GPU machine has them; `FERROCUDA_REQUIRE_PYTHON=1`
//! makes their absence a failure).
mod common;
use common::*;
use ferrocuda::checkpoint::{load, save};
use ferrocuda::{bf16, f16, Context, DType, Error, Tensor};
use std::path::PathBuf;
use std::process::Command;

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ferrocuda-{}-{name}", std::process::id()))
}

/// The interop script's pattern, rounded to f32.
fn pattern(n: f64, len: usize) -> Vec<f32> {
    (0..len).map(|i| ((0.37 * i as f64 + n).sin() * (1 + i % 7) as f64) as f32).collect()
}

fn tensor_of(ctx: &Context, dtype: DType, values: &[f32], shape: &[usize]) -> Tensor {
    match dtype {
        DType::F32 => ctx.from_slice(values, shape),
        DType::F16 => ctx.from_slice(&values.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>(), shape),
        DType::BF16 => ctx.from_slice(&values.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>(), shape),
    }
    .expect("upload")
}

/// Bits of every element, whatever the dtype.
fn bits(t: &Tensor) -> Vec<u32> {
    match t.dtype() {
        DType::F32 => t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect(),
        DType::F16 => t.to_vec_of::<f16>().unwrap().iter().map(|v| v.to_bits() as u32).collect(),
        DType::BF16 => t.to_vec_of::<bf16>().unwrap().iter().map(|v| v.to_bits() as u32).collect(),
    }
}

/// Tensors named `<dtype>_<n>` holding `pattern(n)`: every dtype, a scalar, odd shapes, empty.
fn sample_tensors(ctx: &Context) -> Vec<(String, Tensor)> {
    let shapes: [&[usize]; 5] = [&[], &[1], &[31, 3], &[2, 3, 1000], &[0, 4]];
    let mut out = Vec::new();
    for (d, (dtype, tag)) in
        [(DType::F32, "f32"), (DType::F16, "f16"), (DType::BF16, "bf16")].into_iter().enumerate()
    {
        for (s, shape) in shapes.iter().enumerate() {
            let n = d * 10 + s + 1;
            let len: usize = shape.iter().product();
            out.push((format!("{tag}_{n}"), tensor_of(ctx, dtype, &pattern(n as f64, len), shape)));
        }
    }
    out
}

fn round_trip_on(ctx: &Context) {
    let path = temp("round-trip.safetensors");
    let tensors = sample_tensors(ctx);
    let meta = vec![("layers".to_string(), "6".to_string()), ("note".to_string(), "ünïcode".to_string())];
    save(&path, &tensors, &meta).unwrap();
    let back = load(ctx, &path).unwrap();
    assert_eq!(back.tensors.len(), tensors.len());
    for (name, t) in &tensors {
        let b = back.get(name).unwrap();
        assert_eq!((b.shape(), b.dtype()), (t.shape(), t.dtype()), "{name}");
        assert_eq!(bits(b), bits(t), "{name}: values");
    }
    assert_eq!(back.meta("layers"), Some("6"));
    assert_eq!(back.meta("note"), Some("ünïcode"));
    // Loaded onto the other backend, the same bits.
    let cpu = load(&Context::cpu(), &path).unwrap();
    for (name, t) in &tensors {
        assert_eq!(bits(cpu.get(name).unwrap()), bits(t), "{name} on the CPU backend");
    }
    std::fs::remove_file(&path).ok();
}

fn gpu_round_trip(ctx: &Context) {
    round_trip_on(ctx);
}

fn cpu_round_trip() {
    round_trip_on(&Context::cpu());
}

fn cpu_bad_files_are_typed_errors() {
    let ctx = Context::cpu();
    let missing = temp("missing.safetensors");
    assert!(matches!(load(&ctx, &missing), Err(Error::Io { .. })), "a missing file");
    let garbage = temp("garbage.safetensors");
    std::fs::write(&garbage, b"\x10\0\0\0\0\0\0\0{not json}").unwrap();
    let err = load(&ctx, &garbage).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "checkpoint::load", .. }), "{err}");
    assert!(err.to_string().contains("garbage.safetensors"), "names the file: {err}");
    std::fs::write(&garbage, b"\x03").unwrap();
    assert!(load(&ctx, &garbage).is_err(), "a truncated header");
    let back = load(&ctx, {
        let p = temp("one.safetensors");
        save(&p, &[("x".into(), ctx.full(&[2], 1.0).unwrap())], &[]).unwrap();
        p
    })
    .unwrap();
    let err = back.get("y").unwrap_err();
    assert!(err.to_string().contains("\"y\""), "names the tensor: {err}");
    let dup =
        [("x".to_string(), ctx.full(&[1], 1.0).unwrap()), ("x".to_string(), ctx.full(&[1], 2.0).unwrap())];
    let err = save(temp("dup.safetensors"), &dup, &[]).unwrap_err();
    assert!(err.to_string().contains("\"x\" twice"), "a duplicate name: {err}");
    std::fs::remove_file(garbage).ok();
}

/// `python3` with safetensors and torch, and the interop script, or `None` (said loudly).
fn python() -> Option<PathBuf> {
    let script = [
        "scripts/safetensors_interop.py",
        concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/safetensors_interop.py"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists());
    let works = Command::new("python3")
        .args(["-c", "import safetensors.torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    match (script, works) {
        (Some(script), true) => Some(script),
        _ if std::env::var("FERROCUDA_REQUIRE_PYTHON").is_ok_and(|v| v == "1") => {
            panic!(
                "FERROCUDA_REQUIRE_PYTHON=1 but no python3 with safetensors and torch (or no interop script)"
            )
        }
        _ => {
            println!("    skipped (no python3 with safetensors and torch)");
            None
        }
    }
}

fn run_script(script: &PathBuf, args: &[&str]) {
    let out = Command::new("python3").arg(script).args(args).output().expect("python3 runs");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "python3 {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn cpu_python_reads_ours_and_we_read_pythons() {
    let Some(script) = python() else { return };
    let ctx = if Context::cuda_available() { Context::cuda(0).unwrap() } else { Context::cpu() };
    let ours = temp("ours.safetensors");
    save(&ours, &sample_tensors(&ctx), &[]).unwrap();
    run_script(&script, &["check", ours.to_str().unwrap()]);
    let (theirs, raw) = (temp("theirs.safetensors"), temp("theirs.raw"));
    run_script(&script, &["write", theirs.to_str().unwrap(), raw.to_str().unwrap()]);
    let back = load(&ctx, &theirs).unwrap();
    assert_eq!(back.meta("written_by").map(|s| s.starts_with("torch")), Some(true));
    let expect = std::fs::read(&raw).unwrap();
    let mut got = Vec::new();
    for (name, t) in &back.tensors {
        match (name.as_str(), t.dtype()) {
            ("f32_a", DType::F32) => assert_eq!(t.shape(), [3, 17]),
            ("bf16_b", DType::BF16) => assert_eq!(t.shape(), [31]),
            ("f16_c", DType::F16) => assert_eq!(t.shape(), [2, 3, 5]),
            other => panic!("unexpected tensor {other:?}"),
        }
        let width = t.dtype().size_bytes();
        got.extend(bits(t).iter().flat_map(|b| b.to_le_bytes()[..width].to_vec()));
    }
    assert_eq!(got, expect, "the bytes PyTorch wrote");
    for p in [ours, theirs, raw] {
        std::fs::remove_file(p).ok();
    }
}

fn main() {
    run(&[
        ("gpu_round_trip", Case::Gpu(gpu_round_trip)),
        ("cpu_round_trip", Case::Cpu(cpu_round_trip)),
        ("cpu_bad_files_are_typed_errors", Case::Cpu(cpu_bad_files_are_typed_errors)),
        ("cpu_python_reads_ours_and_we_read_pythons", Case::Cpu(cpu_python_reads_ours_and_we_read_pythons)),
    ]);
}
