#!/usr/bin/env bash
# Session 59: the paired bf16 stores in store_item (bench/gpu/attempts/session58_prefill_store_item_pairs.patch: v9's
# epilogue, V4.1's prefill path, and v13's non-clean items; bf16_row_pair shared with store_item_lean). The prefill
# GEMM's tests (every kernel, bitwise and against the rounded fp32 output) and the MoE's; roofline --prefill-y f32
# against bf16, 2 alternating rounds at the default 1000 ms sustained windows (V4.1 is the question; V4's rows check
# the lean path's refactor); then the decode step of the same build, V4 and V4.1, batches 1 and 8, 4 repeats (the
# numbers of the card that comes: an H200 is asked for).
#   pack (here): the patch applied, `ninja -C build-cuda test_gpu test_gpu_model roofline v4_decode`,
#     PACK_ONLY="roofline test_gpu test_gpu_model v4_decode" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session59_call1.sh
#   table (here): python3 tools/gpu/prefill_sustained_table.py DIR (DIR: the call's steps/ folder)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(filtered_tests_steps 'GpuMoePrefillGemm.*:GpuMoe.*');
"
steps+="$(flag_rounds_steps y --prefill-y "f32 bf16" 2 "--prefill-only --prefill-16k --quick --sustained");
"
steps+="$(bin_ab_models ab_dec "v4_decode" 4)"
export EXTRA_GPU0="$steps"
clock_logged
