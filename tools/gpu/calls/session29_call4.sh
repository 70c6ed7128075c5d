#!/usr/bin/env bash
# Session 29, fourth call (the session's code): the per-model default of the MXFP4 stream's leftover items against
# the other form on each model (DEEPINFER_FP4_ITEMS unset = the weights' choice, V4.1 front / V4 even);
# GpuMoe.DecodeV9WideFullWidth six times with run 159's failing seed (does the 122-value mismatch come back, and on
# which side: the test now runs its reference twice and prints where the outputs differ); V4's ring depth and
# dense trigger (not re-measured on V4 since sessions 18-23); one V4.1 batch-1 step's trace at the new defaults.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session29_call4.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='ab_items_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_ITEMS "weights even" 2 --family v41;
ab_items_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_ITEMS "weights front" 2;
v9wide_seed|DEEPINFER_TEST_SEED=15991224241862908175 timeout 150 $b/test_gpu_model --gtest_filter=GpuMoe.DecodeV9WideFullWidth --gtest_repeat=6 > $OUT/v9wide_seed.log 2>&1 || echo "rc=$?" && grep -hE "mismatches=[1-9]|differs in|^\[  (PASSED|FAILED) " $OUT/v9wide_seed.log | head -40;
ab_stages_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_STAGES "2 3" 1;
ab_trigger_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_TRIGGER "entry last" 1;
trace_v41|OUT=$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41 && tail -40 $OUT/trace_v41/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
