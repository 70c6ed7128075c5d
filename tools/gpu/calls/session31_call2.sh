#!/usr/bin/env bash
# (Its switches are not on main: build with bench/gpu/attempts/session31_fp4_flood_gate_ramp_staging.patch applied on 9b72565.)
# Session 31, second call: (1) the MXFP4 stream's flood gate (cuda/stream_fp4_wgmma.cuh FloodGate,
# DEEPINFER_FP4_FLOOD_GATE=n: the routed launch's producer issues n stages, then waits for the consumers' first staged
# B, so their activation loads do not queue behind the block's weight copies; run 159's stamps: B staged ~4.2 us after
# the wait): its bitwise test, same-run A/Bs on both models, V4.1's in-step stamps with and without it; (2) the mid
# kernels' late release (stream_gemm.cuh mid_kernel_body): their tests and a BIN A/B against the build before it
# (v4_decode_late = 9b72565; the mid kernels run the dense products of 9-64 rows, so batch 64 is the column to read).
# Build here first: cp build-cuda/gpu/bench/v4_decode /tmp/v4_decode_late (before the change), then
#   EXTRA_BINS=/tmp/v4_decode_late BUILD_DIR=build-cuda PACK_ONLY="test_gpu test_gpu_model roofline v4_decode" \
#     bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session31_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests|timeout 240 \$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*:GpuFp8Gemm.Mid*' > \$OUT/tests.log 2>&1 || true && tail -3 \$OUT/tests.log && echo bitwise_zero=\$(grep -c 'mismatches=0/' \$OUT/tests.log) nonzero=\$(grep 'mismatches=' \$OUT/tests.log | grep -vc 'mismatches=0/');
ab_gate_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_FLOOD_GATE 'off 0 1' 3;
ab_gate_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_FLOOD_GATE 'off 0 1' 3 --family v41;
ab_mid|OUT=\$OUT/mid bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_late v4_decode' 2;
stamps_v41_off|timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_off.json > \$OUT/stamps_v41_off.log 2>&1 || true && tail -4 \$OUT/stamps_v41_off.log | cut -c1-220;
stamps_v41_gate0|DEEPINFER_FP4_FLOOD_GATE=0 timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_gate0.json > \$OUT/stamps_v41_gate0.log 2>&1 || true && tail -4 \$OUT/stamps_v41_gate0.log | cut -c1-220"
exec bash "$(dirname "$0")/../device_call.sh"
