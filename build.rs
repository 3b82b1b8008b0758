//! Builds `gpu-kernels/` (no_std Rust) into two PTX modules: `$OUT_DIR/kernels.ptx` for every GPU
//! (`FERROCUDA_SM`, default sm_90) and `$OUT_DIR/kernels_sm90a.ptx`, the same kernels plus the
//! Hopper-only ones (cargo feature `sm90a`: wgmma, TMA), which the host loads on compute
//! capability 9.0. Both builds share one target directory and so one build of `core`; the second
//! only relinks for sm_90a.
//!
//! The kernel toolchain is Debian's `rustc-web` (rustc 1.96, LLVM 22) with its own library source,
//! `-Zbuild-std=core` for `nvptx64-nvidia-cuda`, and an llvm-link → opt → llc link step
//! (`gpu-kernels/link.sh`). Variables:
//! - `FERROCUDA_SM`: the PTX target (default `sm_90`; newer GPUs JIT-compile it);
//! - `FERROCUDA_RUSTUP_TOOLCHAIN`: use this rustup toolchain instead (it needs `rust-src` and
//!   `llvm-tools`);
//! - `FERROCUDA_KERNEL_RUSTC`, `FERROCUDA_KERNEL_CARGO`, `FERROCUDA_LLVM_BIN`: name each tool;
//! - `FERROCUDA_PTXAS`: a `ptxas` to assemble the PTX with (else `ptxas` on PATH, if any);
//! - `FERROCUDA_PTX`: a prebuilt PTX file to embed instead of building one (and
//!   `FERROCUDA_PTX_SM90A` the sm_90a one; without it the host uses the first module everywhere).
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

const INSTALL: &str =
    "apt-get install -y --no-install-recommends rustc-web cargo-web rust-web-src rust-web-llvm";
#[path = "gpu-kernels/src/shapes.rs"]
#[allow(dead_code)]
mod shapes;

/// The target of the Hopper module.
const SM90A: &str = "sm_90a";
/// Kernels whose PTX gets `.maxntid` (so that ptxas budgets registers for that many threads and
/// `setmaxnreg` may move them): name prefix, threads per block.
const MAX_THREADS: [(&str, usize); 1] = [("gemm_wgmma_", shapes::WGMMA_THREADS)];

const ENV_VARS: [&str; 8] = [
    "FERROCUDA_SM",
    "FERROCUDA_RUSTUP_TOOLCHAIN",
    "FERROCUDA_KERNEL_RUSTC",
    "FERROCUDA_KERNEL_CARGO",
    "FERROCUDA_LLVM_BIN",
    "FERROCUDA_PTXAS",
    "FERROCUDA_PTX",
    "FERROCUDA_PTX_SM90A",
];

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels = root.join("gpu-kernels");
    for p in ["src", "Cargo.toml", "link.sh"] {
        println!("cargo:rerun-if-changed={}", kernels.join(p).display());
    }
    for v in ENV_VARS {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let sm = env::var("FERROCUDA_SM").unwrap_or_else(|_| "sm_90".into());
    let ptx = out.join("kernels.ptx");
    let ptx_sm90a = out.join("kernels_sm90a.ptx");

    if let Ok(prebuilt) = env::var("FERROCUDA_PTX") {
        println!("cargo:rerun-if-changed={prebuilt}");
        fs::copy(&prebuilt, &ptx).unwrap_or_else(|e| fail(&format!("FERROCUDA_PTX={prebuilt}: {e}")));
        match env::var("FERROCUDA_PTX_SM90A") {
            Ok(prebuilt) => {
                println!("cargo:rerun-if-changed={prebuilt}");
                fs::copy(&prebuilt, &ptx_sm90a)
                    .unwrap_or_else(|e| fail(&format!("FERROCUDA_PTX_SM90A={prebuilt}: {e}")));
            }
            Err(_) => fs::write(&ptx_sm90a, "").unwrap_or_else(|e| fail(&format!("writing PTX: {e}"))),
        }
    } else {
        let tools = KernelToolchain::find().unwrap_or_else(|missing| {
            fail(&format!(
                "no kernel toolchain: {missing}.\n  Install Debian's: {INSTALL}\n  \
                 or set FERROCUDA_RUSTUP_TOOLCHAIN to a rustup toolchain with rust-src and llvm-tools"
            ))
        });
        let smem = out.join("shared_memory.ll");
        fs::write(&smem, shared_memory_module(&kernels.join("src")))
            .unwrap_or_else(|e| fail(&format!("writing {}: {e}", smem.display())));
        let target_dir = kernel_target_dir(&out);
        let built = tools.build(&kernels, &target_dir, &sm, None, &smem);
        fs::copy(&built, &ptx).unwrap_or_else(|e| fail(&format!("copying {}: {e}", built.display())));
        let built = tools.build(&kernels, &target_dir, &sm, Some(SM90A), &smem);
        let text = fs::read_to_string(&built).unwrap_or_else(|e| fail(&format!("reading PTX: {e}")));
        fs::write(&ptx_sm90a, with_max_threads(&text))
            .unwrap_or_else(|e| fail(&format!("writing {}: {e}", ptx_sm90a.display())));
    }
    for (file, arch) in [(&ptx, sm.as_str()), (&ptx_sm90a, SM90A)] {
        let text = fs::read_to_string(file).unwrap_or_else(|e| fail(&format!("reading PTX: {e}")));
        if !text.is_empty() {
            refuse_unresolved_externs(&text);
            assemble_with_ptxas(file, arch, &out);
        }
    }
}

