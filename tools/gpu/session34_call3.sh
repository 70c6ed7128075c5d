#!/usr/bin/env bash
# Session 34, third call: the decode selects' emit reads the slot's page-table words from shared memory
# (index_select_bins.cuh RowsInSharedPages, staged beside the keys; both indexers' decode kernels). Its tests (run
# 189's list), the in-step select stamps of both models (compare run 189's emit: V4.1 7.8-12.6 K cycles, V4 4.3 K),
# a same-call BIN A/B against the build before it (v4_decode_p1 = e453509, EXTRA_BINS), and, on the new build, V4.1's
# CSA2 score shape auto against 64x2 (NOTES "Session 33": the 4097-entry rows' score blocks start up to 6 us apart
# behind wq_b; 64x2 needs half the blocks) with the stamps at 64x2.
#   usage (GPU machine, repo root): bash tools/gpu/session34_call3.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="select_tests|\$b/test_gpu_model --gtest_filter='GpuCsa2*:GpuV41Modules.*:GpuDecodeFused.*:GpuCompressorIndexer.*:GpuIndexScoreShape.*:GpuIndexQueryFirst.*:V4GpuForward.*:V41GpuForward.*';
sel_v41|\$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_v41.json;
sel_v4|\$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/sel_v4.json;
sel_v41_64x2|DEEPINFER_CSA2_SCORE_SHAPE=64x2 \$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_v41_64x2.json;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_p1 v4_decode' 4 --family v41;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_p1 v4_decode' 4;
shape_v41|OUT=\$OUT/shape_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_CSA2_SCORE_SHAPE 'auto 64x2' 4 --family v41"
exec bash "$(dirname "$0")/device_call.sh"
