#!/usr/bin/env bash
# Run HERE: the pack of a BIN A/B over compiled-not-run patches (bench/gpu/attempts/*.patch), for one device call:
# v4_decode of the working tree (the base), v4_decode_NAME for each patch applied alone, and test_gpu /
# test_gpu_model with every patch applied together (so the call's tests cover each patched kernel), all stripped in
# .gpubin/bins.tar.xz (tools/gpu/pack_prebuilt.sh packs them). Sessions 48-49 did this by hand for every A/B call.
#   usage: tools/gpu/pack_patch_ab.sh NAME[:TARGET,...]=PATCH[+PATCH...] [...]
#   e.g.   tools/gpu/pack_patch_ab.sh audit4=bench/gpu/attempts/session48_audit4_stream_consumers.patch
#   A NAME with several patches (a patch written on top of another) applies them in that order. TARGETs (default
#   v4_decode) are the benchmarks built for that set, staged as TARGET_NAME; the base builds every TARGET named
#   (e.g. `chunks:roofline=P` for a prefill patch: roofline and roofline_chunks).
#   env KEEP_STAGE (above the trap); BUILD_DIR (default build-cuda: configured with DEEPINFER_CUDA=ON); ALL=1 also packs v4_decode_all (every
#   patch together). The patches must apply together to the working tree; it is restored on exit, even on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
build=${BUILD_DIR:-build-cuda}
names=() sets=() all=() targets=()  # sets[i]: NAME i's patches, space-separated absolute paths; targets[i]: its builds
base_targets=()
for arg in "$@"; do
  [[ $arg == *=* ]] || { echo "pack_patch_ab.sh: '$arg' is not NAME=PATCH[+PATCH...]" >&2; exit 2; }
  IFS=+ read -ra list <<<"${arg#*=}"
  group=()
  for p in "${list[@]}"; do
    group+=("$(realpath "$p")")
    [[ " ${all[*]} " == *" ${group[-1]} "* ]] || all+=("${group[-1]}")
  done
  head=${arg%%=*}
  [[ $head == *:* ]] && tlist=${head#*:} || tlist=v4_decode
  names+=("${head%%:*}") sets+=("${group[*]}") targets+=("${tlist//,/ }")
  for t in ${tlist//,/ }; do [[ " ${base_targets[*]} " == *" $t "* ]] || base_targets+=("$t"); done
done
# Every set alone and all of the patches together must apply before anything is built. Checked in a scratch worktree
# (HEAD plus the working tree's changes), one patch at a time: `git apply A B` does not chain two patches of one file,
# and applying here would touch the sources' mtimes (a rebuild of everything that includes them).
scratch=$(mktemp -d)
stage=$(mktemp -d)
applied=()
restore() {
  local i
  for ((i = ${#applied[@]} - 1; i >= 0; i--)); do git apply -R "${applied[i]}"; done
  applied=()
}
# KEEP_STAGE=DIR keeps the staged builds there (to split a pack that came out too big for one call).
trap 'restore; if [ -n "${KEEP_STAGE:-}" ]; then mkdir -p "$KEEP_STAGE" && mv "$stage"/* "$KEEP_STAGE"/; fi; rm -rf "$stage"; git worktree remove --force "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
git worktree add -q --detach "$scratch" HEAD
check_chain() {  # check_chain PATCH...: the patches apply in this order to the working tree
  git -C "$scratch" reset -q --hard
  git -C "$scratch" clean -qfd  # files an earlier chain's patch created
  git diff HEAD --binary | git -C "$scratch" apply --allow-empty
  local p
  for p in "$@"; do git -C "$scratch" apply "$p" || { echo "pack_patch_ab.sh: $p does not apply after: $*" >&2; return 1; }; done
}
for s in "${sets[@]}"; do read -ra group <<<"$s"; check_chain "${group[@]}"; done
check_chain "${all[@]}"
apply() { local p; for p in "$@"; do git apply "$p"; applied+=("$p"); done; }
build_bench() {  # build_bench TARGET SUFFIX: a gpu/bench TARGET of the tree as it is now, staged as TARGET+SUFFIX
  echo "pack_patch_ab.sh: building $1$2" >&2
  ninja -C "$build" "$1" >/dev/null
  cp "$build/gpu/bench/$1" "$stage/$1$2"
}

for t in "${base_targets[@]}"; do build_bench "$t" ""; done
for i in "${!names[@]}"; do
  read -ra group <<<"${sets[i]}"
  apply "${group[@]}"
  for t in ${targets[i]}; do build_bench "$t" "_${names[i]}"; done
  restore
done
apply "${all[@]}"
[ "${ALL:-0}" = 1 ] && build_bench v4_decode _all
# pack_prebuilt.sh builds the tests with every patch applied and packs the staged v4_decode builds beside them.
BUILD_DIR=$build PACK_ONLY="test_gpu test_gpu_model" EXTRA_BINS="$(ls -d "$stage"/*)" bash tools/gpu/pack_prebuilt.sh
# A call copies the tracked files (~33 MB) with the carry, 64 MiB in all; v4_decode builds are ~49 MB each, so xz's
# 192 MiB window holds ~3 of them and each build beyond adds ~2.5 MB (session 50: fourteen builds and the tests, 44 MB).
size=$(stat -c %s .gpubin/bins.tar.xz)
if [ "$size" -gt $((30 << 20)) ]; then
  echo "pack_patch_ab.sh: the pack is $((size >> 20)) MB, too big for one call with the tracked files: split it in two" \
    "(tools/gpu/calls/session50_call1.sh's header says how)" >&2
fi
