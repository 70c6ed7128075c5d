#!/usr/bin/env bash
# One device call for a change to the decode selects (session 34's calls): the select, indexer, compressor and model
# tests of test_gpu_model (every decode select against the CPU and the split kernels in every score shape and
# staging, the CSA2 modules, both models' forwards and step-bitwise checks), the in-step select stamps of both models,
# and a same-call BIN A/B of the packed v4_decode against OLD_BIN (an older build packed beside it with EXTRA_BINS),
# 4 repeats on each model. EXTRA_STEPS ("name|cmd;..."): more steps after those.
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode, OLD_BIN):
#     bash tools/gpu/select_change_call.sh OLD_BIN
set -uo pipefail
old=${1:?usage: select_change_call.sh OLD_BIN}
export SKIP_SUITES=1
export EXTRA_GPU0="select_tests|\$b/test_gpu_model --gtest_filter='GpuCsa2*:GpuV41Modules.*:GpuDecodeFused.*:GpuCompressorIndexer.*:GpuIndexScoreShape.*:GpuIndexQueryFirst.*:V4GpuForward.*:V41GpuForward.*';
sel_v41|\$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_v41.json;
sel_v4|\$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/sel_v4.json;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN '$old v4_decode' 4 --family v41;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN '$old v4_decode' 4${EXTRA_STEPS:+;$EXTRA_STEPS}"
exec bash "$(dirname "$0")/device_call.sh"
