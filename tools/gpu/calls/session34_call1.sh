#!/usr/bin/env bash
# Session 34, first call (prepared in session 33; its device time was spent): the decode selects without loads behind
# a condition (fda85be, 7608b31: compiled, not run). Their tests (every decode select against the CPU and the split
# kernels, the CSA2 indexer and compressor modules, both models' forwards), the in-step select stamps of both models
# (compare run 187's cycles: keys, passes, emit), and, where .gpubin also holds v4_decode_old (fd57e5a, built with
# EXTRA_BINS), a same-call BIN A/B on both models.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session34_call1.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="select_tests|\$b/test_gpu_model --gtest_filter='GpuCsa2*:GpuV41Modules.*:GpuDecodeFused.*:GpuCompressorIndexer.*:V4GpuForward.*:V41GpuForward.*';
sel_v41|\$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_v41.json;
sel_v4|\$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/sel_v4.json;
ab_v41|[ -x \$b/v4_decode_old ] && OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 4 --family v41 || echo no v4_decode_old;
ab_v4|[ -x \$b/v4_decode_old ] && OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 4 || echo no v4_decode_old"
exec bash "$(dirname "$0")/../device_call.sh"
