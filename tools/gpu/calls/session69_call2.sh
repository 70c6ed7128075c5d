#!/usr/bin/env bash
# Session 69's second call (pack af7d4a4a: v4_decode before lead G, v4_decode_bf16q and test_gpu_model_bf16q = HEAD's
# engine, c923d7d8):
#   1. what holds the select's ticket (run 306: every score block's scores are done ~6 us before it): the select
#      stamps of HEAD's engine, V4 and V4.1 at batch 1, as the step runs them, with the query branch's wq_b moved
#      onto the main stream (DEEPINFER_INDEX_QUERY=before_join: no weight stream beside the select), and with every
#      branch on the main stream (DEEPINFER_GPU_SIDE_STREAM=0). If the gap between the last scores and the ticket
#      closes without the stream beside it, the score blocks' arrival waits in their SMs' request queues behind
#      wq_b's weight stream (bench/gpu/NOTES.md "Session 26").
#   2. on an H200 only: the headline, HEAD's engine against the one before lead G (2 repeats, both orders).
#   3. the whole test_gpu_model on HEAD's engine (~350 s on an H100).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session69_call2.sh
set -uo pipefail
source "$(dirname "$0")/steps.sh"
call_setup /tmp/deepinfer-bin
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$card"
for fam in v4 v41; do
  select_stamps_run ${fam}_default $b/v4_decode_bf16q $fam
  select_stamps_run ${fam}_before_join $b/v4_decode_bf16q $fam DEEPINFER_INDEX_QUERY=before_join
  select_stamps_run ${fam}_side_off $b/v4_decode_bf16q $fam DEEPINFER_GPU_SIDE_STREAM=0
done
if [[ $card == *H200* ]]; then decode_ab_models $b BIN "v4_decode v4_decode_bf16q" 2 1,8; fi
DEEPINFER_REQUIRE_GPU=1 timeout 420 $b/test_gpu_model_bf16q >"$out/tests_model_full.log" 2>&1
echo "test_gpu_model rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$out/tests_model_full.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$out/tests_model_full.log" | head -10
xz -k "$out/tests_model_full.log"
