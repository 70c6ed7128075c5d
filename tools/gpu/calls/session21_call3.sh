#!/usr/bin/env bash
# Third device call of session 21 (binaries of the MXFP4 stream's phase stamps, PACK_ONLY="roofline"): where a
# batch-1 launch of the routed experts' wgmma stream spends its ~27 us (`roofline --fp4-phases`: V4 / V4.1, w1|w3
# and w2, batch 1 and 8), twice. ~60 s.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session21_call3.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
b=/tmp/deepinfer-bin
mkdir -p "$b" "$OUT"
tar -xf .gpubin/bins.tar.xz -C "$b" || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for i in 1 2; do
  timeout 200 "$b/roofline" --fp4-phases --out "$OUT/fp4_phases_$i.json" > "$OUT/fp4_phases_$i.log" 2>&1
  echo "run $i rc=$?"
done
for f in fp4_phases_1 fp4_phases_2; do
  echo "-- $f"
  grep -E "copy|plain" "$OUT/$f.log" | grep -vE "^ *$" | cut -c1-900
done
