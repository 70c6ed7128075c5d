#!/usr/bin/env bash
# Session 67, the headline at HEAD (71905999 and later: the CSA2 one-wave rule landed; in session67_call1.sh's pack
# that engine is v4_decode_csa2_onewave, in a pack built at HEAD v4_decode): `v4_decode --quick --pdl on --batches
# 1,8` on V4 and V4.1, twice each, the copy-roofline column measured in the same run. Meant for an H200 (the last H200 headline is run 284, before ef96c19d).
#   pack (here): session67_call1.sh's, or PACK_ONLY="v4_decode" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session67_call2.sh   (~1.5 min)
set -uo pipefail
b=/tmp/deepinfer-bin
[ -x $b/v4_decode ] || { mkdir -p $b && tar xJf .gpubin/bins.tar.xz -C $b; }
prog=$b/v4_decode_csa2_onewave
[ -x "$prog" ] || prog=$b/v4_decode
out=${OUT:-$PWD/gpu-out}/headline
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/gpu.txt"
for i in 1 2; do
  for fam in v4 v41; do
    timeout 120 "$prog" --quick --pdl on --family $fam --batches 1,8 \
      --out "$out/${fam}_$i.json" >"$out/${fam}_$i.log" 2>&1 || echo "$fam run $i failed (rc $?)"
    grep -E '^(device|4096 )' "$out/${fam}_$i.log" | sed "s/^/$fam $i: /"
  done
done
