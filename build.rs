//! Builds `gpu-kernels/` (no_std Rust) into one PTX module per `module` of
//! `gpu-kernels/src/kernels.rs` (the kernel crate's cargo feature of that name selects its
//! kernels), assembles each with `ptxas` into a cubin where a ptxas is found, and writes
//! `$OUT_DIR/modules.rs`, which embeds every cubin and, for the portable modules, the PTX
//! (deflated) that the driver JIT-compiles on GPUs no cubin fits.
//!
//! Portable modules target `FERROCUDA_SM` (default sm_90); `sm_90a` modules hold the Hopper-only
//! kernels (wgmma, TMA) and exist only as cubins for compute capability 9.0. All module builds share
//! one target directory and so one build of `core`; a kernel edit rebuilds and reassembles only the
//! modules whose sources it touches (cubins are cached by a hash of their PTX), and each module's
//! ptxas runs while the next module builds.
//!
//! The kernel toolchain is Debian's `rustc-web` (rustc 1.96, LLVM 22) with its own library source,
//! `-Zbuild-std=core` for `nvptx64-nvidia-cuda`, and an llvm-link → opt → llc link step
//! (`gpu-kernels/link.sh`). Variables:
//! - `FERROCUDA_SM`: the portable modules' target (default `sm_90`; newer GPUs JIT-compile it);
//!   the sm_90a modules are built only when it is sm_90;
//! - `FERROCUDA_RUSTUP_TOOLCHAIN`: use this rustup toolchain instead (it needs `rust-src` and
//!   `llvm-tools`);
//! - `FERROCUDA_KERNEL_RUSTC`, `FERROCUDA_KERNEL_CARGO`, `FERROCUDA_LLVM_BIN`: name each tool;
//! - `FERROCUDA_PTXAS`: the `ptxas` to assemble with (else `ptxas` on PATH, the CUDA toolkit's, or
//!   the PyPI package `nvidia-cuda-nvcc` in `.cuda-venv/` or a Python site directory);
//! - `FERROCUDA_PREBUILT_PTX`: a folder of `<module>.<arch>.ptx` files (as this script leaves in
//!   `$OUT_DIR`) to embed instead of building the kernels.
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};
use std::thread;

const INSTALL: &str = "bash scripts/setup-debian.sh";
const INSTALL_PTXAS: &str =
    "python3 -m venv .cuda-venv && .cuda-venv/bin/pip install --no-deps nvidia-cuda-nvcc==13.0.88";
#[path = "gpu-kernels/src/shapes.rs"]
#[allow(dead_code)]
mod shapes;

/// One `module` entry of `gpu-kernels/src/kernels.rs`.
struct ModuleSpec {
    name: &'static str,
    feature: &'static str,
    /// `portable` (built for `FERROCUDA_SM`) or `sm_90a`.
    arch: &'static str,
    kernels: &'static [&'static str],
}

/// Reads `kernels.rs` into `kernels::MODULES` (names only; the kernel crate checks the types).
macro_rules! kernel_table {
    ($(module $module:ident($feature:literal, $arch:ident) {
        $($($path:ident)::+ {
            $([$($name:ident),+ $(,)?]($($arg:ident: $ty:ty),* $(,)?);)*
        })*
    })*) => {
        pub const MODULES: &[crate::ModuleSpec] = &[$(crate::ModuleSpec {
            name: stringify!($module),
            feature: $feature,
            arch: stringify!($arch),
            kernels: &[$($($(stringify!($name),)+)*)*],
        }),*];
    };
}
#[path = "gpu-kernels/src/kernels.rs"]
mod kernels;

