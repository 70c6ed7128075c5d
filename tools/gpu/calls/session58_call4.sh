#!/usr/bin/env bash
# Written in session 58, not run (no device time left): the paired bf16 stores in store_item too
# (bench/gpu/attempts/session58_prefill_store_item_pairs.patch: v3 / v5 / v8 / v9's epilogue and v13's non-clean items;
# bf16_row_pair, the one definition of the trade, also in store_item_lean). V4.1's prefill runs v9 at activation
# block 32, whose bf16 y still went out in half sectors (run 277: V4.1 flat). The prefill GEMM's tests (every kernel,
# bitwise and against the rounded fp32 output) and the MoE's; then roofline --prefill-y f32 against bf16, 2 alternating
# rounds at the default 1000 ms windows (V4.1 is the question; V4's rows check the lean path's refactor: expected as
# run 277).
#   pack (here): the patch applied, `ninja -C build-cuda test_gpu test_gpu_model roofline`,
#     PACK_ONLY="roofline test_gpu test_gpu_model" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh, the patch
#     reverted
#   usage (GPU machine, repo root): bash tools/gpu/calls/session58_call4.sh
#   table (here): python3 tools/gpu/prefill_sustained_table.py DIR (DIR: the call's steps/ folder)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(filtered_tests_steps 'GpuMoePrefillGemm.*:GpuMoe.*');
"
steps+="$(flag_rounds_steps y --prefill-y "f32 bf16" 2 "--prefill-only --prefill-16k --quick --sustained")"
export EXTRA_GPU0="$steps"
clock_logged
