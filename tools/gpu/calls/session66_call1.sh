#!/usr/bin/env bash
# Session 66: V4's index select in the selector form (DEEPINFER_INDEX_SELECTOR=block: one more block a row rehearses
# the select's code while the score blocks score, then selects after their arrivals; index_select_bins.cuh
# selector_select, now shared with V4.1's CSA2 selector) and its later passes' plain counts
# (DEEPINFER_INDEX_LATER_PASSES=plain). Run 291's V4 trace has the CSA layers' select 6.1-8.4 us past the query
# branch's wq_b; run 193 read ~2 K cycles of V4's last block as the code's first fetch.
# Steps: the select / indexer tests and the V4 / V4.1 forward tests of test_gpu_model (selector forms entry for entry against the ticket),
# the V4 A/B ticket / block / block+plain on the new build (batches 1 and 8, 3 repeats; one logits digest expected),
# V4.1 HEAD's v4_decode (v4_decode_base) against the new build (the CSA2 selector's code moved into the shared
# function), then the V4 select stamps of the ticket and both selector forms.
#   pack (here): `ninja -C build-cuda test_gpu_model v4_decode`, then PACK_ONLY="test_gpu_model v4_decode"
#     EXTRA_BINS=/tmp/st66/v4_decode_base BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session66_call1.sh   (~4 min)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
sel=DEEPINFER_INDEX_SELECTOR=block
export EXTRA_GPU0="tests_select|\$b/test_gpu_model --gtest_filter='$INDEX_SELECT_TESTS';
tests_forward|\$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'ticket: block:$sel plain:$sel,DEEPINFER_INDEX_LATER_PASSES=plain' 3 --batches 1,8;
$(bin_ab_step ab_v41 "v4_decode_base v4_decode" 3 "--family v41 --batches 1,8");
$(select_stamps_step stamps_ticket);
$(select_stamps_step stamps_block "DEEPINFER_INDEX_SELECTOR=block");
$(select_stamps_step stamps_plain "DEEPINFER_INDEX_SELECTOR=block DEEPINFER_INDEX_LATER_PASSES=plain")"
clock_logged
