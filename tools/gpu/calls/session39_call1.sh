#!/usr/bin/env bash
# Session 39, first call (written in session 38, compiled, not run): two more links off V4's per-layer chain.
#  - DEEPINFER_INDEX_FINISH_IN_SELECT=1: the index queries finished inside the select (the batched bins decode kernel's
#    score blocks do query_finish_kernel's RoPE, Hadamard, FP4 and head-weight scale on the staged raw projection,
#    FinishQueries in index_scoring.cuh): the finish's launch and its store / reload under wq_b's weight flood leave
#    every CSA layer's chain (run 211's timeline: the finish ~5 us between the index wq_b and the select).
#  - DEEPINFER_VISIBLE_ROWS_EARLY=1: an HCA layer's visible-entry list built first on the compressor's stream instead
#    of on the main stream between wq_b and the attention core (run 209: 1.7 us and a launch on each HCA layer's chain).
# Their tests (kernel-level same rows, V4's step on / off eager and graphs), V4's forward / PDL tests with both on, a
# same-call A/B of the four settings (3 repeats) and the timeline with both on.
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session39_call1.sh
set -uo pipefail
export SKIP_SUITES=1
F=DEEPINFER_INDEX_FINISH_IN_SELECT=1 V=DEEPINFER_VISIBLE_ROWS_EARLY=1
export EXTRA_GPU0="tests_new|\$b/test_gpu_model --gtest_filter='GpuCompressorIndexer.*:GpuIndexFinishInSelect.*:GpuVisibleRowsEarly.*';
tests_on|$F $V \$b/test_gpu_model --gtest_filter='V4GpuForward.*:GpuIndexInputsEarly.*:GpuCompressorBranch.V4*:GpuPdlModel.V4*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: finish:$F visible:$V both:$F,$V' 3;
trace_v4|$F $V OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
