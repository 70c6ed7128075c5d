#!/usr/bin/env bash
# (Its switch is not on main: build with bench/gpu/attempts/session32_fp4_dynamic_items.patch applied on 715d215.)
# Session 32, third call: dynamic items in the MXFP4 wgmma stream (cuda/stream_fp4_wgmma.cuh fp4_wgmma_kernel,
# DEEPINFER_FP4_DYNAMIC=0|w13|1: where every row of a routed launch fits B's 8 slots, each block takes its next item
# from the launch's counter instead of a fixed share, B staged once with all rows). Its tests (GpuStreamFp4Wgmma.*,
# DynamicItemsSameBits new), the MoE GPU tests, a same-run A/B of the switch on both models (plus the build before
# the change: its default kernels are not the same code), and V4.1's / V4's in-step MXFP4 stamps with it off and on.
# Build here first: cp build-cuda/gpu/bench/v4_decode /tmp/v4_decode_old (before the change), then
#   EXTRA_BINS=/tmp/v4_decode_old BUILD_DIR=build-cuda PACK_ONLY="test_gpu test_gpu_model roofline v4_decode" \
#     bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session32_call3.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests|timeout 200 \$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*' > \$OUT/tests.log 2>&1 || true && tail -3 \$OUT/tests.log && echo bitwise_zero=\$(grep -c 'mismatches=0/' \$OUT/tests.log) nonzero=\$(grep 'mismatches=' \$OUT/tests.log | grep -vc 'mismatches=0/');
moe|DEEPINFER_FP4_DYNAMIC=1 timeout 200 \$b/test_gpu_model --gtest_filter='GpuMoe.*' > \$OUT/moe.log 2>&1 || true && tail -3 \$OUT/moe.log && echo bitwise_zero=\$(grep -c 'mismatches=0/' \$OUT/moe.log) nonzero=\$(grep 'mismatches=' \$OUT/moe.log | grep -vc 'mismatches=0/');
ab_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_DYNAMIC '0 w13 1' 3;
ab_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_DYNAMIC '0 w13 1' 3 --family v41;
ab_bin|OUT=\$OUT/bin bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 2;
stamps_v41_0|timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_0.json > \$OUT/stamps_v41_0.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v41_0.log | cut -c1-250;
stamps_v41_1|DEEPINFER_FP4_DYNAMIC=1 timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_1.json > \$OUT/stamps_v41_1.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v41_1.log | cut -c1-250;
stamps_v4_0|timeout 150 \$b/v4_decode --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4_0.json > \$OUT/stamps_v4_0.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v4_0.log | cut -c1-250;
stamps_v4_1|DEEPINFER_FP4_DYNAMIC=1 timeout 150 \$b/v4_decode --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4_1.json > \$OUT/stamps_v4_1.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v4_1.log | cut -c1-250"
exec bash "$(dirname "$0")/../device_call.sh"
