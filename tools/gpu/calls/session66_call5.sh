#!/usr/bin/env bash
# Session 66, the landing check trimmed to what the device time left holds (session66_call4.sh's machine was taken
# back, then two starts failed): the select / indexer tests and the V4 forward tests at the new defaults
# (DEEPINFER_INDEX_SELECTOR=block, DEEPINFER_INDEX_LATER_PASSES=plain, the selector grids within the ticket's cap), the
# V4 A/B ticket against the defaults and V4.1 HEAD's v4_decode against this build, 2 repeats each (batches 1 and 8).
#   pack (here): session66_call1.sh's, at this tree.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session66_call5.sh   (~2.5 min)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="tests_select|\$b/test_gpu_model --gtest_filter='$INDEX_SELECT_TESTS';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'ticket:DEEPINFER_INDEX_SELECTOR=ticket default:' 2 --batches 1,8;
$(bin_ab_step ab_v41 "v4_decode_base v4_decode" 2 "--family v41 --batches 1,8");
tests_forward_v4|\$b/test_gpu_model --gtest_filter='V4GpuForward.*'"
clock_logged
