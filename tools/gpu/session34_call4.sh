#!/usr/bin/env bash
# Session 34, fourth call: the decode selects' emit reads one page-table word a thread (index_select_bins.cuh
# emit_rows: pages of a multiple of 8 entries hold a thread's 8 items at consecutive rows) instead of one load and one
# division per item. Its tests (run 189's list), the in-step select stamps of both models (compare run 190's emit:
# V4.1 7.4-12.1 K cycles, V4 3.6 K), and a same-call BIN A/B against the build before it (v4_decode_p1 = e453509,
# EXTRA_BINS).
#   usage (GPU machine, repo root): bash tools/gpu/session34_call4.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="select_tests|\$b/test_gpu_model --gtest_filter='GpuCsa2*:GpuV41Modules.*:GpuDecodeFused.*:GpuCompressorIndexer.*:GpuIndexScoreShape.*:GpuIndexQueryFirst.*:V4GpuForward.*:V41GpuForward.*';
sel_v41|\$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_v41.json;
sel_v4|\$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/sel_v4.json;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_p1 v4_decode' 4 --family v41;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_p1 v4_decode' 4"
exec bash "$(dirname "$0")/device_call.sh"