/// Kernels whose PTX gets `.maxntid` (so that ptxas budgets registers for that many threads and
/// `setmaxnreg` may move them): name prefix, threads per block.
const MAX_THREADS: [(&str, usize); 17] = [
    ("gemm_wgmma_", shapes::WGMMA_THREADS),
    ("conv2d_fwd_wgmma_", shapes::WGMMA_THREADS),
    ("conv2d_bwd_weight_wgmma_", shapes::WGMMA_THREADS),
    ("attention_bwd_wgmma_", shapes::ATTN_WG_THREADS),
    // One block of LAYERNORM_FUSED_BLOCK threads an SM (its last block's fold would take more).
    ("layernorm_bwd_f", shapes::LAYERNORM_FUSED_BLOCK),
    ("layernorm_bwd_bf", shapes::LAYERNORM_FUSED_BLOCK),
    ("layernorm_bwd_add_", shapes::LAYERNORM_FUSED_BLOCK),
    ("layernorm_warp_bwd_", shapes::LAYERNORM_FUSED_BLOCK),
    ("attention_fwd_wgmma_", shapes::ATTN_WGMMA_THREADS),
    // At most 64 registers a thread: two blocks of CE_BLOCK_MAX threads fit an SM.
    ("cross_entropy_f", shapes::CE_BLOCKS_PER_SM * shapes::CE_BLOCK_MAX),
    ("cross_entropy_bf", shapes::CE_BLOCKS_PER_SM * shapes::CE_BLOCK_MAX),
    // At most 128 registers a thread: two blocks fit an SM (one leaves 8 warps, too few to hide
    // the latency of the loads of B and of the FMAs' shared loads of A; perf-notes).
    ("gemv_f32_nn_r16", shapes::GEMV_F32_NN_R16_BLOCKS_PER_SM * shapes::GEMV_THREADS),
    // At most 64 registers a thread: four blocks of 256 an SM for the layer norm of rows split
    // over a cluster (the other builds keep 72: the aligned rows' 32 values a thread spill).
    ("layernorm_fwd_cluster_", 1024),
    // Five blocks an SM (48 registers, `MIN_BLOCKS_PER_SM`): the f32 softmax of rows split over a
    // cluster is bound by L2 throughput, and four blocks an SM (56 registers) lost 4-5% at
    // (4096, 50257).
    ("softmax_cluster_f32", shapes::NN_ROW_BLOCK),
    // Five blocks an SM too (48 registers): at four (62 registers) f32 (8192, 50257) ran at
    // 45% achieved occupancy and 63% of DRAM's peak.
    ("cross_entropy_cluster_f32", shapes::NN_ROW_BLOCK),
    // Three blocks an SM, as `conv_plan` counts them (host/src/ops/conv.rs).
    (
        "conv2d_fwd_f32_medium",
        shapes::CONV_MEDIUM_BLOCKS_PER_SM * shapes::gemm_threads(shapes::GEMM_TILE_MEDIUM),
    ),
    (
        "conv2d_bwd_weight_f32_medium",
        shapes::CONV_MEDIUM_BLOCKS_PER_SM * shapes::gemm_threads(shapes::GEMM_TILE_MEDIUM),
    ),
];

const ENV_VARS: [&str; 7] = [
    "FERROCUDA_SM",
    "FERROCUDA_RUSTUP_TOOLCHAIN",
    "FERROCUDA_KERNEL_RUSTC",
    "FERROCUDA_KERNEL_CARGO",
    "FERROCUDA_LLVM_BIN",
    "FERROCUDA_PTXAS",
    "FERROCUDA_PREBUILT_PTX",
];

/// Cubins larger than this many bytes are embedded deflated.
const CUBIN_DEFLATE_MIN: u64 = 1 << 20;

