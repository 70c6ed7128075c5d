#!/usr/bin/env bash
# (Its kernel change is not on main: build with bench/gpu/attempts/session32_fp4_span_staging.patch applied on 715d215.)
# Session 32, first call: the MXFP4 wgmma stream stages a block's whole row span once (cuda/stream_fp4_wgmma.cuh
# fp4_wgmma_kernel: a block whose items straddle two experts no longer runs stage_b twice). Its bitwise tests
# (GpuStreamFp4Wgmma.*, GroupAloneSameBits new), the MoE GPU tests, a same-run BIN A/B against the build before it
# on both models, and the in-step MXFP4 stamps of both builds (V4 and V4.1: the end spread and stage_b sums).
# Build here first: cp build-cuda/gpu/bench/v4_decode /tmp/v4_decode_old (before the change), then
#   EXTRA_BINS=/tmp/v4_decode_old BUILD_DIR=build-cuda PACK_ONLY="test_gpu test_gpu_model roofline v4_decode" \
#     bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session32_call1.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests|timeout 200 \$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*' > \$OUT/tests.log 2>&1 || true && tail -3 \$OUT/tests.log && echo bitwise_zero=\$(grep -c 'mismatches=0/' \$OUT/tests.log) nonzero=\$(grep 'mismatches=' \$OUT/tests.log | grep -vc 'mismatches=0/');
moe|timeout 200 \$b/test_gpu_model --gtest_filter='GpuMoe.*' > \$OUT/moe.log 2>&1 || true && tail -3 \$OUT/moe.log && echo bitwise_zero=\$(grep -c 'mismatches=0/' \$OUT/moe.log) nonzero=\$(grep 'mismatches=' \$OUT/moe.log | grep -vc 'mismatches=0/');
ab_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 3;
ab_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 3 --family v41;
stamps_v4_old|timeout 150 \$b/v4_decode_old --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4_old.json > \$OUT/stamps_v4_old.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v4_old.log | cut -c1-200;
stamps_v4_new|timeout 150 \$b/v4_decode --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4_new.json > \$OUT/stamps_v4_new.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v4_new.log | cut -c1-200;
stamps_v41_old|timeout 150 \$b/v4_decode_old --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_old.json > \$OUT/stamps_v41_old.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v41_old.log | cut -c1-200;
stamps_v41_new|timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41_new.json > \$OUT/stamps_v41_new.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v41_new.log | cut -c1-200"
exec bash "$(dirname "$0")/../device_call.sh"
