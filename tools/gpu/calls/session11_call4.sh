#!/usr/bin/env bash
# Session 11's fourth device call (binaries of the session's schedule commit): same-call A/B of the indexer's query
# before / after the join, of the session-10 schedule vs this one on V4-Flash (16 layers) and V4.1-Flash (10 layers),
# the batch-1 timeline, the benchmark tables of both families, then test_gpu_model (all).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session11_call4.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='ab_index_query|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_QUERY "after_join before" 3;
ab_before11_v4|cp tools/gpu/v4_decode_before11.sh $b/v4_decode_before11 && bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_before11 v4_decode" 3;
ab_before11_v41|mkdir -p $OUT/v41 && OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_before11 v4_decode" 3 --family v41;
trace_tail|bash tools/gpu/trace_decode.sh 1 16;
tables_v4_tail|$b/v4_decode --chunk 2048 --pdl on --out $OUT/v4_decode_v4.json;
tables_v41_tail|$b/v4_decode --family v41 --chunk 2048 --pdl on --out $OUT/v4_decode_v41.json;
model_a|$b/test_gpu_model --gtest_filter="GpuEngine.*:V4GpuForward.*:GpuMoe.*";
model_b|$b/test_gpu_model --gtest_filter="-GpuEngine.*:V4GpuForward.*:GpuMoe.*"'
exec bash "$(dirname "$0")/../device_call.sh"
