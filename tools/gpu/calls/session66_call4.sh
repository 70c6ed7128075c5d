#!/usr/bin/env bash
# Session 66, the landing check (not run: its machine was taken back mid-call): V4's selector form with the later
# passes' plain counts as the defaults (DEEPINFER_INDEX_SELECTOR=block, DEEPINFER_INDEX_LATER_PASSES=plain), taken only
# where its one more block a row keeps the grid one wave (indexer_gpu.cu selector_form: run 299's V4 batch 8 lost
# 0.75 % with 34 blocks a row at 8 rows; the ticket runs there now), the early (PDL) form dropped (run 299: no gain).
# Steps: the select / indexer tests at the defaults, the V4 A/B ticket against the defaults (4 repeats, batches 1 and
# 8), V4.1 HEAD's v4_decode against this build (3 repeats), the V4 select stamps, the V4 / V4.1 forward tests.
#   pack (here): session66_call1.sh's, at this tree.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session66_call4.sh   (~4 min)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="tests_select|\$b/test_gpu_model --gtest_filter='$INDEX_SELECT_TESTS';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'ticket:DEEPINFER_INDEX_SELECTOR=ticket default:' 4 --batches 1,8;
$(bin_ab_step ab_v41 "v4_decode_base v4_decode" 3 "--family v41 --batches 1,8");
$(select_stamps_step stamps_default);
tests_forward|\$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*'"
clock_logged
