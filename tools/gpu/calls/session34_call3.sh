#!/usr/bin/env bash
# Session 34, third call: the decode selects' emit reads the slot's page-table words from shared memory
# (index_select_bins.cuh RowsInSharedPages, staged beside the keys; both indexers' decode kernels). Its tests (run
# 189's list), the in-step select stamps of both models (compare run 189's emit: V4.1 7.8-12.6 K cycles, V4 4.3 K),
# a same-call BIN A/B against the build before it (v4_decode_p1 = e453509, EXTRA_BINS), and, on the new build, V4.1's
# CSA2 score shape auto against 64x2 (NOTES "Session 33": the 4097-entry rows' score blocks start up to 6 us apart
# behind wq_b; 64x2 needs half the blocks) with the stamps at 64x2 (run 190 ran those two steps before the A/Bs).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session34_call3.sh
export EXTRA_STEPS="sel_v41_64x2|DEEPINFER_CSA2_SCORE_SHAPE=64x2 \$b/v4_decode --quick --pdl on --family v41 --select-stamps
 --out \$OUT/sel_v41_64x2.json;
shape_v41|OUT=\$OUT/shape_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_CSA2_SCORE_SHAPE 'auto 64x2' 4 --family v41"
exec bash "$(dirname "$0")/../select_change_call.sh" v4_decode_p1
