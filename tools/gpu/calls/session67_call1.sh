#!/usr/bin/env bash
# Session 67, one call for two things: session 66's landing check (its final build never ran on a device) and the CSA2
# one-wave patch (bench/gpu/attempts/session66_csa2_selector_one_wave.patch, compiled, not run).
#   1. The select / indexer tests and the V4 forwards at HEAD (DEEPINFER_INDEX_SELECTOR=block and
#      DEEPINFER_INDEX_LATER_PASSES=plain by default, the selector only within one wave).
#   2. V4: the ticket form against the defaults, 3 repeats, batches 1 and 8 (expected: batch 1 below the ticket,
#      batch 8 equal, since the ticket runs there).
#   3. V4.1: ef96c19d's v4_decode (before session 66), HEAD's, and HEAD's with the CSA2 patch, 3 repeats, batches 1
#      and 8 (expected: the patch leaves batch 1 alone, one row keeps the selector, and decides batch 8).
#   4. The CSA2 select tests and the V4.1 forwards on the patched test_gpu_model.
#   pack (here): PACK_ONLY="test_gpu_model v4_decode" EXTRA_BINS="<ef96c19d's v4_decode as v4_decode_base>
#     <patched v4_decode as v4_decode_csa2_onewave> <patched test_gpu_model as test_gpu_model_csa2>"
#     BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session67_call1.sh   (~4.5 min)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="tests_select|\$b/test_gpu_model --gtest_filter='$INDEX_SELECT_TESTS';
tests_forward_v4|\$b/test_gpu_model --gtest_filter='V4GpuForward.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'ticket:DEEPINFER_INDEX_SELECTOR=ticket default:' 3 --batches 1,8;
$(bin_ab_step ab_v41 "v4_decode_base v4_decode v4_decode_csa2_onewave" 3 "--family v41 --batches 1,8");
tests_csa2|\$b/test_gpu_model_csa2 --gtest_filter='GpuCsa2SelectBins.*:GpuCsa2ScoreShape.*:GpuV41Modules.*:V41GpuForward.*'"
clock_logged
