#!/usr/bin/env bash
# Session 35, first call (prepared in session 34, not run). Two things:
# 1. The CSA2 keys' candidate block by FastDiv (cuda/fast_div.h: a multiply and a shift instead of a division by a
#    run-time int, one per key in the last block's staging and the score blocks' counts; the production TopK /
#    Reindex kernel 125,440 -> 119,808 bytes): the select tests and a same-call BIN A/B against the build before it
#    (pack it as v4_decode_old with EXTRA_BINS: 3abca79 or any commit between it and the FastDiv commit).
# 2. What the decode selects' last block waits on (NOTES "Session 34"): session 34's stamps have phases that do almost
#    nothing take thousands of cycles in the step (V4.1's pass 1 without its count loop 3.2-3.8 K cycles, V4's
#    1.7-2.3 K). Stamps of both models (~1 s each):
#      warm     --select-stamps-warm: the passes and emit run twice, the second stamped (their code in the SM's
#               instruction cache): the difference to the plain stamps is the first run's instruction fetch;
#      pdl_off  --pdl off: no early-launched successor on the SMs;
#      serial   DEEPINFER_GPU_SIDE_STREAM=0: the branches on the main stream (nothing beside the select);
#    and run 187's stamped tests with every decode select on the warm-rerun kernels
#    (DEEPINFER_INDEX_SELECT_STAMPS=warm: the same rows written twice).
# The full suites (last: run 186 at 69fac23) are the second call: tools/gpu/calls/session29_call3.sh (~430 s).
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode, v4_decode_old):
#     bash tools/gpu/calls/session35_call1.sh
set -uo pipefail
stamps() {  # name, v4_decode flags, environment (or -)
  local env=$3
  [ "$env" = - ] && env=
  echo "$1_v41|$env \$b/v4_decode --quick $2 --family v41 --out \$OUT/$1_v41.json;"
  echo "$1_v4|$env \$b/v4_decode --quick $2 --out \$OUT/$1_v4.json;"
}
warm_filter='GpuV41Modules.Csa2Indexer*:GpuCsa2SelectBins.SameRowsAsCpuAndSplitKernels:GpuCsa2SelectBins.CandidateSourceBins'
warm_filter+=':GpuDecodeFused.IndexerSelection*:V41GpuForward.RunToRunBitwiseEagerAndGraphs'
EXTRA_STEPS="warm_tests|DEEPINFER_INDEX_SELECT_STAMPS=warm \$b/test_gpu_model --gtest_filter='$warm_filter';
$(stamps warm '--pdl on --select-stamps-warm' -)
$(stamps pdl_off '--pdl off --select-stamps' -)
$(stamps serial '--pdl on --select-stamps' DEEPINFER_GPU_SIDE_STREAM=0)"
export EXTRA_STEPS="${EXTRA_STEPS%;}"
exec bash "$(dirname "$0")/../select_change_call.sh" v4_decode_old
