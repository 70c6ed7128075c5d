#!/usr/bin/env bash
# Run HERE: builds the GPU test and benchmark binaries (Release, sm_90a) and packs them into .gpubin/bins.tar.xz
# (an ignored folder; name `.gpubin` in the device call's carry) for tools/gpu/run_prebuilt.sh. The binaries link
# cudart statically; cuBLAS comes from the GPU machine's CUDA 13 (/usr/local/cuda/lib64).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD_DIR:-build-gpu-release}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON >/dev/null
# The latency microbenchmarks (bench/gpu/*_latency.cu, icache_probe) are small beside the shared kernels: with the
# large xz dictionary below they cost little in the pack.
latency=(icache_probe route_latency index_select_latency mhc_site_latency stream_probe lane_probe)
targets=(test_gpu test_gpu_model roofline v4_decode deepinfer "${latency[@]}")
# The 2-GPU NCCL programs exist only where NCCL was found (cmake/nccl.cmake).
# (The target list is read once into a variable: `ninja ... | grep -q` under pipefail fails whenever grep stops
# reading before ninja has written everything, which dropped test_gpu_dp_engine.)
all_targets=$(ninja -C "$BUILD" -t targets all)
for t in test_gpu_comm test_gpu_ep test_gpu_dp_engine v4_ep_decode; do
  if grep -q "^$t:" <<<"$all_targets"; then targets+=("$t"); fi
done
# PACK_ONLY (below) also limits the build to those targets (the others are copied from earlier builds, then dropped).
if [ -n "${PACK_ONLY:-}" ]; then read -ra targets <<<"$PACK_ONLY"; fi
ninja -C "$BUILD" "${targets[@]}"
mkdir -p .gpubin
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
mkdir -p "$(dirname "$exclude")"
grep -qxF "/.gpubin/" "$exclude" 2>/dev/null || echo "/.gpubin/" >>"$exclude"
stage=$(mktemp -d)
# Whatever of the list exists (with PACK_ONLY the others may never have been built on this machine).
for f in gpu/tests/test_gpu gpu/tests/test_gpu_model gpu/bench/roofline gpu/bench/v4_decode deepinfer \
  "${latency[@]/#/gpu/bench/}" gpu/tests/multi/test_gpu_comm gpu/tests/multi/test_gpu_ep \
  gpu/tests/multi/test_gpu_dp_engine gpu/bench/multi/v4_ep_decode; do
  if [ -f "$BUILD/$f" ]; then cp "$BUILD/$f" "$stage/"; fi
done
strip -s "$stage"/*
# PACK_ONLY="test_gpu test_gpu_model ...": keep only these binaries. The device call copies the working tree with its
# carry up to 64 MiB (session 7: nine binaries packed with xz's default 8 MiB dictionary, ~45 MB, were over it).
if [ -n "${PACK_ONLY:-}" ]; then
  for f in "$stage"/*; do
    [[ " $PACK_ONLY " == *" $(basename "$f") "* ]] || rm -f "$f"
  done
fi
# EXTRA_BINS="/path/v4_decode_old ...": more binaries (e.g. an older build for a BIN A/B) packed beside these.
for f in ${EXTRA_BINS:-}; do cp "$f" "$stage/" && strip -s "$stage/$(basename "$f")"; done
# One dictionary larger than a binary: the binaries share most of their bytes (the same kernels), so xz stores them
# once (session 12: five binaries 40 MB with the default dictionary, 10 MB with this one).
tar -cf - -C "$stage" . | xz -T0 --lzma2=preset=6,dict=192MiB >.gpubin/bins.tar.xz
rm -rf "$stage"
ls -la .gpubin/bins.tar.xz
