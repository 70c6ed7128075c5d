#!/usr/bin/env bash
# Session 38, sixth call: the session's last code (the index inputs early with V4's index compressor on its own branch,
# the default; the indexer's wq_b before the query branch, measured in runs 211-213, removed). The schedule tests and
# both models' forward / PDL tests at the default, then a same-call A/B against the switch off, 2 repeats each model.
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session38_call6.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests_final|\$b/test_gpu_model --gtest_filter='GpuIndexInputsEarly.*:GpuIndexQueryFirst.*:GpuCompressorBranch.*:GpuPdlModel.*:V4GpuForward.*:V41GpuForward.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_INDEX_INPUTS_EARLY '0 1' 2;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_INDEX_INPUTS_EARLY '0 1' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
