#!/usr/bin/env bash
# Session 67, the headline at HEAD (71905999: the CSA2 one-wave rule landed; the pack's v4_decode_csa2_onewave is
# that engine): `v4_decode --quick --pdl on --batches 1,8` on V4 and V4.1, twice each, the copy-roofline column
# measured in the same run. Meant for an H200 (the last H200 headline is run 284, before ef96c19d).
#   pack (here): session67_call1.sh's.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session67_call2.sh   (~1.5 min)
set -uo pipefail
b=/tmp/deepinfer-bin
[ -x $b/v4_decode_csa2_onewave ] || { mkdir -p $b && tar xJf .gpubin/bins.tar.xz -C $b; }
out=${OUT:-$PWD/gpu-out}/headline
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/gpu.txt"
for i in 1 2; do
  for fam in v4 v41; do
    timeout 120 $b/v4_decode_csa2_onewave --quick --pdl on --family $fam --batches 1,8 \
      --out "$out/${fam}_$i.json" >"$out/${fam}_$i.log" 2>&1 || echo "$fam run $i failed (rc $?)"
    grep -E '^(device|4096 )' "$out/${fam}_$i.log" | sed "s/^/$fam $i: /"
  done
done
