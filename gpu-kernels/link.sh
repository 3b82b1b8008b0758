#!/bin/sh
# The nvptx64 "linker" that rustc calls for the cdylib: a stand-in for rustc's
# llvm-bitcode-linker. llvm-link all bitcode (and the generated shared-memory .ll)
# -> opt (O3, then internalize everything but the exported kernels) -> llc -> one .ptx.
# $NVPTX_LLVM_BIN names the folder of the LLVM tools rustc was built with; $NVPTX_TARGET_CPU, when
# set, replaces rustc's --target-cpu (the sm_90a module shares the sm_90 build of core);
# $NVPTX_PTX_COPY, when set, receives a copy of the PTX (each module keeps its own file).
set -eu
B=${NVPTX_LLVM_BIN:+$NVPTX_LLVM_BIN/}
syms=""; files=""; out=""; cpu=""; feat=""; olvl=3
while [ $# -gt 0 ]; do
  case "$1" in
    --export-symbol) syms="$syms $2"; shift 2 ;;
    --target) shift 2 ;;
    --target-cpu) cpu="$2"; shift 2 ;;
    --target-feature) feat="$2"; shift 2 ;;
    -L) shift 2 ;;
    -o) out="$2"; shift 2 ;;
    -O*) olvl="${1#-O}"; shift ;;
    --debug|--lto) shift ;;
    *) files="$files $1"; shift ;;
  esac
done
cpu=${NVPTX_TARGET_CPU:-$cpu}
base="${out%.*}"
printf '%s\n' $syms > "$base.symbols.txt"
# shellcheck disable=SC2086
"${B}llvm-link" --ignore-non-bitcode $files -o "$base.linked.bc"
"${B}opt" "$base.linked.bc" -o "$base.optimized.bc" --strip-debug \
  "--internalize-public-api-file=$base.symbols.txt" "--passes=default<O$olvl>,internalize,globaldce"
"${B}llc" ${cpu:+--mcpu=$cpu} ${feat:+--mattr=$feat} "$base.optimized.bc" -o "$out"
[ -z "${NVPTX_PTX_COPY:-}" ] || cp "$out" "$NVPTX_PTX_COPY"