/// A module as embedded: its PTX file, and the cubin and deflated PTX made from it.
struct BuiltModule {
    spec: &'static ModuleSpec,
    arch: String,
    ptx: PathBuf,
}

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
    let ptxas = find_ptxas(&root);
    let cache = kernel_target_dir(&out).join("cubin-cache");
    fs::create_dir_all(&cache).unwrap_or_else(|e| fail(&format!("{}: {e}", cache.display())));

    let modules: Vec<&'static ModuleSpec> =
        kernels::MODULES.iter().filter(|m| m.arch == "portable" || sm == "sm_90").collect();
    let prebuilt = env::var("FERROCUDA_PREBUILT_PTX").ok();
    let tools = match &prebuilt {
        Some(dir) => {
            println!("cargo:rerun-if-changed={dir}");
            None
        }
        None => Some(KernelToolchain::find().unwrap_or_else(|missing| {
            fail(&format!(
                "no kernel toolchain: {missing}.\n  Install Debian's: {INSTALL}\n  \
                 or set FERROCUDA_RUSTUP_TOOLCHAIN to a rustup toolchain with rust-src and llvm-tools"
            ))
        })),
    };
    // The shared-memory module's path is part of the kernel build's flags: one fixed path (written
    // only when its text changes) keeps every configuration of this crate on one build of core.
    let target_dir = kernel_target_dir(&out);
    let smem = target_dir.join("shared_memory.ll");
    let smem_text = shared_memory_module(&kernels.join("src"));
    if fs::read_to_string(&smem).ok().as_deref() != Some(smem_text.as_str()) {
        fs::write(&smem, smem_text).unwrap_or_else(|e| fail(&format!("writing {}: {e}", smem.display())));
    }

    // Each module's assembly runs on its own thread while the next module builds.
    let assemblies: Vec<_> = modules
        .iter()
        .map(|&spec| {
            let arch = if spec.arch == "portable" { sm.clone() } else { spec.arch.to_string() };
            let ptx = out.join(format!("{}.{arch}.ptx", spec.name));
            let text = match (&prebuilt, &tools) {
                (Some(dir), _) => {
                    let file = Path::new(dir).join(format!("{}.{arch}.ptx", spec.name));
                    fs::read_to_string(&file).unwrap_or_else(|e| fail(&format!("{}: {e}", file.display())))
                }
                (None, Some(tools)) => {
                    let built = tools.build(&kernels, &target_dir, &sm, spec, &smem);
                    fs::read_to_string(&built).unwrap_or_else(|e| fail(&format!("reading PTX: {e}")))
                }
                (None, None) => unreachable!("a toolchain is found when nothing is prebuilt"),
            };
            check_entries(spec, &text);
            refuse_unresolved_externs(&text);
            let waits = dependent_launch_entries(&text);
            fs::write(&ptx, with_max_threads(&with_tensor_map_alignment(&text)))
                .unwrap_or_else(|e| fail(&format!("writing {}: {e}", ptx.display())));
            let module = BuiltModule { spec, arch, ptx };
            let (ptxas, cache, out) = (ptxas.clone(), cache.clone(), out.clone());
            thread::spawn(move || (embed_files(&module, ptxas.as_deref(), &cache, &out), waits))
        })
        .collect();
    let mut embedded = Vec::new();
    let mut dependent = Vec::new();
    for a in assemblies {
        let (entry, waits) = a.join().unwrap_or_else(|_| fail("a module's assembly panicked"));
        embedded.push(entry);
        dependent.extend(waits);
    }
    dependent.sort_unstable();
    if ptxas.is_none() {
        println!(
            "cargo:warning=ferrocuda kernels: no ptxas found, so no cubins are embedded: the driver \
             JIT-compiles the PTX when a device is first opened (30-40 s on an H100; cached by the \
             driver afterwards). Install ptxas with: {INSTALL_PTXAS} (or set FERROCUDA_PTXAS)"
        );
    }
    let table = out.join("modules.rs");
    let dependent: String = dependent.iter().map(|k| format!("    {k:?},\n")).collect();
    let text = format!(
        "pub(crate) static EMBEDDED_MODULES: &[EmbeddedModule] = &[\n{}];\n\
         /// The kernels that wait for their stream predecessor before any memory access (sorted).\n\
         pub(crate) static DEPENDENT_LAUNCH_KERNELS: &[&str] = &[\n{dependent}];\n",
        embedded.concat()
    );
    fs::write(&table, text).unwrap_or_else(|e| fail(&format!("writing {}: {e}", table.display())));
}

