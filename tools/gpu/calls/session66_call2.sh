#!/usr/bin/env bash
# Session 66, second call: session66_call1.sh's steps (4 repeats of the V4 A/B) on the rehearsal that ends after pass
# 2 (index_select_bins.cuh RehearsalScores: the odd half of its keys taken, whose pass-2 bin holds exactly them),
# and V4.1's select stamps with it (the CSA2 selector's rehearsal is the same function).
# Run 297 (call 1) saw the selector's arrivals 2 us later than the ticket's (10.18 vs 8.19 us after the score blocks'
# start): its rehearsal (ties in every pass, four passes, the code cold) outlasted the ~8 us of scoring.
#   pack (here): session66_call1.sh's, at this tree.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session66_call2.sh   (~4 min)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
sel=DEEPINFER_INDEX_SELECTOR=block
export EXTRA_GPU0="tests_select|\$b/test_gpu_model --gtest_filter='$INDEX_SELECT_TESTS';
tests_forward|\$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'ticket: block:$sel plain:$sel,DEEPINFER_INDEX_LATER_PASSES=plain' 4 --batches 1,8;
$(bin_ab_step ab_v41 "v4_decode_base v4_decode" 3 "--family v41 --batches 1,8");
$(select_stamps_step stamps_v41 "" "--family v41");
$(select_stamps_step stamps_ticket);
$(select_stamps_step stamps_block "DEEPINFER_INDEX_SELECTOR=block");
$(select_stamps_step stamps_plain "DEEPINFER_INDEX_SELECTOR=block DEEPINFER_INDEX_LATER_PASSES=plain")"
clock_logged
