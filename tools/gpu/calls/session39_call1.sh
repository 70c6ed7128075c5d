#!/usr/bin/env bash
# Session 39, first call (written in session 38, compiled, not run): V4's index queries finished inside the select
# (DEEPINFER_INDEX_FINISH_IN_SELECT=1: the batched bins decode kernel's score blocks do query_finish_kernel's RoPE,
# Hadamard, FP4 and head-weight scale on the staged raw projection, FinishQueries in index_scoring.cuh), which takes
# the finish's launch and its store / reload under wq_b's weight flood off every CSA layer's chain (run 211's
# timeline: the finish ~5 us between the index wq_b and the select). Its tests (the kernel-level same-rows checks and
# V4's step on / off, eager and graphs), the indexer tests, a same-call A/B (3 repeats) and the timeline with it on.
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session39_call1.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests_new|\$b/test_gpu_model --gtest_filter='GpuCompressorIndexer.*:GpuIndexFinishInSelect.*';
tests_on|DEEPINFER_INDEX_FINISH_IN_SELECT=1 \$b/test_gpu_model --gtest_filter='V4GpuForward.*:GpuIndexInputsEarly.*:GpuPdlModel.V4*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_INDEX_FINISH_IN_SELECT '0 1' 3;
trace_v4|DEEPINFER_INDEX_FINISH_IN_SELECT=1 OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
