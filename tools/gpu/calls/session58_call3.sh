#!/usr/bin/env bash
# Session 58: v13's bf16 y with whole-sector stores (store_item_lean: lanes g and g + 1 trade values, each stores a
# bf16 pair, one 32-byte sector per token and instruction; run 276 found 2-byte stores of the same bf16 y, two half
# sectors a token, no faster than the fp32 stores). The prefill GEMM's tests (bitwise, and its bf16 output against the
# rounded fp32 one) and the MoE's; then roofline --prefill-y f32 against bf16, 2 alternating rounds at the default
# 1000 ms sustained windows (steps prefill_y<f32|bf16>_<round>), clock log beside the call; then v4_decode's prefill
# tokens/s (and decode digests) of main before the session (v4_decode), run 276's build (v4_decode_new: 2-byte
# stores) and this one (v4_decode_pair), V4 and V4.1.
#   pack (here): the session's tree, `ninja -C build-cuda test_gpu test_gpu_model roofline v4_decode`, v4_decode
#     staged as /tmp/st58/v4_decode_pair beside session58_call1.sh's two, then
#     PACK_ONLY="roofline test_gpu test_gpu_model" EXTRA_BINS="/tmp/st58/v4_decode /tmp/st58/v4_decode_new \
#     /tmp/st58/v4_decode_pair" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session58_call3.sh
#   table (here): python3 tools/gpu/prefill_sustained_table.py DIR (DIR: the call's steps/ folder)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(filtered_tests_steps 'GpuMoePrefillGemm.*:GpuMoe.*');
"
steps+="$(flag_rounds_steps y --prefill-y "f32 bf16" 2 "--prefill-only --prefill-16k --quick --sustained");
"
steps+="$(QUICK=1 bin_ab_models decode "v4_decode v4_decode_new v4_decode_pair" 2)"
export EXTRA_GPU0="$steps"
clock_logged
