#!/usr/bin/env bash
# The issue-4 benchmark tables of both families side by side (two H200s, one family per GPU): `v4_decode --chunk 2048
# --pdl on` (decode batch 1 / 8 / 64 / 256 at 4K and 64K context, prefill of 4K and 32K prompts, the phase
# breakdown) for V4-Flash on GPU 0 and V4.1-Flash on GPU 1. Logs and JSON in $OUT.
#   usage (GPU machine, repo root, prebuilt binaries in .gpubin): bash tools/gpu/decode_tables.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
bin=/tmp/deepinfer-bin
mkdir -p "$bin" "$OUT" && tar -xf .gpubin/bins.tar.xz -C "$bin" || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} DEEPINFER_REQUIRE_GPU=1
CUDA_VISIBLE_DEVICES=0 timeout 330 "$bin/v4_decode" --chunk 2048 --pdl on --out "$OUT/v4_decode_full_v4.json" \
  >"$OUT/v4_decode_full_v4.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 330 "$bin/v4_decode" --family v41 --chunk 2048 --pdl on \
  --out "$OUT/v4_decode_full_v41.json" >"$OUT/v4_decode_full_v41.log" 2>&1
wait
for f in v4 v41; do echo "== $f"; sed -n 1,40p "$OUT/v4_decode_full_$f.log"; done
