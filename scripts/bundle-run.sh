#!/usr/bin/env bash
# Runner inside a GPU bundle (made by scripts/gpu-bundle.sh). Needs only the NVIDIA driver;
# `sanitize` needs compute-sanitizer, `bench` PyTorch for the baseline.
#   run.sh tests        every test binary, FERROCUDA_REQUIRE_GPU=1
#   run.sh sanitize     every test binary under compute-sanitizer memcheck, racecheck and synccheck
#   run.sh quickstart   the quickstart example
#   run.sh bench [OUT]  PyTorch baseline, then bench_report (and the ratio gate against
#                       docs/bench-baseline.json), matmul_bench (with cuBLAS) and conv_bench (beside
#                       cuDNN) in the same call
#   run.sh all [OUT]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export FERROCUDA_REQUIRE_GPU=1
status=0

tests() {
  for t in "$here"/tests/*; do
    echo "=== $(basename "$t")"
    "$t" || status=1
  done
}

sanitize() {
  # Tests pick smaller matrix shapes under the sanitizer (it slows kernels by orders of magnitude).
  export FERROCUDA_SANITIZER=1
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; status=1; return; }
  for tool in memcheck racecheck synccheck; do
    # racecheck (2025.3) loses track of kernels launched from several host threads at once
    # ("Internal Sanitizer Error: Detected a failure to track a kernel launch", counted as an
    # error) also in a 40-line ctypes program without this crate (docs/perf-notes.md, Sanitizers);
    # blocking launches avoid it, and racecheck's shared-memory hazards lie within one kernel.
    local options=()
    [ "$tool" = racecheck ] && options=(--force-blocking-launches)
    for t in "$here"/tests/*; do
      echo "=== $tool $(basename "$t")"
      # The out-of-memory test asks the driver for more than the device has on purpose, and
      # memcheck reports that refused cudaMalloc-style call as an error: run it outside.
      # The profiler times with events under the sanitizer (CUPTI and the sanitizer each
      # want the driver's tool hooks).
      FERROCUDA_PROFILER=events "$sanitizer" --tool "$tool" "${options[@]}" --error-exitcode 99 \
        --report-api-errors no "$t" || status=1
    done
  done
}

# cuBLAS for the matmul baselines: the CUDA toolkit's, or the one PyTorch ships.
cublas_dir=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so* 2>/dev/null | head -1)" 2>/dev/null)
[ -n "$cublas_dir" ] && export LD_LIBRARY_PATH="$cublas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# libcupti for the profiler (else it times with CUDA events): the toolkit's, or the pip package's.
cupti_lib=$(ls /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* 2>/dev/null | head -1)
[ -n "$cupti_lib" ] || cupti_lib=$(python3 -c "import glob, site; print(next(iter(sorted(f for d in site.getsitepackages() for f in glob.glob(d + '/nvidia/**/libcupti.so*', recursive=True))), ''))" 2>/dev/null)
[ -n "$cupti_lib" ] && export LD_LIBRARY_PATH="$(dirname "$cupti_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

bench() {
  local out=${1:-$here/out}
  mkdir -p "$out"
  python3 "$here/torch_ref.py" --json "$out/torch.json" \
    --only copy,add,gelu,relu,sigmoid,sum,max,transpose,matmul,linear_gelu,softmax,layernorm,adam,sgd,conv2d,maxpool,avgpool,batchnorm,cross_entropy,embedding || status=1
  python3 "$here/torch_extra.py" --json "$out/torch_extra.json" || status=1
  "$here/examples/bench_report" --json "$out/bench_report.json" "$out/torch.json" "$out/torch_extra.json" \
    | tee "$out/bench_report.txt" || status=1
  # The speed regression gate: each ratio to PyTorch against the committed baseline's.
  python3 "$here/ratio_gate.py" "$out/bench_report.json" "$here/bench-baseline.json" | tee "$out/ratio_gate.txt" || status=1
  "$here/examples/matmul_bench" "$out/torch.json" | tee "$out/matmul_bench.txt" || status=1
  "$here/examples/conv_bench" "$out/torch.json" | tee "$out/conv_bench.txt" || status=1
}

case "${1:-all}" in
  tests) tests ;;
  sanitize) sanitize ;;
  quickstart) "$here/examples/quickstart" || status=1 ;;
  bench) bench "${2:-}" ;;
  all) tests; sanitize; "$here/examples/quickstart" || status=1; bench "${2:-}" ;;
  *) echo "usage: run.sh tests|sanitize|quickstart|bench [OUT]|all [OUT]"; exit 2 ;;
esac
exit $status
