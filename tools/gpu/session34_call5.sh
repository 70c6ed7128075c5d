#!/usr/bin/env bash
# Session 34, fifth call: the radix passes after the first count with a plain shared atomic per key instead of one
# per distinct bin a warp (__match_any_sync; index_select_bins.cuh select_by_bins). Its tests (run 189's list), the
# in-step select stamps of both models (compare run 191's passes 2-3: V4.1 6.5 K / 2.7 K cycles, V4 2.7 K), and a
# same-call BIN A/B against the build before it (v4_decode_emit = 38183a1, EXTRA_BINS).
#   usage (GPU machine, repo root): bash tools/gpu/session34_call5.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="select_tests|\$b/test_gpu_model --gtest_filter='GpuCsa2*:GpuV41Modules.*:GpuDecodeFused.*:GpuCompressorIndexer.*:GpuIndexScoreShape.*:GpuIndexQueryFirst.*:V4GpuForward.*:V41GpuForward.*';
sel_v41|\$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_v41.json;
sel_v4|\$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/sel_v4.json;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_emit v4_decode' 4 --family v41;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_emit v4_decode' 4"
exec bash "$(dirname "$0")/device_call.sh"