/// Assemble (or take from the cache) the module's cubin and deflate its PTX; returns its entry of
/// `modules.rs`.
fn embed_files(module: &BuiltModule, ptxas: Option<&Path>, cache: &Path, out: &Path) -> String {
    let name = module.spec.name;
    let text = fs::read(&module.ptx).unwrap_or_else(|e| fail(&format!("reading PTX: {e}")));
    let cubin = match ptxas {
        Some(ptxas) => {
            let key = format!(
                "{name}.{}.{:016x}.cubin",
                module.arch,
                fnv1a(&[&text, ptxas.as_os_str().as_encoded_bytes()])
            );
            let cached = cache.join(&key);
            if !cached.is_file() {
                assemble_with_ptxas(ptxas, &module.ptx, &module.arch, &cached);
            }
            let log = out.join(format!("ptxas.{name}.{}.log", module.arch));
            fs::copy(cached.with_extension("log"), &log)
                .unwrap_or_else(|e| fail(&format!("writing {}: {e}", log.display())));
            Some(cached)
        }
        None => None,
    };
    // sm_90a PTX can only be JIT-compiled for compute capability 9.0, where its cubin runs: only
    // the portable modules carry their PTX.
    let deflated = out.join(format!("{name}.{}.ptx.deflate", module.arch));
    let ptx_len = if module.spec.arch == "portable" {
        fs::write(&deflated, miniz_oxide::deflate::compress_to_vec(&text, 6))
            .unwrap_or_else(|e| fail(&format!("writing {}: {e}", deflated.display())));
        text.len()
    } else {
        fs::write(&deflated, []).unwrap_or_else(|e| fail(&format!("writing {}: {e}", deflated.display())));
        0
    };
    // Large cubins are embedded deflated (~5× smaller; inflating one takes a few ms at its first
    // load), small ones as they are (the modules a small model loads stay instant).
    let (cubin, cubin_len) = match cubin {
        Some(path) if fs::metadata(&path).map_or(0, |m| m.len()) > CUBIN_DEFLATE_MIN => {
            let image = fs::read(&path).unwrap_or_else(|e| fail(&format!("reading {}: {e}", path.display())));
            let packed = out.join(format!("{name}.{}.cubin.deflate", module.arch));
            fs::write(&packed, miniz_oxide::deflate::compress_to_vec(&image, 6))
                .unwrap_or_else(|e| fail(&format!("writing {}: {e}", packed.display())));
            (Some(packed), image.len())
        }
        other => (other, 0),
    };
    let bytes = |p: Option<&Path>| match p {
        Some(p) => format!("include_bytes!({:?})", p.display().to_string()),
        None => "&[]".into(),
    };
    format!(
        "EmbeddedModule {{ name: {name:?}, arch: {:?}, cubin: {}, cubin_len: {cubin_len}, ptx_deflated: {}, \
         ptx_len: {ptx_len} }},\n",
        module.arch,
        bytes(cubin.as_deref()),
        bytes(Some(&deflated)),
    )
}

