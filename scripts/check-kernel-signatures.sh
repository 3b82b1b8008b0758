#!/usr/bin/env bash
# The kernel side of the typed launches: a kernel whose real signature differs from its entry in
# gpu-kernels/src/kernels.rs must fail the kernel build. Checks the `elementwise` module as it is
# (must pass), then with the feature `signature_mismatch_probe`, which adds an entry declaring
# `fill_f32`'s f32 parameter as f64 (must fail with a type mismatch).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rustc=${FERROCUDA_KERNEL_RUSTC:-/usr/bin/rustc}
cargo=${FERROCUDA_KERNEL_CARGO:-/usr/bin/cargo}
check() {
  env -u RUSTFLAGS -u CARGO_TARGET_DIR -u RUSTUP_TOOLCHAIN RUSTC="$rustc" RUSTC_BOOTSTRAP=1 \
    "$cargo" check --manifest-path "$root/gpu-kernels/Cargo.toml" --release \
    --target nvptx64-nvidia-cuda -Zbuild-std=core --target-dir "$root/target/gpu-kernels-check" \
    --config 'target.nvptx64-nvidia-cuda.rustflags=["-Ctarget-cpu=sm_90","-Zunstable-options","-Cpanic=immediate-abort"]' \
    --features "$1" 2>&1
}
if ! out=$(check elementwise); then
  echo "$out" | tail -20
  echo "FAILED: the kernel crate does not check as it is"
  exit 1
fi
out=$(check elementwise,signature_mismatch_probe)
status=$?
if [ $status -eq 0 ]; then
  echo "FAILED: a wrong signature entry for fill_f32 compiled"
  exit 1
fi
if ! grep -q 'E0308' <<<"$out" || ! grep -q 'fill_f32' <<<"$out"; then
  echo "$out" | tail -30
  echo "FAILED: the probe failed for another reason than the signature mismatch"
  exit 1
fi
echo "kernel signatures: a wrong entry for fill_f32 fails the kernel build (E0308), as it must"
