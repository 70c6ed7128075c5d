#!/usr/bin/env bash
# Session 68, first call (any card): the tensor-core exactness probes of lead F (docs/status.md, issue 4 "Open leads"
# F; tests/gpu/test_wgmma_exactness.cpp): the FP8 wgmma's 32-product sums of e2m1 values (GpuWgmmaExactness, session
# 67's) and the bf16 mma.sync's 128-product sums of FP4-valued vectors as the index scores take them
# (GpuMmaBf16Exactness), then the decode headline at HEAD (session67_call2.sh).
#   pack (here): PACK_ONLY="test_gpu test_gpu_model v4_decode" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session68_call1.sh   (~2 min)
# Reading the probes: 0 mismatches = the path returns those sums exactly; GpuMmaBf16Exactness also prints, per test,
# how many outputs lie beyond the 24-bit bound and how many of those differ from the exact sum and the fp32 chain.
set -uo pipefail
b=/tmp/deepinfer-bin
[ -x $b/test_gpu ] || { mkdir -p $b && tar xJf .gpubin/bins.tar.xz -C $b; }
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
DEEPINFER_REQUIRE_GPU=1 $b/test_gpu --gtest_filter='GpuWgmmaExactness.*:GpuMmaBf16Exactness.*' >"$out/probe.log" 2>&1
echo "probe rc=$?"
grep -E 'GPU_CHECK|wgmma|mma|within|PASSED|FAILED|OK \]' "$out/probe.log" | head -40
bash "$(dirname "$0")/session67_call2.sh"