/// FNV-1a over the parts: a stable key for the cubin cache (std's hasher may change between
/// compiler releases).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for part in parts {
        for &b in *part {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The kernel a PTX line opens, if it is an `.entry` declaration.
fn entry_name(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix(".visible .entry ")?;
    rest.split(|c: char| c == '(' || c.is_whitespace()).next()
}

/// The module's `.entry` list must be exactly its kernels in `kernels.rs`.
fn check_entries(spec: &ModuleSpec, ptx: &str) {
    let mut entries: Vec<&str> = ptx.lines().filter_map(entry_name).collect();
    let mut declared = spec.kernels.to_vec();
    entries.sort_unstable();
    declared.sort_unstable();
    if entries != declared {
        let missing: Vec<_> = declared.iter().filter(|k| !entries.contains(k)).collect();
        let extra: Vec<_> = entries.iter().filter(|k| !declared.contains(k)).collect();
        fail(&format!(
            "module {}: the kernels built differ from gpu-kernels/src/kernels.rs\n  declared but not \
             built: {missing:?}\n  built but not declared: {extra:?}",
            spec.name
        ));
    }
}

/// The entries that may be launched as programmatic dependents: those whose straight-line start
/// holds `griddepcontrol.wait` (the prelude's `grid_dependency_sync`) before any branch or access
/// to memory other than its parameters, its local (stack) memory and shared memory. An entry with
/// a wait anywhere later fails the build: launched early, it could touch what its predecessor is
/// still writing. So does a non-coherent load (`ld.global.nc`) in an entry with a wait: `.nc`
/// promises ptxas that the data stays unchanged while the kernel runs, which lets it move such a
/// load above the wait (it did, for a tiny GEMM with 16 loads a thread: wrong products, call K7),
/// and a dependent grid runs while its predecessor still writes.
fn dependent_launch_entries(ptx: &str) -> Vec<String> {
    let mut found = Vec::new();
    // The open entry: its name, whether a branch or memory access came first, whether it waited.
    let mut entry: Option<(&str, bool, bool)> = None;
    for line in ptx.lines() {
        if let Some(name) = entry_name(line) {
            entry = Some((name, false, false));
            continue;
        }
        let Some((name, touched, waited)) = entry.as_mut() else { continue };
        if line == "}" {
            entry = None;
            continue;
        }
        // A guarded instruction (`@%p1 bra $L`) counts as its instruction.
        let mut op = line.trim_start();
        if let Some(guarded) = op.strip_prefix('@') {
            op = guarded.split_once(char::is_whitespace).map_or("", |(_, rest)| rest.trim_start());
        }
        if op.starts_with("ld.global.nc") && *waited {
            fail(&format!(
                "kernel {name}: a non-coherent load (ld.global.nc, the prelude's load_nc_*) after \
                 griddepcontrol.wait; ptxas may move it above the wait: use the coherent loads"
            ));
        }
        if op.starts_with("griddepcontrol.wait") {
            if *touched {
                fail(&format!(
                    "kernel {name}: griddepcontrol.wait (grid_dependency_sync) after a branch or a \
                     memory access; call it first"
                ));
            }
            if !*waited {
                found.push(name.to_string());
                *waited = true;
            }
            continue;
        }
        let local = ["ld.param", "ld.shared", "st.shared", "ld.local", "st.local"];
        let memory = ["ld.", "st.", "atom", "red.", "cp.", "prefetch", "tex.", "bra", "ret", "call"];
        if memory.iter().any(|m| op.starts_with(m)) && !local.iter().any(|m| op.starts_with(m)) {
            *touched = true;
        }
    }
    found
}

/// The first ptxas found: `FERROCUDA_PTXAS`, PATH, the CUDA toolkit, the PyPI package.
fn find_ptxas(root: &Path) -> Option<PathBuf> {
    if let Ok(p) = env::var("FERROCUDA_PTXAS") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            fail(&format!("FERROCUDA_PTXAS={} is not a file", p.display()));
        }
        return Some(p);
    }
    let on_path = env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| env::split_paths(&paths).collect::<Vec<_>>())
        .map(|d| d.join("ptxas"));
    let home = env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    let pip_dirs = [
        root.join(".cuda-venv/lib"),
        root.join("target/ci-cuda-venv/lib"),
        home.join(".local/lib"),
        PathBuf::from("/usr/local/lib"),
    ];
    let from_pip = pip_dirs.into_iter().flat_map(|lib| {
        let pythons = fs::read_dir(&lib).into_iter().flatten().flatten().map(|e| e.path());
        pythons.flat_map(|py| {
            ["site-packages", "dist-packages"].map(|site| py.join(site).join("nvidia/cu13/bin/ptxas"))
        })
    });
    on_path.chain([PathBuf::from("/usr/local/cuda/bin/ptxas")]).chain(from_pip).find(|p| p.is_file())
}

/// Kernels of `MAX_THREADS` that also get `.minnctapersm`, the blocks ptxas must fit on an SM
/// (it then caps the registers at 65536 / (threads · blocks)). With 1, ptxas fixes the register
/// count at entry to 65536 / threads, which `setmaxnreg` needs (without it, a kernel whose code
/// would fit in fewer registers gets "'setmaxnreg' ignored; unable to determine register count
/// at entry").
const MIN_BLOCKS_PER_SM: [(&str, usize); 3] =
    [("attention_bwd_wgmma_", 1), ("softmax_cluster_f32", 5), ("cross_entropy_cluster_f32", 5)];

