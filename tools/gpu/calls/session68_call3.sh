#!/usr/bin/env bash
# Session 68's next call, meant for an H200 (the last H200 decode headline is run 284), any card otherwise:
#   1. the landed index scores on the tensor cores (v4_decode) against the engine before them (v4_decode_base,
#      10d76343), V4 and V4.1, batches 1 and 8, 2 repeats (the arm order reversed on the second), the copy-roofline
#      column measured in the same runs;
#   2. the select stamps of V4 and V4.1 at batch 1 with every score block's staged / scored times (select_stamps.cuh
#      kAccStagedLatest ..: which score block, and which phase, sets the ticket now that the scoring is fast:
#      bench/gpu/NOTES.md "Session 68").
#   pack (here): PACK_ONLY="test_gpu test_gpu_model v4_decode" EXTRA_BINS="<10d76343's v4_decode as v4_decode_base>"
#     BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session68_call3.sh   (~2 min)
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
for fam in v4 v41; do
  timeout 150 $b/v4_decode --quick --pdl on --family $fam --select-stamps --out "$out/stamps_$fam.json" \
    >"$out/stamps_$fam.log" 2>&1 || echo "stamps $fam failed (rc $?)"
  echo "== stamps $fam"
  grep -E '^ *(layer|all) ' "$out/stamps_$fam.log" | cut -c1-330
done
