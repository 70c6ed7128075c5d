#!/usr/bin/env bash
# Session 68's next call, meant for an H200 (the last H200 decode headline is run 284), any card otherwise:
#   1. the select / indexer tests on the skip-zero-lo build (bench/gpu/attempts/session68_skip_zero_lo.patch:
#      tile_dots skips the lo mma where a warp's query remainders are all zero, as the engine's FP4 queries leave
#      them; the tests' random fp32 queries keep it);
#   2. decode: the engine before the tensor-core scores (v4_decode_base, 10d76343), HEAD's (v4_decode) and the
#      patched one (v4_decode_skiplo), V4 and V4.1, batches 1 and 8, 2 repeats (the arm order reversed on the
#      second), the copy-roofline column measured in the same runs, one logits digest per model and batch expected;
#   3. the select stamps of V4 and V4.1 at batch 1 (HEAD), with every score block's last staging and first / last
#      scores done (select_stamps.cuh kAccStagedLatest ..: which score block, and which phase, sets the ticket now
#      that the scoring is fast: bench/gpu/NOTES.md "Session 68").
#   pack (here, sha256 5f8dd947): PACK_ONLY="test_gpu_model v4_decode" EXTRA_BINS="<10d76343's v4_decode as
#     v4_decode_base> <patched v4_decode as v4_decode_skiplo> <patched test_gpu_model as test_gpu_model_skiplo>"
#     BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session68_call3.sh   (~3 min)
set -uo pipefail
source "$(dirname "$0")/steps.sh"
b=/tmp/deepinfer-bin
[ -x $b/v4_decode ] || { mkdir -p $b && tar xJf .gpubin/bins.tar.xz -C $b; }
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
DEEPINFER_REQUIRE_GPU=1 timeout 200 $b/test_gpu_model_skiplo --gtest_filter="$INDEX_SELECT_TESTS" \
  >"$out/tests_skiplo.log" 2>&1
echo "tests_skiplo rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$out/tests_skiplo.log" | tr '\n' ' ')"
for fam in v4 v41; do
  OUT=$out/ab_$fam bash "$(dirname "$0")/../decode_switch_ab.sh" $b BIN "v4_decode_base v4_decode v4_decode_skiplo" 2 \
    --family $fam --batches 1,8 >"$out/ab_$fam.log" 2>&1
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
