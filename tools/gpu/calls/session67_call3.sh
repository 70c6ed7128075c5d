#!/usr/bin/env bash
# Session 67 leaves (compiled, not run): the FP8 tensor path's exactness probe for e2m1 block sums
# (tests/gpu/test_wgmma_exactness.cpp, cuda/wgmma_probe.h; docs/status.md issue 4 "Open leads" F: whether the index
# scores can move to the tensor cores and keep their bits), then the decode headline at HEAD (session67_call2.sh).
#   pack (here): PACK_ONLY="test_gpu test_gpu_model v4_decode" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session67_call3.sh   (~2 min)
# Reading the probe: 0 mismatches in all three tests = the path keeps >= 13 bits of these sums and lead F can keep
# the scores' bits; any mismatch prints the wgmma and exact values (then split each block's 32 K in two wgmmas of 16
# nonzero products, 12 bits, and probe again).
set -uo pipefail
b=/tmp/deepinfer-bin
[ -x $b/test_gpu ] || { mkdir -p $b && tar xJf .gpubin/bins.tar.xz -C $b; }
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
DEEPINFER_REQUIRE_GPU=1 $b/test_gpu --gtest_filter='GpuWgmmaExactness.*' >"$out/probe.log" 2>&1
echo "probe rc=$?"
grep -E 'GPU_CHECK|wgmma|PASSED|FAILED' "$out/probe.log" | head -30
bash "$(dirname "$0")/session67_call2.sh"
