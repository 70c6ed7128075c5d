#!/usr/bin/env bash
# Session 47, call 2: the lane probe and helper-128's SASS audit (five changes that take a dependent L2 round trip off
# the batch-1 path of rms_norm_f32_rope, the attention merge / merge epilogue and the index query finish, meant to
# keep every output bit).
#   .gpubin/bins.tar.xz, one pack (xz's 192 MiB dictionary: 15 MB): the audit build's test_gpu, test_gpu_model and
#   v4_decode, v4_decode_base (the same tree without the audit; both print the last step's logits digest), lane_probe.
#  1. lane_probe: can a weight stream fill its ring while a latency kernel runs on SMs of its own? (bench/gpu/lane_probe.cu)
#  2. The audit's tests: the kernels' own suites (test_gpu) and the model-level ones around them (test_gpu_model).
#  3. BIN A/B, 3 repeats, batches 1 / 8, both models; the digest lines say whether the bits are the base's.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session47_call2.sh   (~5 min)
#   QUICK=1: the probe, the model-level tests of V4 and the A/B at batch 1 with 2 repeats (~2.5 min).
set -uo pipefail
export SKIP_SUITES=1
kern='GpuRmsNorm.*:GpuRope.*:GpuSinkAttention.*:GpuKvCache.*:GpuKvRecord*:GpuBatchInvariance.*'
model='V4GpuForward.*:V41GpuForward.*:GpuMergeEpilogue.*:GpuAttentionPdl.*:GpuCompressorIndexer.*'
model+=':GpuIndexQueryFirst.*:GpuQRopeEpilogue.*:GpuQNormPrologue.*'

if [ "${QUICK:-0}" = 1 ]; then
  export EXTRA_GPU0="lane|timeout 90 \$b/lane_probe --out \$OUT/lane.json;
tests_model|\$b/test_gpu_model --gtest_filter='V4GpuForward.*:GpuMergeEpilogue.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_base v4_decode' 2 --batches 1;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_base v4_decode' 2 --family v41 --batches 1"
else
  export EXTRA_GPU0="lane|timeout 90 \$b/lane_probe --out \$OUT/lane.json;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_base v4_decode' 3 --batches 1,8;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_base v4_decode' 3 --family v41 --batches 1,8;
tests_kernels|\$b/test_gpu --gtest_filter='$kern';
tests_model|\$b/test_gpu_model --gtest_filter='$model'"
fi
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