/// Add `.maxntid` (and `.minnctapersm`) to the kernels named in `MAX_THREADS` (rustc has no
/// launch-bounds attribute).
fn with_max_threads(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 1024);
    let mut pending = None;
    for line in ptx.lines() {
        if let Some(name) = entry_name(line) {
            pending = MAX_THREADS.iter().find(|(prefix, _)| name.starts_with(prefix)).map(|&(_, n)| {
                let blocks = MIN_BLOCKS_PER_SM.iter().find(|(prefix, _)| name.starts_with(prefix));
                (n, blocks.map(|&(_, b)| b))
            });
        }
        if line == "{" {
            if let Some((threads, blocks)) = pending.take() {
                writeln!(out, ".maxntid {threads}, 1, 1").expect("write to String");
                if let Some(blocks) = blocks {
                    writeln!(out, ".minnctapersm {blocks}").expect("write to String");
                }
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Raise every [`shapes::TensorMaps`] kernel parameter (`.align 16`, `TENSOR_MAPS_BYTES` long) to
/// the 64-byte alignment TMA needs of a tensor map read in place (rustc's kernel ABI stops at
/// 16). A kernel that takes a parameter's address (`cvta.param`, the prelude's
/// `kernel_param_address`) of any other parameter fails the build.
fn with_tensor_map_alignment(ptx: &str) -> String {
    let maps_param = |line: &str| {
        let rest = line.trim_start().strip_prefix(".param .align 16 .b8 ")?;
        let name = rest.trim_end_matches(',').strip_suffix(&format!("[{}]", shapes::TENSOR_MAPS_BYTES))?;
        Some(name.to_string())
    };
    let mut raised = Vec::new();
    let mut out = String::with_capacity(ptx.len());
    for line in ptx.lines() {
        match maps_param(line) {
            Some(name) => {
                out.push_str(&line.replacen(".align 16", ".align 64", 1));
                raised.push(name);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    for line in ptx.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("cvta.param.u64") {
            let name = rest.rsplit(',').next().unwrap_or("").trim().trim_end_matches(';');
            if !raised.iter().any(|r| r == name) {
                fail(&format!("`{}`: the address of a parameter that is not a TensorMaps", line.trim()));
            }
        }
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

    /// `cargo build` of the `spec` module's package (`gpu-kernels/modules/<name>`: the kernel crate
    /// with that module's feature) for nvptx64 with core built from source; returns its PTX. An
    /// sm_90a module's link step targets sm_90a (rustc's flags, and so the `core` build, stay
    /// those of `sm`).
    fn build(&self, kernels: &Path, target_dir: &Path, sm: &str, spec: &ModuleSpec, smem: &Path) -> PathBuf {
        let manifest = kernels.join("modules").join(spec.name).join("Cargo.toml");
        let wanted = format!("features = [\"{}\"]", spec.feature);
        if !fs::read_to_string(&manifest).is_ok_and(|text| text.contains(&wanted)) {
            fail(&format!(
                "module {} of kernels.rs needs the package {} with the kernel crate's dependency {wanted}",
                spec.name,
                manifest.display()
            ));
        }
        let ptx = target_dir.join(format!("{}.ptx", spec.name));
        for attempt in 0..2 {
            self.cargo_build(kernels, target_dir, sm, spec, smem, &ptx);
            if ptx.is_file() {
                return ptx;
            }
            // Cargo found the crate fresh, but this module's copy is missing: forget the crate's
            // fingerprints so that it links again.
            if attempt == 0 {
                let fingerprints = target_dir.join("nvptx64-nvidia-cuda/release/.fingerprint");
                for entry in fs::read_dir(&fingerprints).into_iter().flatten().flatten() {
                    if entry.file_name().to_string_lossy().starts_with(&module_package(spec)) {
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
        spec: &ModuleSpec,
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
        cmd.args(["--package", &module_package(spec)]);
        match spec.arch {
            "portable" => cmd.env_remove("NVPTX_TARGET_CPU"),
            cpu => cmd.env("NVPTX_TARGET_CPU", cpu),
        };
        let status = cmd.status().unwrap_or_else(|e| fail(&format!("running {}: {e}", self.cargo.display())));
        if !status.success() {
            fail("the kernel crate gpu-kernels failed to build (its errors are above)");
        }
    }
}

/// The cargo package of a module: `gpu-kernels/modules/<name>`.
fn module_package(spec: &ModuleSpec) -> String {
    format!("kernels-{}", spec.name.replace('_', "-"))
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

/// The kernel build's own target directory, `gpu-kernels/` in the cargo target directory
/// (`OUT_DIR` is `<target>/<profile>/build/<package>-<hash>/out`), so that every profile and every
/// build-script configuration (a `cargo build` and a `cargo test` hash theirs differently) shares
/// one build of `core`, of each module, and the cubin cache.
fn kernel_target_dir(out: &Path) -> PathBuf {
    let target =
        out.ancestors().nth(4).filter(|_| out.ancestors().nth(2).is_some_and(|b| b.ends_with("build")));
    target.unwrap_or(out).join("gpu-kernels")
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

/// Assemble `ptx` into `cubin` (PTX the driver would reject fails the build here), keeping
/// ptxas's resource report beside it (`.log`).
fn assemble_with_ptxas(ptxas: &Path, ptx: &Path, arch: &str, cubin: &Path) {
    // Written under a temporary name and renamed last, so an interrupted build leaves no cubin
    // that a later build would take from the cache.
    let partial = cubin.with_extension("partial");
    let run =
        Command::new(ptxas).arg(format!("-arch={arch}")).arg("-v").arg(ptx).arg("-o").arg(&partial).output();
    match run {
        Ok(o) if o.status.success() => {
            let report = String::from_utf8_lossy(&o.stderr);
            warn_about_local_memory(&report);
            let log = cubin.with_extension("log");
            fs::write(&log, report.as_bytes())
                .unwrap_or_else(|e| fail(&format!("writing {}: {e}", log.display())));
            fs::rename(&partial, cubin)
                .unwrap_or_else(|e| fail(&format!("writing {}: {e}", cubin.display())));
        }
        Ok(o) => {
            let _ = fs::remove_file(&partial);
            fail(&format!(
                "ptxas -arch={arch} rejected {}:\n{}",
                ptx.display(),
                String::from_utf8_lossy(&o.stderr)
            ))
        }
        Err(e) => fail(&format!("running {}: {e}", ptxas.display())),
    }
}

/// Kernels whose register cap (`MAX_THREADS`) costs a few bytes of local memory, measured faster
/// than the larger register count: name, the most stack bytes expected. The medium conv2d tile
/// at three blocks an SM spills 16 bytes (values read once per tile, outside the k loop); at two
/// blocks an SM it ran 15-50% slower (perf-notes, conv2d, fourteenth session).
const EXPECTED_LOCAL_MEMORY: [(&str, usize); 1] = [("conv2d_fwd_f32_medium", 16)];

/// Kernels keep their arrays in registers (unrolled loops, constant indices); a stack frame means
/// one went to local memory, which costs bandwidth. Say which (but for `EXPECTED_LOCAL_MEMORY`).
fn warn_about_local_memory(ptxas_report: &str) {
    let mut kernel = "";
    for line in ptxas_report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            kernel = rest.split('\'').next().unwrap_or("");
        } else if let Some((frame, spills)) = line.trim().split_once(" bytes stack frame, ") {
            let expected = EXPECTED_LOCAL_MEMORY
                .iter()
                .any(|&(name, most)| name == kernel && frame.parse::<usize>().is_ok_and(|f| f <= most));
            if !expected && (frame != "0" || spills != "0 bytes spill stores, 0 bytes spill loads") {
                println!("cargo:warning=kernel {kernel} uses local memory: {}", line.trim());
            }
        }
    }
}
