#!/usr/bin/env bash
# Build the release test, bench and example binaries and gather them, with a runner, into one
# folder that runs on a machine with only the NVIDIA driver (no Rust, no CUDA toolkit).
#   scripts/gpu-bundle.sh [OUT] [KINDS]   (default: bundle/, git-ignored; KINDS: a comma list of
#                                          tests, benches, examples; default all three)
# On the GPU machine: OUT/run.sh tests | sanitize | quickstart | bench | all
# OUT holds the binaries as one .tar.xz that
# OUT/run.sh unpacks on first use.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bundle}
cd "$root"
rm -rf "$out"
mkdir -p "$out/tests" "$out/benches" "$out/examples"

executables() { # cargo args... -> "kind name path" lines
  cargo "$@" --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["kind"][0], m["target"]["name"], m["executable"])'
}

# KINDS picks a part of the bundle.
kinds=${2:-tests,benches,examples}
{
  case ",$kinds," in *,tests,*) executables test --release --no-run ;; esac
  case ",$kinds," in *,benches,*) executables bench --no-run ;; esac
  case ",$kinds," in *,examples,*) executables build --release --examples ;; esac
} | sort -u | while read -r kind name path; do
  case "$kind" in
    test) dest="$out/tests/$name" ;;
    lib) dest="$out/tests/lib" ;;
    bench) dest="$out/benches/$name" ;;
    example) dest="$out/examples/$name" ;;
    *) continue ;;
  esac
  cp "$path" "$dest"
  strip "$dest" 2>/dev/null || true
done

cp scripts/bundle-run.sh "$out/run.sh"
shared_baselines="$root/../shared/baselines"
if [ -f "$shared_baselines/torch_ref.py" ]; then cp "$shared_baselines/torch_ref.py" "$out/"; fi
cp scripts/torch_extra.py scripts/ratio_gate.py docs/bench-baseline.json "$out/"
chmod +x "$out/run.sh"
ls "$out"/*/
# Every binary embeds the same kernel modules: one xz stream whose window spans a whole binary
# stores them once.
tar cf - -C "$out" . | xz -T1 --lzma2=preset=1,dict=64MiB > "$root/target/ferrocuda-gpu.tar.xz"
rm -rf "$out"
mkdir -p "$out"
mv "$root/target/ferrocuda-gpu.tar.xz" "$out/"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/bin/run.sh" ] || { mkdir -p "$here/bin" && tar xJf "$here/ferrocuda-gpu.tar.xz" -C "$here/bin"; } || exit 1
exec "$here/bin/run.sh" "$@"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
