#!/usr/bin/env bash
# Session 31, first call (prepared in session 30): the ring's late release in its main form
# (bench/gpu/attempts/session30_ring_release_after_math_main.patch: stream_gemm's consume_tile, the FP8 and MXFP4 wgmma
# streams fence and release a stage after its math; run 171 measured it behind a switch: batch 8 V4 -1.3 %, V4.1
# -4.0 %, batch 1 flat). Build first, here:
#   cp build-cuda/v4_decode /tmp/v4_decode_old      # HEAD without the patch (build it first if missing)
#   git apply bench/gpu/attempts/session30_ring_release_after_math_main.patch
#   EXTRA_BINS=/tmp/v4_decode_old BUILD_DIR=build-cuda PACK_ONLY="test_gpu test_gpu_model roofline v4_decode" \
#     bash tools/gpu/pack_prebuilt.sh
# Then (device `run`, carry .gpubin): the race's test 8 times and a same-run BIN A/B of the two builds on both models
# (~2 min); chain `bash tools/gpu/calls/session29_call3.sh` (every single-GPU suite, ~470 s: together they would near the
# 600 s cap). Land the patch if the suites pass and the A/B agrees with run 171.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session31_call1.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="race|timeout 120 \$b/test_gpu_model --gtest_filter=GpuMoe.DecodeV8InvariantRunToRunFullWidth --gtest_repeat=8 > \$OUT/race.log 2>&1 || true && echo failed_iterations=\$(grep -c 'FAILED  ] GpuMoe.*ms)' \$OUT/race.log);
ab_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 3;
ab_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 3 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
