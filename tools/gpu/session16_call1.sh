#!/usr/bin/env bash
# First device call of session 16 (binaries of the early-w2 commit): no suites; the new bitwise test of the early w2
# launch, the routing's routed-phase split (session 15's compiled stamps), then docs/persistent_ffn.md §8's first
# experiment: DEEPINFER_FP4_W2_EARLY "0 1" in same-call A/Bs on 16 V4-Flash and 10 V4.1-Flash layers (4K,
# `v4_decode --quick --pdl on`) and one traced batch-1 step per arm and family, reduced by tools/gpu/moe_span.py to
# the routed experts' span per layer (w1|w3 start -> w2 end).
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/session16_call1.sh
set -uo pipefail
export SKIP_SUITES=1
span='python3 tools/gpu/moe_span.py'
export EXTRA_GPU0='w2early_test_tail|$b/test_gpu_model --gtest_filter=GpuMoe.W2EarlyLaunchSameBits 2>&1 | grep -E "GPU_CHECK|OK|FAILED|PASSED";
stamps_split_v4_tail|$b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_split_v4.json;
stamps_split_v41_tail|$b/v4_decode --quick --family v41 --pdl on --route-stamps --out $OUT/rs_split_v41.json;
ab_w2early|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_W2_EARLY "0 1" 2;
ab_w2early_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_W2_EARLY "0 1" 2 --family v41;
span_v4_tail|for v in 0 1 0 1 ; do DEEPINFER_FP4_W2_EARLY=$v OUT=$OUT/tr_v4_$v bash tools/gpu/trace_decode.sh 1 16 >/dev/null 2>&1 ; echo "V4 early=$v" ; '"$span"' $OUT/tr_v4_$v/trace_b1_sequence.txt ; done;
span_v41_tail|for v in 0 1 0 1 ; do DEEPINFER_FP4_W2_EARLY=$v OUT=$OUT/tr_v41_$v bash tools/gpu/trace_decode.sh 1 10 --family v41 >/dev/null 2>&1 ; echo "V4.1 early=$v" ; '"$span"' $OUT/tr_v41_$v/trace_b1_sequence.txt ; done'
exec bash "$(dirname "$0")/device_call.sh"
