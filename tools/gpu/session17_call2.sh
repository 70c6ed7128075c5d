#!/usr/bin/env bash
# Second device call of session 17 (binaries of session 16's last code), no suites: session 16's two compiled MoE
# changes, each bitwise against the default (session17_call1.sh ran their tests):
#  - the MXFP4 wgmma consumers pipelined in runs of 4 stages (DEEPINFER_FP4_PIPELINE=1): the kernel rows
#    (`roofline --gemm-only --quick`, its mxfp4_experts_stream_wgmma rows, off / on), then the whole step;
#  - docs/persistent_ffn.md §8's first experiment, the early w2 launch (DEEPINFER_FP4_W2_EARLY=1): same-call A/Bs and
#    one traced batch-1 step per arm and family, reduced by tools/gpu/moe_span.py to the routed experts' span per
#    layer (w1|w3 start -> w2 end; the prediction: w2's end after w1|w3's end falls by >= 3 us, from ~13.0 on V4).
# Same-call A/Bs: 16 V4-Flash and 10 V4.1-Flash layers, 4K, `v4_decode --quick --pdl on`. ~450 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/session17_call2.sh
set -uo pipefail
export SKIP_SUITES=1
span='python3 tools/gpu/moe_span.py'
export EXTRA_GPU0='fp4_rows_tail|for v in 0 1 ; do echo "DEEPINFER_FP4_PIPELINE=$v" ; DEEPINFER_FP4_PIPELINE=$v $b/roofline --gemm-only --quick 2>&1 | grep -E "^copy|mxfp4_experts_stream_wgmma" ; done;
ab_pipeline|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_PIPELINE "0 1" 2;
ab_pipeline_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_PIPELINE "0 1" 2 --family v41;
ab_w2early|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_W2_EARLY "0 1" 2;
ab_w2early_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_W2_EARLY "0 1" 2 --family v41;
span_v4_tail|for v in 0 1 0 1 ; do DEEPINFER_FP4_W2_EARLY=$v OUT=$OUT/tr_v4_$v bash tools/gpu/trace_decode.sh 1 16 >/dev/null 2>&1 ; echo "V4 early=$v" ; '"$span"' $OUT/tr_v4_$v/trace_b1_sequence.txt ; done;
span_v41_tail|for v in 0 1 0 1 ; do DEEPINFER_FP4_W2_EARLY=$v OUT=$OUT/tr_v41_$v bash tools/gpu/trace_decode.sh 1 10 --family v41 >/dev/null 2>&1 ; echo "V4.1 early=$v" ; '"$span"' $OUT/tr_v41_$v/trace_b1_sequence.txt ; done'
exec bash "$(dirname "$0")/device_call.sh"
