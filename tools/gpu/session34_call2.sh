#!/usr/bin/env bash
# Session 34, second call: the first radix pass counted by the score blocks (index_select_bins.cuh TopByteCounts,
# both indexers' decode kernels). Its tests (the decode selects against the CPU and the split kernels in every score
# shape and staging, the CSA2 modules, both models' forwards and step-bitwise checks), the in-step select stamps of
# both models (compare run 188: pass 1 and the ticket), and a same-call BIN A/B against the build before it, carried
# as v4_decode_mid (EXTRA_BINS: c561e16, with fda85be's unconditional loads). A third build (fd57e5a) did not fit:
# the working tree plus .gpubin must stay under 64 MiB.
#   usage (GPU machine, repo root): bash tools/gpu/session34_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="select_tests|\$b/test_gpu_model --gtest_filter='GpuCsa2*:GpuV41Modules.*:GpuDecodeFused.*:GpuCompressorIndexer.*:GpuIndexScoreShape.*:GpuIndexQueryFirst.*:V4GpuForward.*:V41GpuForward.*';
sel_v41|\$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_v41.json;
sel_v4|\$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/sel_v4.json;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_mid v4_decode' 4 --family v41;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_mid v4_decode' 4"
exec bash "$(dirname "$0")/device_call.sh"
