#!/usr/bin/env bash
# Session 12's last device call: the test_gpu cases that call 3's 240 s step limit cut off (after helper-76's slow
# GpuFp8Gemm.StreamRingDepthBitwise), the router's bitwise test with the branch-free picks among them.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session12_call4.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='rest_gpu_tests|$b/test_gpu --gtest_filter="GpuFp8Gemm.WgmmaPrefillShapes:GpuFp8Gemm.Mid*:GpuRouter.*:GpuSampling.*:StreamFp4Wgmma.*:GpuStreamFp4Wgmma.*:GpuStreamFp8Wgmma.*" 2>&1 | grep -E "^\[|route_topk vs|mismatches=[1-9]"'
exec bash "$(dirname "$0")/../device_call.sh"