/// Add `.maxntid` to the kernels named in `MAX_THREADS` (rustc has no launch-bounds attribute).
fn with_max_threads(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 1024);
    let mut pending = None;
    for line in ptx.lines() {
        if let Some(name) = line.trim_start().strip_prefix(".visible .entry ") {
            pending = MAX_THREADS.iter().find(|(prefix, _)| name.starts_with(prefix)).map(|&(_, n)| n);
        }
        if line == "{" {
            if let Some(threads) = pending.take() {
                writeln!(out, ".maxntid {threads}, 1, 1").expect("write to String");
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn fail(msg: &str) -> ! {
    eprintln!("\nferrocuda build: {msg}\n");
    exit(1)
}

struct KernelToolchain {
    rustc: PathBuf,
    cargo: PathBuf,
    llvm_bin: PathBuf,
}

impl KernelToolchain {
    /// Debian's rustc-web by default; a rustup toolchain or explicit tools when asked.
    fn find() -> Result<Self, String> {
        let (rustc, cargo) = match env::var("FERROCUDA_RUSTUP_TOOLCHAIN") {
            Ok(tc) => (rustup_which(&tc, "rustc")?, rustup_which(&tc, "cargo")?),
            Err(_) => (
                env::var("FERROCUDA_KERNEL_RUSTC").unwrap_or_else(|_| "/usr/bin/rustc".into()).into(),
                env::var("FERROCUDA_KERNEL_CARGO").unwrap_or_else(|_| "/usr/bin/cargo".into()).into(),
            ),
        };
        for tool in [&rustc, &cargo] {
            if !tool.is_file() {
                return Err(format!("{} not found", tool.display()));
            }
        }
        let version = capture(Command::new(&rustc).arg("-vV"))?;
        let field = |key: &str| {
            version.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).unwrap_or("").to_string()
        };
        let sysroot = PathBuf::from(capture(Command::new(&rustc).args(["--print", "sysroot"]))?.trim());
        let core_src = sysroot.join("lib/rustlib/src/rust/library/core");
        if !core_src.is_dir() {
            return Err(format!(
                "{} has no library source ({} missing)",
                rustc.display(),
                core_src.display()
            ));
        }
        let llvm_bin = match env::var("FERROCUDA_LLVM_BIN") {
            Ok(dir) => PathBuf::from(dir),
            Err(_) if env::var("FERROCUDA_RUSTUP_TOOLCHAIN").is_ok() => {
                sysroot.join("lib/rustlib").join(field("host: ")).join("bin")
            }
            Err(_) => {
                let major = field("LLVM version: ").split('.').next().unwrap_or("").to_string();
                PathBuf::from(format!("/usr/lib/llvm-{major}/bin"))
            }
        };
        for t in ["llvm-link", "opt", "llc"] {
            if !llvm_bin.join(t).is_file() {
                return Err(format!(
                    "{} not found (it must be the LLVM rustc was built with)",
                    llvm_bin.join(t).display()
                ));
            }
        }
        Ok(Self { rustc, cargo, llvm_bin })
    }

    /// `cargo build` of the kernel crate for nvptx64 with core built from source; returns the PTX.
    /// With `sm90a`, the crate's `sm90a` feature is on and the link step targets that CPU instead
    /// (rustc's flags, and so the `core` build, stay those of `sm`).
    fn build(
        &self,
        kernels: &Path,
        target_dir: &Path,
        sm: &str,
        sm90a: Option<&str>,
        smem: &Path,
    ) -> PathBuf {
        let ptx = target_dir.join(format!("gpu_kernels.{}.ptx", sm90a.unwrap_or(sm)));
        for attempt in 0..2 {
            self.cargo_build(kernels, target_dir, sm, sm90a, smem, &ptx);
            if ptx.is_file() {
                return ptx;
            }
            // Cargo found the crate fresh, but this module's copy is missing: forget the crate's
            // fingerprints so that it links again.
            if attempt == 0 {
                let fingerprints = target_dir.join("nvptx64-nvidia-cuda/release/.fingerprint");
                for entry in fs::read_dir(&fingerprints).into_iter().flatten().flatten() {
                    if entry.file_name().to_string_lossy().starts_with("gpu-kernels-") {
                        let _ = fs::remove_dir_all(entry.path());
                    }
                }
            }
        }
        fail(&format!("the kernel build left no {}", ptx.display()))
    }

    fn cargo_build(
        &self,
        kernels: &Path,
        target_dir: &Path,
        sm: &str,
        sm90a: Option<&str>,
        smem: &Path,
        ptx: &Path,
    ) {
        let linker = kernels.join("link.sh");
        let rustflags = format!(
            "[\"-Ctarget-cpu={sm}\",\"-Clink-arg={}\",\"-Zunstable-options\",\"-Cpanic=immediate-abort\"]",
            smem.display()
        );
        let mut cmd = Command::new(&self.cargo);
        // The outer cargo's variables (RUSTC, RUSTFLAGS, CARGO_TARGET_DIR, RUSTUP_TOOLCHAIN, ...)
        // would steer the nested build to the host toolchain: drop them all.
        for (name, _) in env::vars_os() {
            let name = name.to_string_lossy();
            let inherited = name.starts_with("CARGO") && name != "CARGO_HOME"
                || name.starts_with("RUSTC")
                || name.starts_with("RUSTDOC")
                || name.starts_with("__CARGO")
                || name == "RUSTFLAGS"
                || name == "RUSTUP_TOOLCHAIN";
            if inherited {
                cmd.env_remove(name.as_ref());
            }
        }
        cmd.env("RUSTC", &self.rustc)
            .env("RUSTC_BOOTSTRAP", "1")
            .env("NVPTX_LLVM_BIN", &self.llvm_bin)
            .env("NVPTX_PTX_COPY", ptx)
            .arg("build")
            .arg("--manifest-path")
            .arg(kernels.join("Cargo.toml"))
            .args(["--release", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core"])
            .arg("--target-dir")
            .arg(target_dir)
            .arg("--config")
            .arg(format!("target.nvptx64-nvidia-cuda.linker=\"{}\"", linker.display()))
            .arg("--config")
            .arg(format!("target.nvptx64-nvidia-cuda.rustflags={rustflags}"));
        match sm90a {
            Some(cpu) => cmd.env("NVPTX_TARGET_CPU", cpu).args(["--features", "sm90a"]),
            None => cmd.env_remove("NVPTX_TARGET_CPU"),
        };
        let status = cmd.status().unwrap_or_else(|e| fail(&format!("running {}: {e}", self.cargo.display())));
        if !status.success() {
            fail("the kernel crate gpu-kernels failed to build (its errors are above)");
        }
    }
}

fn rustup_which(toolchain: &str, tool: &str) -> Result<PathBuf, String> {
    let path = capture(Command::new("rustup").args(["which", "--toolchain", toolchain, tool]))?;
    Ok(PathBuf::from(path.trim()))
}

fn capture(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The kernel build's own target directory, beside the host's build outputs in the cargo target
/// directory (marked by CACHEDIR.TAG), so every profile shares one prebuilt `core`.
fn kernel_target_dir(out: &Path) -> PathBuf {
    out.ancestors().find(|d| d.join("CACHEDIR.TAG").is_file()).unwrap_or(out).join("gpu-kernels")
}

/// The LLVM module that defines every `shared_array!` of the kernel sources in `addrspace(3)`,
/// plus the dynamic shared-memory window and its accessor.
fn shared_memory_module(src: &Path) -> String {
    let mut ll = String::from(
        "; Generated by build.rs from the shared_array! declarations in gpu-kernels/src.\n\
         target datalayout = \"e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64\"\n\
         target triple = \"nvptx64-nvidia-cuda\"\n\
         @FERROCUDA_DYN_SMEM = external addrspace(3) global [0 x i8], align 16\n\
         define ptr @ferrocuda_dyn_smem() alwaysinline {\n  \
         ret ptr addrspacecast (ptr addrspace(3) @FERROCUDA_DYN_SMEM to ptr)\n}\n",
    );
    let mut files = Vec::new();
    collect_rs(src, &mut files);
    files.sort();
    for file in files {
        let text = fs::read_to_string(&file).unwrap_or_else(|e| fail(&format!("{}: {e}", file.display())));
        // A declaration is a statement of its own; mentions in comments and docs are not.
        let starts = text
            .match_indices("shared_array!(")
            .map(|(at, _)| at)
            .filter(|&at| text[..at].rsplit('\n').next().is_some_and(|line| line.trim().is_empty()));
        for at in starts {
            let rest = &text[at + "shared_array!(".len()..];
            let decl = &rest[..rest
                .find(");")
                .unwrap_or_else(|| fail(&format!("{}: unterminated shared_array!", file.display())))];
            let (name, ty, len) = parse_shared_decl(decl)
                .unwrap_or_else(|| fail(&format!("{}: cannot read `shared_array!({decl})`: expected `static NAME: [f32|u32|i32|f64|u64|u8; LEN]` with LEN made of integer literals, `*` and `+`", file.display())));
            writeln!(ll, "@{name} = addrspace(3) global [{len} x {ty}] undef, align 16")
                .expect("write to String");
        }
    }
    ll
}

fn collect_rs(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display()))) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_rs(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `static NAME: [T; LEN]` → (NAME, LLVM type, LEN).
fn parse_shared_decl(decl: &str) -> Option<(String, &'static str, u64)> {
    let decl = decl.trim().strip_prefix("static ")?;
    let (name, ty) = decl.split_once(':')?;
    let inner = ty.trim().strip_prefix('[')?.strip_suffix(']')?;
    let (elem, len) = inner.split_once(';')?;
    let llvm = match elem.trim() {
        "f32" => "float",
        "f64" => "double",
        "u32" | "i32" => "i32",
        "u64" | "i64" => "i64",
        "u8" | "i8" => "i8",
        _ => return None,
    };
    let mut total = 0u64;
    for term in len.split('+') {
        let mut product = 1u64;
        for factor in term.split('*') {
            product = product.checked_mul(factor.trim().replace('_', "").parse().ok()?)?;
        }
        total = total.checked_add(product)?;
    }
    let name = name.trim();
    name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_').then(|| (name.to_string(), llvm, total))
}

/// A misspelt `llvm.*` intrinsic or a missing symbol becomes an `.extern .func` that fails only when
/// the driver loads the module: refuse it here.
fn refuse_unresolved_externs(ptx: &str) {
    let bad: Vec<&str> =
        ptx.lines().filter(|l| l.trim_start().starts_with(".extern") && !l.contains(".shared")).collect();
    if !bad.is_empty() {
        fail(&format!("the kernel PTX has unresolved externs:\n  {}", bad.join("\n  ")));
    }
}

/// Assemble with `ptxas` where one is found, so PTX the driver would reject fails the build.
fn assemble_with_ptxas(ptx: &Path, sm: &str, out: &Path) {
    let ptxas = env::var("FERROCUDA_PTXAS").unwrap_or_else(|_| "ptxas".into());
    let run = Command::new(&ptxas)
        .arg(format!("-arch={sm}"))
        .arg("-v")
        .arg(ptx)
        .arg("-o")
        .arg(out.join(format!("kernels.{sm}.cubin")))
        .output();
    match run {
        Ok(o) if o.status.success() => {
            let report = String::from_utf8_lossy(&o.stderr);
            warn_about_local_memory(&report);
            fs::write(out.join(format!("ptxas.{sm}.log")), report.as_bytes())
                .unwrap_or_else(|e| fail(&format!("writing ptxas.log: {e}")));
        }
        Ok(o) => fail(&format!(
            "ptxas -arch={sm} rejected the kernel PTX:\n{}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(_) if env::var("FERROCUDA_PTXAS").is_ok() => {
            fail(&format!("FERROCUDA_PTXAS={ptxas} cannot be run"))
        }
        Err(_) => println!(
            "cargo:warning=ferrocuda kernels: no ptxas found; PTX not assembled (set FERROCUDA_PTXAS)"
        ),
    }
}

/// Kernels keep their arrays in registers (unrolled loops, constant indices); a stack frame means
/// one went to local memory, which costs bandwidth. Say which.
fn warn_about_local_memory(ptxas_report: &str) {
    let mut kernel = "";
    for line in ptxas_report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            kernel = rest.split('\'').next().unwrap_or("");
        } else if let Some((frame, spills)) = line.trim().split_once(" bytes stack frame, ") {
            if frame != "0" || spills != "0 bytes spill stores, 0 bytes spill loads" {
                println!("cargo:warning=kernel {kernel} uses local memory: {}", line.trim());
            }
        }
    }
}
