#!/usr/bin/env bash
# Nsight Compute's full report (stall reasons, issue activity, memory traffic) of chosen kernels of one batch-B
# decode step (issue 4, the batch-1 gap): `v4_decode --profile-step B` replays one graph step at 4K context and
# ncu profiles the graph nodes whose kernel names match REGEX, each on its own.
#   usage (GPU machine, repo root, prebuilt binaries from .gpubin):
#     bash tools/gpu/ncu_decode_kernels.sh [REGEX (hc_site|decode_route|stream_gemm_kernel)] [B (1)] [LAYERS (2)] [COUNT (16)]
#   output: $OUT/ncu_decode_kernels_b<B>.txt, key lines printed
set -uo pipefail
REGEX=${1:-hc_site|decode_route|stream_gemm_kernel}
B=${2:-1}
LAYERS=${3:-2}
COUNT=${4:-16}
source "$(dirname "$0")/ncu_setup.sh"
ncu_setup ncu_decode_kernels v4_decode || exit 1
report=$OUT/ncu_decode_kernels_b$B.txt
timeout 400 "$NCU" --profile-from-start off --graph-profiling node --kernel-name "regex:$REGEX" \
  --launch-count "$COUNT" --set full --print-summary none \
  "$bin/v4_decode" --quick --layers "$LAYERS" --profile-step "$B" >"$report" 2>&1
rc=$?
echo "ncu rc=$rc"
grep -E "^  [a-zA-Z_:]+.*\(|Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|No Eligible|Achieved Occupancy|Registers Per" \
  "$report" | head -120
exit $rc
