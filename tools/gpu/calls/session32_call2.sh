#!/usr/bin/env bash
# Session 32, second call: the MXFP4 stream's stamps inside its first stage_b (cuda/stream_fp4_wgmma.cuh kStBEntry ..
# kStBScales: entry, zero codes stored, the rows' codes stored, their scales stored), V4 and V4.1 in the step; the
# stamped instantiation's tests (GpuStreamFp4Wgmma.*: the record grew to 20 slots). The default kernels' SASS is
# unchanged (labels only), so no A/B.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session32_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests|timeout 200 \$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*' > \$OUT/tests.log 2>&1 || true && tail -3 \$OUT/tests.log && echo bitwise_zero=\$(grep -c 'mismatches=0/' \$OUT/tests.log) nonzero=\$(grep 'mismatches=' \$OUT/tests.log | grep -vc 'mismatches=0/');
stamps_v4|timeout 150 \$b/v4_decode --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4.json > \$OUT/stamps_v4.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v4.log | cut -c1-250;
stamps_v41|timeout 150 \$b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out \$OUT/stamps_v41.json > \$OUT/stamps_v41.log 2>&1 || true && grep -E '^ *(all|alone)' \$OUT/stamps_v41.log | cut -c1-250"
exec bash "$(dirname "$0")/../device_call.sh"
