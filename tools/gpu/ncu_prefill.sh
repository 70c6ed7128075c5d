#!/usr/bin/env bash
# Nsight Compute's full report of a grouped MXFP4 prefill kernel (issue 4: the prefill MoE GEMM below 50 % of the
# dense FP8 rate; bench/gpu/NOTES.md "v3 measured", "v5"): one launch of each of the first two shapes of
# `roofline --prefill-only` for the named version, every section (--set full: throughput breakdowns, warp stall
# reasons, L2 / shared-memory traffic, occupancy), as text. The first two launches of the kernel are both V4 w13
# (4096 tokens top-6: the eager first call and the first graph replay of time_us); under --quick each shape launches
# a version 16 times (1 eager + 3 graph nodes x 5 replays), so SKIP = 16 profiles V4 w2's first two instead.
#   usage (GPU machine, repo root, prebuilt binaries from .gpubin):
#     bash tools/gpu/ncu_prefill.sh [v3|v5 (default)|v8|v9|v13] [SKIP (default 0)]
#   NCU_EXTRA: more ncu options, e.g. NCU_EXTRA="--print-details all" for the per-reason warp stall table (run 41's
#   text report printed only the section summaries: no stall breakdown).
#   output: $OUT/ncu_prefill_<version>.txt
set -uo pipefail
source "$(dirname "$0")/ncu_setup.sh"
ncu_setup ncu_prefill roofline || exit 1
V=${1:-v5}
SKIP=${2:-0}
report=$OUT/ncu_prefill_$V${2:+_skip$SKIP}.txt
timeout 300 "$NCU" --kernel-name "regex:mxfp4_prefill_${V}_kernel" --launch-skip "$SKIP" --launch-count 2 \
  ${NCU_EXTRA:-} --set full --print-summary none "$bin/roofline" --prefill-only --quick --out /tmp/ncu_prefill_roofline.json \
  >"$report" 2>&1
rc=$?
echo "ncu rc=$rc; $(grep -c "mxfp4_prefill_${V}" "$report") kernel headers"
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Stall|Issue Slot" \
  "$report" | head -60
exit $rc
