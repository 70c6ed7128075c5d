#!/usr/bin/env bash
# DRAM and L2 traffic of the grouped MXFP4 prefill GEMM's v13 launches (session 57: what its fp32 y stores cost,
# bench/gpu/NOTES.md "Session 57"): Nsight Compute's duration, DRAM bytes read / written and L2 sector hit rate for
# every v13 launch of `roofline --prefill-only --prefill-16k --quick` (the launches in the benchmark's row order;
# ncu flushes L2 before each), then the 16K-token launches' table (tools/gpu/ncu_traffic_table.py). The caller sets
# the environment the build reads (e.g. DEEPINFER_PREFILL_STORE=1 with session57_prefill_v13_store_hints.patch).
#   usage (GPU machine, repo root, prebuilt binaries from .gpubin): bash tools/gpu/ncu_prefill_traffic.sh TAG
#   output: $OUT/ncu_traffic_TAG.csv, its .err and .txt
set -uo pipefail
TAG=${1:?usage: ncu_prefill_traffic.sh TAG}
source "$(dirname "$0")/ncu_setup.sh"
ncu_setup ncu_prefill_traffic roofline || exit 1
csv=$OUT/ncu_traffic_$TAG.csv
timeout "${NCU_TIMEOUT:-240}" "$NCU" --kernel-name "regex:mxfp4_prefill_v13" --csv \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
  "$bin/roofline" --prefill-only --prefill-16k --quick --out "/tmp/ncu_traffic_$TAG.json" \
  >"$csv" 2>"$OUT/ncu_traffic_$TAG.err"
rc=$?
echo "ncu rc=$rc"
python3 tools/gpu/ncu_traffic_table.py "$csv" | tee "$OUT/ncu_traffic_$TAG.txt"
exit $rc
