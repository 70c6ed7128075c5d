#!/usr/bin/env bash
# Session 37, eighth call: which dense FP8 launches gain or lose with the mid kernels in batch-invariant mode (run
# 204: batch 1 -12 % on V4, batch 256 +18 %). ncu kernel tables (profile_decode.sh, 4 V4 layers) in the mode at batch 1
# and 256 with DEEPINFER_BATCH_INVARIANT_FP8=wgmma and =mid, each launch kept in order in the CSV.
#   usage (GPU machine, repo root; .gpubin: v4_decode): bash tools/gpu/calls/session37_call8.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="p1_wgmma|OUT=\$OUT/wgmma NCU_TIMEOUT=120 bash tools/gpu/profile_decode.sh 1 4 v4 --batch-invariant;
p1_mid|OUT=\$OUT/mid DEEPINFER_BATCH_INVARIANT_FP8=mid NCU_TIMEOUT=120 bash tools/gpu/profile_decode.sh 1 4 v4 --batch-invariant;
p256_wgmma|OUT=\$OUT/wgmma NCU_TIMEOUT=120 bash tools/gpu/profile_decode.sh 256 4 v4 --batch-invariant;
p256_mid|OUT=\$OUT/mid DEEPINFER_BATCH_INVARIANT_FP8=mid NCU_TIMEOUT=120 bash tools/gpu/profile_decode.sh 256 4 v4 --batch-invariant"
exec bash "$(dirname "$0")/../device_call.sh"
