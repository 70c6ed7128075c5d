#!/usr/bin/env bash
# Session 48: the dense FP8 streams' L2 lead (DEEPINFER_STREAM_L2_LEAD=n, cuda/stream_gemm.cuh l2_lead_switch): run
# 235's lane probe found that a PDL dependent's bulk copies do not land before its primary ends, while an L2 prefetch
# issued at the same point does. The sweep: n = 0 (today) / 1 / 2 / 4 / 8 chunks of 16 KB per block, batches 1 / 8,
# both models, 2 repeats; one logits digest per batch expected (a prefetch changes no value).
#   .gpubin/bins.tar.xz: BUILD_DIR=build-cuda PACK_ONLY="test_gpu v4_decode" bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session48_call1.sh   (~2.5 min)
#   QUICK=1: V4 at batch 1 only (~1 min).
set -uo pipefail
export SKIP_SUITES=1
vals="0 1 2 4 8"
sweep() {  # name, extra v4_decode args
  printf '%s|OUT=$OUT/%s bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_L2_LEAD "%s" 2 %s' "$1" "$1" "$vals" "$2"
}
if [ "${QUICK:-0}" = 1 ]; then
  export EXTRA_GPU0="$(sweep ab_lead_v4 '--batches 1')"
else
  export EXTRA_GPU0="tests|\$b/test_gpu --gtest_filter='GpuFp8Gemm.StreamEntryTriggerChainBitwise';
$(sweep ab_lead_v4 '--batches 1,8');
$(sweep ab_lead_v41 '--family v41 --batches 1,8')"
fi
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
