#!/usr/bin/env bash
# Session 38, second call: the indexer's inputs off the query's chain (DEEPINFER_INDEX_INPUTS_EARLY=1: the head
# weights first on the side branch; V4: the index compressor before the KV compressor, the select waiting for two
# marks, the branches joined after it). Run 209's timelines put both on the chain of every CSA / CSA2 layer.
# The new schedule tests and both models' forward / indexer tests with the switch on, then a same-call A/B (3
# repeats each model) and the timelines with it on.
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session38_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests_new|\$b/test_gpu_model --gtest_filter='GpuIndexInputsEarly.*:GpuIndexQueryFirst.*:GpuCompressorBranch.*';
tests_on|DEEPINFER_INDEX_INPUTS_EARLY=1 \$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*:GpuCompressorIndexer.*:GpuCsa2ScoreShape.*:GpuEngine.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_INDEX_INPUTS_EARLY '0 1' 3;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_INDEX_INPUTS_EARLY '0 1' 3 --family v41;
trace_v4|DEEPINFER_INDEX_INPUTS_EARLY=1 OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16;
trace_v41|DEEPINFER_INDEX_INPUTS_EARLY=1 OUT=\$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 16 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
