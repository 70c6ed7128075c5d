#!/usr/bin/env bash
# Second device call of session 17 (binaries of session 16's last code; ran as runs 96-97, bench/results/
# gpu_h200_run96-98_COMMAND.md; the three MoE switches it measures are deleted since cdba962), no suites:
# session 16's three compiled MoE changes, each bitwise against the default (session17_call1.sh ran their tests; bench/gpu/NOTES.md "Session 16"):
#  - the MXFP4 wgmma consumers pipelined in runs of 4 stages (DEEPINFER_FP4_PIPELINE=1): the kernel rows
#    (`roofline --gemm-only --quick`, its mxfp4_experts_stream_wgmma rows, off / on), then the whole step;
#  - docs/persistent_ffn.md §8's first experiment, the early w2 launch (DEEPINFER_FP4_W2_EARLY=1);
#  - the routed w1|w3 and w2 in one launch (DEEPINFER_MOE_FFN_FUSED=1).
# Same-call A/Bs on 16 V4-Flash and 10 V4.1-Flash layers (4K, `v4_decode --quick --pdl on`), then one traced batch-1
# step per arm and family reduced by tools/gpu/moe_span.py to the routed experts' span per layer (w1|w3 start -> w2
# end: 34.7 us on V4 in run 92; the early launch's falsifier: w2's end after w1|w3's end must fall by >= 3 us from
# ~13.0). ~560 s; drop the V4.1 traces if the call runs long.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session17_call2.sh
set -uo pipefail
export SKIP_SUITES=1
part_a='fp4_rows_tail|bash tools/gpu/switch_sweep.sh DEEPINFER_FP4_PIPELINE "0 1" "^copy|mxfp4_experts_stream_wgmma" -- $b/roofline --gemm-only --quick --out $OUT/rows_fp4_pipeline_{v}.json;
ab_pipeline|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_PIPELINE "0 1" 2;
ab_pipeline_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_PIPELINE "0 1" 2 --family v41;
ab_w2early|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_W2_EARLY "0 1" 2;
ab_w2early_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_W2_EARLY "0 1" 2 --family v41;
ab_ffn|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_FFN_FUSED "0 1" 2;
ab_ffn_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_FFN_FUSED "0 1" 2 --family v41'
# b (run after a, which measured the whole steps): the kernel rows with pipelining off / on, the traced routed spans
# per arm on V4 (w2 end - w1|w3 end: the early launch's falsifier), then c's prefill rows in two alternations.
spans='DEEPINFER_FP4_W2_EARLY=0 DEEPINFER_FP4_W2_EARLY=1 DEEPINFER_MOE_FFN_FUSED=1 DEEPINFER_FP4_PIPELINE=1'
# c: prefill v11 (v9 without its K loops' spills, DEEPINFER_PREFILL_KERNEL=v11) against v9 on the 16384-token rows
# (the mxfp4_prefill_v9 rows run v11 with the switch), alternating.
prefill='bash tools/gpu/switch_sweep.sh DEEPINFER_PREFILL_KERNEL'
prefill_args='"^copy|^roofline|mxfp4_prefill_v9 " --timeout 140 -- $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill_{v}_{i}.json'
part_c="prefill_v11_tail|$prefill \"v9 v11\" $prefill_args;
prefill_v11b_tail|$prefill \"v11 v9\" $prefill_args"
part_b="${part_a%%$'\n'*}
span_v4_tail|bash tools/gpu/moe_span_ab.sh 16 \"$spans\";
$part_c"
case ${1:-} in
  a) export EXTRA_GPU0=$part_a ;;
  b) export EXTRA_GPU0=$part_b ;;
  c) export EXTRA_GPU0=$part_c ;;
  *) echo "usage: $0 a|b|c" >&2; exit 2 ;;
esac
exec bash "$(dirname "$0")/../device_call.sh"
