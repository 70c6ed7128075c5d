#!/usr/bin/env bash
# Where one decode step's time goes, kernel by kernel (issue 4: the batch-1 gap to the HBM roofline). Runs on the
# GPU machine over the prebuilt binaries (carry .gpubin): `v4_decode --profile-step B` replays one graph step of B
# rows at 4K context under Nsight Compute (every graph node profiled on its own: its duration without neighbours
# overlapping, and its DRAM bytes), then tools/gpu/kernel_table.py sums the kernels by name and prints, per
# kernel: count, microseconds, DRAM GB/s and the fraction of the copy roofline its own bytes would allow.
#   usage: bash tools/gpu/profile_decode.sh [BATCH (1)] [LAYERS (4)] [FAMILY (v4)] [V4_DECODE_FLAG]
#          (the flag, e.g. --batch-invariant, is passed to v4_decode and names the output: profile_b1_batch-invariant)
#   env NCU_TIMEOUT: seconds ncu may run (400)
#   output: $OUT/profile_b<B>[_<flag>].csv (ncu raw), $OUT/profile_b<B>[_<flag>].txt (the table)
# A profiled kernel runs serialized, caches flushed between kernels (ncu's default --cache-control all), so the sum
# is above the graph's step time; the ranking and each kernel's bytes / time are what this is for.
set -uo pipefail
B=${1:-1}
LAYERS=${2:-4}
FAMILY=${3:-v4}
FLAG=${4:-}
tag=b$B${FLAG:+_${FLAG#--}}
source "$(dirname "$0")/ncu_setup.sh"
ncu_setup profile_decode v4_decode || exit 1
csv=$OUT/profile_$tag.csv
timeout "${NCU_TIMEOUT:-400}" "$NCU" --profile-from-start off --graph-profiling node --csv \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  "$bin/v4_decode" --quick --family "$FAMILY" --layers "$LAYERS" --profile-step "$B" $FLAG >"$csv" 2>"$OUT/profile_$tag.err"
rc=$?
echo "ncu rc=$rc ($(grep -c '"gpu__time_duration.sum"' "$csv") kernel rows)"
python3 tools/gpu/kernel_table.py "$csv" --layers "$LAYERS" | tee "$OUT/profile_$tag.txt"
