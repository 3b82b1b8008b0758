#!/usr/bin/env bash
# Runner inside a GPU bundle (made by scripts/gpu-bundle.sh). Needs only the NVIDIA driver;
# `sanitize` needs compute-sanitizer, `bench` PyTorch for the baseline.
#   run.sh tests        every test binary, FERROCUDA_REQUIRE_GPU=1
#   run.sh sanitize     every test binary under compute-sanitizer memcheck, racecheck and synccheck
#   run.sh quickstart   the quickstart example
#   run.sh bench [OUT]  PyTorch baseline, then bench_report (and the ratio gate against
#                       docs/bench-baseline.json) and matmul_bench (with cuBLAS) in the same call
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
    for t in "$here"/tests/*; do
      echo "=== $tool $(basename "$t")"
      # The out-of-memory test asks the driver for more than the device has on purpose, and
      # memcheck reports that refused cudaMalloc-style call as an error: run it outside.
      "$sanitizer" --tool "$tool" --error-exitcode 99 --report-api-errors no "$t" || status=1
    done
  done
}

# cuBLAS for the matmul baselines: the CUDA toolkit's, or the one PyTorch ships.
cublas_dir=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so* 2>/dev/null | head -1)" 2>/dev/null)
[ -n "$cublas_dir" ] && export LD_LIBRARY_PATH="$cublas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

bench() {
  local out=${1:-$here/out}
  mkdir -p "$out"
  python3 "$here/torch_ref.py" --json "$out/torch.json" \
    --only copy,add,gelu,relu,sigmoid,sum,max,transpose,matmul,linear_gelu,softmax,layernorm,adam,sgd,conv2d,maxpool,avgpool,batchnorm || status=1
  python3 "$here/torch_extra.py" --json "$out/torch_extra.json" || status=1
  "$here/examples/bench_report" --json "$out/bench_report.json" "$out/torch.json" "$out/torch_extra.json" \
    | tee "$out/bench_report.txt" || status=1
  # The speed regression gate: each ratio to PyTorch against the committed baseline's.
  python3 "$here/ratio_gate.py" "$out/bench_report.json" "$here/bench-baseline.json" | tee "$out/ratio_gate.txt" || status=1
  "$here/examples/matmul_bench" "$out/torch.json" | tee "$out/matmul_bench.txt" || status=1
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
