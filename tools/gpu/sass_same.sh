#!/usr/bin/env bash
# Whether a change leaves the GPU code as it was, on a machine without a GPU: every kernel of the CUDA sources the
# change can reach, compiled for sm_90a from a worktree of BASE and from this tree (tools/gpu/sass.sh), compared
# instruction by instruction (tools/gpu/sass_compare.py). A refactor that keeps every kernel's SASS needs no GPU run.
#   usage: tools/gpu/sass_same.sh [BASE] [SOURCE.cu ...]
#     BASE     the revision to compare with (default HEAD; the working tree's changes are what is compared)
#     SOURCE   sources to compile (default: every CUDA source of the build whose dependencies, from
#              `ninja -t deps`, include a file that differs between BASE and the working tree)
#   env BUILD_DIR (default build-cuda: configured with DEEPINFER_CUDA=ON and built once, for its compile commands and
#   dependency log). Writes the listings under a temporary folder (printed; kept when something differs).
#   Kernels renamed with the same instructions (a template argument added) count as the same; new kernels are listed.
#   Exit status 0 when every existing kernel is the same, 1 when one differs or is gone.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base=${1:-HEAD}
shift || true
build=${BUILD_DIR:-$root/build-cuda}
[ -f "$build/.ninja_deps" ] || { echo "sass_same.sh: $build has no dependency log (build it once first)" >&2; exit 2; }

sources=("$@")
if [ ${#sources[@]} -eq 0 ]; then
  changed=$(cd "$root" && { git diff --name-only "$base"; git ls-files --others --exclude-standard; } | sort -u)
  [ -n "$changed" ] || { echo "sass_same.sh: nothing differs from $base"; exit 0; }
  mapfile -t sources < <(ninja -C "$build" -t deps 2>/dev/null | ROOT="$root" CHANGED="$changed" python3 -c '
import os, sys
root, changed = os.environ["ROOT"], {os.path.join(os.environ["ROOT"], f) for f in os.environ["CHANGED"].split()}
src, hit, out = None, False, []
for line in sys.stdin:
    if not line.startswith(" "):
        if src and hit: out.append(src)
        src, hit = None, False
        continue
    path = line.strip()
    if src is None:
        src = os.path.relpath(path, root) if path.endswith(".cu") else ""
    hit = hit or path in changed
if src and hit: out.append(src)
print("\n".join(sorted(set(s for s in out if s))))')
  [ ${#sources[@]} -gt 0 ] || { echo "sass_same.sh: no CUDA source depends on the changed files"; exit 0; }
fi

work=$(mktemp -d /tmp/sass_same.XXXXXX)
git -C "$root" worktree add --detach "$work/base" "$base" >/dev/null 2>&1
cleanup() { git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; }
trap cleanup EXIT
echo "sass_same.sh: ${#sources[@]} source(s) against $base ($(git -C "$root" rev-parse --short "$base")); listings in $work"
status=0
for src in "${sources[@]}"; do
  name=$(echo "$src" | tr '/' '_')
  SRC_ROOT="$work/base" BUILD_DIR="$build" bash "$root/tools/gpu/sass.sh" "$src" . >"$work/$name.before" 2>"$work/$name.log"
  SRC_ROOT="$root" BUILD_DIR="$build" bash "$root/tools/gpu/sass.sh" "$src" . >"$work/$name.after" 2>>"$work/$name.log"
  python3 "$root/tools/gpu/sass_compare.py" "$work/$name.before" "$work/$name.after" | sed "s#$work/##" || status=1
done
if [ $status -eq 0 ]; then
  rm -rf "$work"
  echo "sass_same.sh: every existing kernel has the same instructions (new ones listed above)"
else
  echo "sass_same.sh: existing kernels differ or are gone (listings kept in $work)"
fi
exit $status
