#!/usr/bin/env bash
# Session 33, fifth call: the decode selects' phase stamps inside the step, now for V4.1's CSA2 indexer too
# (select_stamps.cuh; csa2_decode_select_phases_kernel on the same records as V4's). Run 185's trace: V4.1's three
# selects take 23 / 38 / 41 us at 2048 / 4096 / 4096 entries, ~5 % of the batch-1 step, on its critical path. The
# stamped path's selections checked against the CPU and the production kernels (DEEPINFER_INDEX_SELECT_STAMPS=1 makes
# every decode select run it), then the stamps of both models.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session33_call5.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="stamped_tests|DEEPINFER_INDEX_SELECT_STAMPS=1 \$b/test_gpu_model --gtest_filter='GpuV41Modules.Csa2Indexer*:GpuCsa2SelectBins.SameRowsAsCpuAndSplitKernels:GpuCsa2SelectBins.CandidateSourceBins:GpuDecodeFused.IndexerSelection*:V41GpuForward.RunToRunBitwiseEagerAndGraphs';
sel_v41|\$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_v41.json;
sel_v4|\$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/sel_v4.json"
exec bash "$(dirname "$0")/../device_call.sh"
