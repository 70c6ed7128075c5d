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
b=/tmp/deepinfer-bin
[ -x $b/v4_decode ] || { mkdir -p $b && tar xJf .gpubin/bins.tar.xz -C $b; }
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$card"
for fam in v4 v41; do
  for arm in default before_join side_off; do
    case $arm in
      default) env=() ;;
      before_join) env=(DEEPINFER_INDEX_QUERY=before_join) ;;
      side_off) env=(DEEPINFER_GPU_SIDE_STREAM=0) ;;
    esac
    log=$out/stamps_${fam}_$arm.log
    env "${env[@]}" timeout 150 $b/v4_decode_bf16q --quick --pdl on --family $fam --select-stamps \
      --out "$out/stamps_${fam}_$arm.json" >"$log" 2>&1 || echo "stamps $fam $arm failed (rc $?)"
    echo "== stamps $fam $arm"
    grep -E '^ *(layer|all) ' "$log" | sed -E 's/: *score_to_ticket_us ([0-9.]+) score_to_end_us ([0-9.]+).*/: ticket \1 end \2/'
  done
done
if [[ $card == *H200* ]]; then
  for fam in v4 v41; do
    OUT=$out/ab_$fam bash "$(dirname "$0")/../decode_switch_ab.sh" $b BIN "v4_decode v4_decode_bf16q" 2 \
      --family $fam --batches 1,8 >"$out/ab_$fam.log" 2>&1
    echo "== $fam"
    grep -E "median|digest" "$out/ab_$fam.log"
    grep -hE "^4096 +(1|8) " "$out"/ab_$fam/ab_BIN/*.log | sed "s/^/$fam /"
  done
fi
DEEPINFER_REQUIRE_GPU=1 timeout 420 $b/test_gpu_model_bf16q >"$out/tests_model_full.log" 2>&1
echo "test_gpu_model rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$out/tests_model_full.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$out/tests_model_full.log" | head -10
xz -k "$out/tests_model_full.log"
