#!/usr/bin/env bash
# Same-call A/B of the KV pool formats (DEEPINFER_KV_FORMAT=bf16 vs fp8: V4's packed FP8 records, V4.1's MXFP8 window
# rows and FP4 entries) on the whole-model benchmark: `v4_decode --family F --layers L --chunk 2048 --pdl on`, the
# two formats alternating REPS times; prints each run's KV line and its decode (4K / 64K) and prefill rows.
#   usage (GPU machine, repo root): tools/gpu/kv_format_ab.sh BIN_DIR FAMILY LAYERS [REPS (2)]
set -uo pipefail
bin=$1 family=$2 layers=$3 reps=${4:-2}
out=${OUT:-$PWD/gpu-out}/kv_ab_$family
mkdir -p "$out"
for i in $(seq 1 "$reps"); do
  for f in bf16 fp8; do
    DEEPINFER_KV_FORMAT=$f timeout 200 "$bin/v4_decode" --family "$family" --layers "$layers" --chunk 2048 --pdl on \
      --out "$out/${f}_$i.json" >"$out/${f}_$i.log" 2>&1 || echo "$f run $i failed (rc $?)"
    grep -E "^(4096|32768|65536) +[0-9]+ +[0-9.]+|^KV caches" "$out/${f}_$i.log" | sed "s/^/$f $i: /"
  done
done
