#!/usr/bin/env bash
# Session 68, meant for an H200 (the last H200 decode headline is run 284): the landed index scores on the tensor
# cores (v4_decode) against the engine before them (v4_decode_base, 10d76343), V4 and V4.1, batches 1 and 8, 2
# repeats (the arm order reversed on the second), the copy-roofline column measured in the same runs.
#   pack (here): session68_call2.sh's
#   usage (GPU machine, repo root): bash tools/gpu/calls/session68_call3.sh   (~1 min)
set -uo pipefail
b=/tmp/deepinfer-bin
[ -x $b/v4_decode ] || { mkdir -p $b && tar xJf .gpubin/bins.tar.xz -C $b; }
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
for fam in v4 v41; do
  OUT=$out/ab_$fam bash "$(dirname "$0")/../decode_switch_ab.sh" $b BIN "v4_decode_base v4_decode" 2 --family $fam \
    --batches 1,8 >"$out/ab_$fam.log" 2>&1
  echo "== $fam"
  grep -E "median|digest" "$out/ab_$fam.log"
  grep -hE "^4096 +(1|8) " "$out"/ab_$fam/ab_BIN/*.log | sed "s/^/$fam /"
done
