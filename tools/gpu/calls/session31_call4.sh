#!/usr/bin/env bash
# (Its switches are not on main: build with bench/gpu/attempts/session31_fp4_flood_gate_ramp_staging.patch applied on 9b72565.)
# Session 31, fourth call: the MXFP4 stream's B staging with its codes' and scales' loads in one round trip and the
# zero fill while they are in flight (stream_fp4_wgmma.cuh stage_b, stream_gemm.cuh load_then_put2; run 175's stamps:
# stage_b ~3 us at V4.1 batch 1, four dependent round trips), alone (BIN A/B against v4_decode_ramp, the build of run
# 175) and with the ramp (DEEPINFER_FP4_RAMP, which took the first stage's landing from 5.13 to 4.14 us at D = 1 but
# left the consumers waiting on their own staging). Tests: every GpuStreamFp4Wgmma test and the model forwards.
# Build here first: cp build-cuda/gpu/bench/v4_decode /tmp/v4_decode_ramp (before the change), then
#   EXTRA_BINS=/tmp/v4_decode_ramp BUILD_DIR=build-cuda PACK_ONLY="test_gpu test_gpu_model roofline v4_decode" \
#     bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session31_call4.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="ab_bin_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_ramp v4_decode' 3 --family v41;
ab_bin_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_ramp v4_decode' 3;
ab_ramp_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_RAMP '0 1 2' 2 --family v41;
ab_ramp_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_RAMP '0 1 2' 2;
stamps_v41_ramp0|timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_ramp0.json > \$OUT/stamps_v41_ramp0.log 2>&1 || true && grep 'all ' \$OUT/stamps_v41_ramp0.log | cut -c1-200;
stamps_v41_ramp1|DEEPINFER_FP4_RAMP=1 timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_ramp1.json > \$OUT/stamps_v41_ramp1.log 2>&1 || true && grep 'all ' \$OUT/stamps_v41_ramp1.log | cut -c1-200;
tests|timeout 200 \$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*' > \$OUT/tests.log 2>&1 || true && tail -3 \$OUT/tests.log && echo bitwise_zero=\$(grep -c 'mismatches=0/' \$OUT/tests.log) nonzero=\$(grep 'mismatches=' \$OUT/tests.log | grep -vc 'mismatches=0/');
model|timeout 280 \$b/test_gpu_model --gtest_filter='V41GpuForward.*:V4GpuForward.*:GpuMoe.*' > \$OUT/model.log 2>&1 || true && tail -3 \$OUT/model.log && echo bitwise_zero=\$(grep -c 'mismatches=0/' \$OUT/model.log) nonzero=\$(grep 'mismatches=' \$OUT/model.log | grep -vc 'mismatches=0/')"
exec bash "$(dirname "$0")/../device_call.sh"
