#!/usr/bin/env bash
# (Its switches are not on main: build with bench/gpu/attempts/session31_fp4_flood_gate_ramp_staging.patch applied on 9b72565.)
# Session 31, third call: the MXFP4 stream's ramp (cuda/stream_fp4_wgmma.cuh FloodGate, DEEPINFER_FP4_RAMP=D: in the
# ring's first pass the routed launch's producer issues stage i only once stage i - D has landed). Run 174's stamps:
# V4.1's w1|w3 issues its five 34 KB stages at once at ~0.5 us and the first lands only at ~5.1 us (the copies of an
# SM progress together), so the consumers start late and then run consumer-bound (1.0 us a stage). The flood gate
# (DEEPINFER_FP4_FLOOD_GATE) lost in run 174. Bitwise test, same-run A/Bs on both models, V4.1 stamps with ramp 2.
# Build here first: BUILD_DIR=build-cuda PACK_ONLY="test_gpu test_gpu_model roofline v4_decode" bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session31_call3.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests|timeout 200 \$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.FloodGateSameBits' > \$OUT/tests.log 2>&1 || true && tail -3 \$OUT/tests.log && echo bitwise_zero=\$(grep -c 'mismatches=0/' \$OUT/tests.log) nonzero=\$(grep 'mismatches=' \$OUT/tests.log | grep -vc 'mismatches=0/');
ab_ramp_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_RAMP '0 1 2 3' 3 --family v41;
ab_ramp_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_RAMP '0 1 2 3' 3;
stamps_v41_ramp2|DEEPINFER_FP4_RAMP=2 timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_ramp2.json > \$OUT/stamps_v41_ramp2.log 2>&1 || true && tail -4 \$OUT/stamps_v41_ramp2.log | cut -c1-220;
stamps_v41_ramp1|DEEPINFER_FP4_RAMP=1 timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_ramp1.json > \$OUT/stamps_v41_ramp1.log 2>&1 || true && tail -4 \$OUT/stamps_v41_ramp1.log | cut -c1-220"
exec bash "$(dirname "$0")/../device_call.sh"
