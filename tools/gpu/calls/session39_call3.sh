#!/usr/bin/env bash
# Session 39, third call: V4's index queries finished in the index wq_b's own launch (DEEPINFER_INDEX_FINISH_EPILOGUE=1,
# default off: one block a head streams its 16 KB x 8 tiles of wq_b, and its epilogue runs query_finish_kernel's
# RoPE, Hadamard, FP4 and head-weight scale on the head's sums in shared memory, stream_gemm.cuh launch_stream_heads):
# run 216's timeline has the finish's own launch 5.2 us (+0.7 us gap) between the index wq_b and the select on each
# of the 7 CSA layers, and the select ending 5.3 us after the attention's wq_b. Its tests (kernel level, V4's step on
# / off), V4's forward / PDL tests with it on, the dense FP8 kernel tests (launch_stream's ring choice moved into
# stream_ring), an A/B (4 repeats) and the timeline with it on.
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode): bash tools/gpu/calls/session39_call3.sh
set -uo pipefail
export SKIP_SUITES=1
E=DEEPINFER_INDEX_FINISH_EPILOGUE=1
export EXTRA_GPU0="tests_new|\$b/test_gpu_model --gtest_filter='GpuCompressorIndexer.*:GpuIndexFinishEpilogue.*';
tests_on|$E \$b/test_gpu_model --gtest_filter='V4GpuForward.*:GpuIndexInputsEarly.*:GpuCompressorBranch.V4*:GpuPdlModel.V4*';
tests_fp8|\$b/test_gpu --gtest_filter='GpuFp8Gemm.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: epi:$E' 4;
trace_v4|$E OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
