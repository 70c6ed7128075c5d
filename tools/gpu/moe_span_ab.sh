#!/usr/bin/env bash
# One traced batch-1 decode step per setting (tools/gpu/trace_decode.sh), each reduced by tools/gpu/moe_span.py to
# the routed experts' span per MoE layer (w1|w3 start -> w2 end, routing start -> combine end): a timeline A/B of
# switches that move the routed experts' launches.
#   usage (GPU machine, repo root, binaries in $b): tools/gpu/moe_span_ab.sh LAYERS "VAR=VALUE ..." [v4_decode args]
#   e.g. tools/gpu/moe_span_ab.sh 16 "DEEPINFER_PDL=1 DEEPINFER_PDL=0"
#        tools/gpu/moe_span_ab.sh 10 "DEEPINFER_MOE_SHARED_FIRST=1 DEEPINFER_MOE_SHARED_FIRST=0" --family v41
set -uo pipefail
layers=$1 settings=$2
shift 2
root=${OUT:-$PWD/gpu-out}
for s in $settings; do
  dir=$root/span_${layers}_$s
  env "$s" OUT="$dir" bash tools/gpu/trace_decode.sh 1 "$layers" "$@" >/dev/null 2>&1
  echo "== $s ($layers layers $*)"
  python3 tools/gpu/moe_span.py "$dir/trace_b1_sequence.txt" || echo "no trace for $s"
done
