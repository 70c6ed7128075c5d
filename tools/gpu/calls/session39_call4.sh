#!/usr/bin/env bash
# Session 39, fourth call: run 217's index finish epilogue lost (+0.9 %) because its 64-block product shared HBM with
# the attention's wq_b (17 us for 8 MB). Here the epilogue form runs the index product first and forks the query
# branch after it (V4GpuModel::attention, index_lead), so the product streams alone and wq_b runs beside the select.
# The step tests with it on, an A/B (3 repeats) and the timeline.
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session39_call4.sh
set -uo pipefail
export SKIP_SUITES=1
E=DEEPINFER_INDEX_FINISH_EPILOGUE=1
export EXTRA_GPU0="tests|$E \$b/test_gpu_model --gtest_filter='GpuIndexFinishEpilogue.*:V4GpuForward.*:GpuPdlModel.V4*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: epi:$E' 3;
trace_v4|$E OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
