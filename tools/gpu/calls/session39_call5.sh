#!/usr/bin/env bash
# Session 39, last call: the session's last code (8428205: the defaults of session 38, launch_stream's ring choice in
# stream_ring, host code only, every kernel's SASS unchanged). Both models' forward and PDL tests, and the standing
# batch-1 numbers of both models (2 repeats each).
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session39_call5.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests|\$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*:GpuPdlModel.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'final:' 2;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'final:' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
