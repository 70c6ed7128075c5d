#!/usr/bin/env bash
# Session 66, third call (run 299; its early form is gone since, so the script no longer runs as written): V4's
# selector launched early (DEEPINFER_INDEX_SELECTOR=early: the select kernel with the PDL
# attribute, the query finish before it triggering at its start, the selector block rehearsing before its wait for
# the predecessors, sized by the row's last launch) against the plain selector form and the ticket, all with the
# later passes' plain counts where a selector runs. Run 298 (call 2): the selector saw the arrivals at 8.2-12.3 us
# against the ticket's 7.9-8.2 (its rehearsal, started with the launch, still outlasting the scoring in some layers).
# Steps: the select / indexer tests (the early form entry for entry), the V4 / V4.1 forward tests with the early
# selector and plain counts switched on for the whole binary, the V4 A/B (4 repeats), V4.1 HEAD's v4_decode against
# this build (the query finish's trigger, the CSA2 selector through the shared function), the V4 select stamps.
#   pack (here): session66_call1.sh's, at this tree.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session66_call3.sh   (~5 min)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
early='DEEPINFER_INDEX_SELECTOR=early DEEPINFER_INDEX_LATER_PASSES=plain'
export EXTRA_GPU0="tests_select|\$b/test_gpu_model --gtest_filter='$INDEX_SELECT_TESTS';
tests_forward_early|$early \$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'ticket: block:DEEPINFER_INDEX_SELECTOR=block,DEEPINFER_INDEX_LATER_PASSES=plain early:DEEPINFER_INDEX_SELECTOR=early,DEEPINFER_INDEX_LATER_PASSES=plain' 4 --batches 1,8;
$(bin_ab_step ab_v41 "v4_decode_base v4_decode" 3 "--family v41 --batches 1,8");
$(select_stamps_step stamps_early "$early");
$(select_stamps_step stamps_block "DEEPINFER_INDEX_SELECTOR=block DEEPINFER_INDEX_LATER_PASSES=plain")"
clock_logged
