#!/usr/bin/env bash
# Session 51, after runs 240-241: the landed set (the MXFP4 chain audit4 + fp4_consume + fp4_scales + fp4_desc,
# route_fence, site_norm + lagged5, fp8_scale) against the session's base, and the tests run 240 left unrun
# (its test_gpu step hit the 300 s limit inside GpuFp8Gemm's grid sweeps).
#   pack (here): v4_decode_base (run 240's base build, 7d9917a), v4_decode / test_gpu / test_gpu_model built at the
#     landing commit, stripped, in .gpubin/bins.tar.xz (13 MB).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session51_call2.sh (~3 min: the MXFP4 stream tests, a QUICK
#     A/B of both models at batch 1, then the four GpuFp8Gemm tests).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="tests_fp4|\$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*';
$(QUICK=1 bin_ab_models ab_s51_landed "v4_decode_base v4_decode");
tests_fp8|\$b/test_gpu --gtest_filter='GpuFp8Gemm.Mid*:GpuFp8Gemm.StreamGridCapBitwise:GpuFp8Gemm.WgmmaPrefillShapes'"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
