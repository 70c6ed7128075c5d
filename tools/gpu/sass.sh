#!/usr/bin/env bash
# SASS of one CUDA source for sm_90a, on a machine without a GPU: compiles the file as the build does (its command
# from compile_commands.json, to a cubin), then disassembles it with nvdisasm from PyPI (nvidia-cuda-nvdisasm, fetched
# once into a cache: the CUDA toolkit here ships no disassembler). Prints each kernel's SASS bytes; with a kernel
# regex, writes that kernel's SASS to stdout after the table.
#   usage: tools/gpu/sass.sh SOURCE.cu [KERNEL_REGEX]   (env BUILD_DIR, default build-cuda; SRC_ROOT, default the
#          repo root: the tree whose file is compiled)
#   e.g.   tools/gpu/sass.sh src/layers/moe/moe_gpu.cu 'decode_route_kernelILi8'
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:?usage: tools/gpu/sass.sh SOURCE.cu [KERNEL_REGEX]}
regex=${2:-}
build=${BUILD_DIR:-$root/build-cuda}
src_root=${SRC_ROOT:-$root}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/deepinfer/nvdisasm
nvdisasm=$(find "$cache" -name nvdisasm -type f 2>/dev/null | head -n 1 || true)
if [ -z "$nvdisasm" ]; then
  mkdir -p "$cache"
  echo "sass.sh: fetching nvidia-cuda-nvdisasm into $cache" >&2
  python3 -m pip download --quiet --no-deps --dest "$cache" nvidia-cuda-nvdisasm >&2
  (cd "$cache" && for w in *.whl; do python3 -m zipfile -e "$w" .; done)
  nvdisasm=$(find "$cache" -name nvdisasm -type f | head -n 1)
  chmod +x "$nvdisasm"
fi
[ -f "$build/compile_commands.json" ] || { echo "sass.sh: no $build/compile_commands.json (configure the build first)" >&2; exit 1; }
cmd=$(python3 - "$build/compile_commands.json" "$src" <<'PY'
import json, sys
db, src = sys.argv[1], sys.argv[2]
for e in json.load(open(db)):
    if e["file"].endswith(src):
        print(e["command"])
        break
else:
    sys.exit(f"sass.sh: {src} is not in {db}")
PY
)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The same flags, one architecture, a cubin instead of an object; the file (and includes) of SRC_ROOT's tree.
cmd=$(echo "$cmd" | sed -E "s#-o [^ ]+#-o $out/k.cubin#; s# -c # -cubin #; s#(-gencode[= ]|--generate-code=)[^ ]+##g")
build_root=$(python3 -c "import json,sys; print(json.load(open('$build/compile_commands.json'))[0]['directory'])")
repo_of_build=$(cd "$build_root" && git rev-parse --show-toplevel 2>/dev/null || echo "$root")
cmd=${cmd//$repo_of_build\//$src_root/}
(cd "$build_root" && eval "$cmd -arch=sm_90a") >&2
"$nvdisasm" -c "$out/k.cubin" >"$out/k.sass"
echo "SASS bytes per kernel ($src):"
awk '/^\.text\./ { if (name) print n * 16, name; name = substr($1, 7); sub(/:$/, "", name); n = 0; next }
     /^ *\/\*[0-9a-f]+\*\// { n++ } END { if (name) print n * 16, name }' "$out/k.sass" |
  sort -rn | while read -r bytes name; do printf "%8d  %s\n" "$bytes" "$(echo "$name" | c++filt)"; done
if [ -n "$regex" ]; then
  awk -v re="$regex" '/^\.text\./ { on = ($0 ~ re) } on' "$out/k.sass"
fi
