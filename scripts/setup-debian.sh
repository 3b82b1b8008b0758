#!/bin/sh
# Everything a fresh Debian 12 (bookworm) machine needs to build ferrocuda, as root or with sudo:
# the kernel toolchain (Debian's rustc-web 1.96 with its library source and LLVM 22 tools, whose
# cargo also builds the host crate), a C linker, and ptxas (PyPI's nvidia-cuda-nvcc, in
# .cuda-venv/, where build.rs looks) so that the build embeds cubins and a GPU starts without
# compiling PTX. Safe to run again.
set -eu
cd "$(dirname "$0")/.."
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
# rustc-web 1.96 comes from bookworm-security (Debian's images list it in their sources).
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  ca-certificates gcc libc6-dev python3-venv rustc-web cargo-web rust-web-src rust-web-llvm || {
  echo "ferrocuda setup: apt-get failed; rustc-web 1.96 needs the bookworm-security suite in the apt sources" >&2
  exit 1
}
[ -x .cuda-venv/bin/pip ] || python3 -m venv .cuda-venv
.cuda-venv/bin/pip install -q --no-deps nvidia-cuda-nvcc==13.0.88
echo "ferrocuda setup: $(/usr/bin/rustc --version), ptxas $(.cuda-venv/lib/python3*/site-packages/nvidia/cu13/bin/ptxas --version | tail -1)"
