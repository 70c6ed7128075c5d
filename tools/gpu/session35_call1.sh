#!/usr/bin/env bash
# Session 35, first call (prepared in session 34, not run): what the decode selects' last block waits on. Session 34's
# stamps have phases that do almost nothing take thousands of cycles in the step (V4.1's pass 1, its histogram
# counted by the score blocks, 3.2-3.8 K cycles for two barriers and a bin search; V4's 1.7-2.3 K), and a pass that
# runs the count loop's code first pays more (run 189). Readings, each a stamps run of both models (~1 s each):
#   warm     --select-stamps-warm: the passes and emit run twice, the second stamped (their code in the SM's
#            instruction cache): the difference to the plain stamps is the first run's instruction fetch;
#   pdl_off  --pdl off: no early-launched successor on the SMs;
#   serial   DEEPINFER_GPU_SIDE_STREAM=0: the branches on the main stream (nothing beside the select).
# First the full suites (last full run: 69fac23, run 186; SKIP_SUITES=1 skips them), then run 187's stamped tests with
# every decode select on the warm-rerun kernels (DEEPINFER_INDEX_SELECT_STAMPS=warm: the same rows written twice;
# the production kernels' SASS is unchanged), then the stamps.
#   usage (GPU machine, repo root): bash tools/gpu/session35_call1.sh   (.gpubin: test_gpu test_gpu_model v4_decode)
set -uo pipefail
export SKIP_SUITES=${SKIP_SUITES:-0}
export EXTRA_GPU0="warm_tests|DEEPINFER_INDEX_SELECT_STAMPS=warm \$b/test_gpu_model --gtest_filter='GpuV41Modules.Csa2Indexer*:GpuCsa2SelectBins.SameRowsAsCpuAndSplitKernels:GpuCsa2SelectBins.CandidateSourceBins:GpuDecodeFused.IndexerSelection*:V41GpuForward.RunToRunBitwiseEagerAndGraphs';
sel_v41|\$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_v41.json;
sel_v4|\$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/sel_v4.json;
warm_v41|\$b/v4_decode --quick --pdl on --family v41 --select-stamps-warm --out \$OUT/warm_v41.json;
warm_v4|\$b/v4_decode --quick --pdl on --select-stamps-warm --out \$OUT/warm_v4.json;
pdl_off_v41|\$b/v4_decode --quick --pdl off --family v41 --select-stamps --out \$OUT/pdl_off_v41.json;
pdl_off_v4|\$b/v4_decode --quick --pdl off --select-stamps --out \$OUT/pdl_off_v4.json;
serial_v41|DEEPINFER_GPU_SIDE_STREAM=0 \$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/serial_v41.json;
serial_v4|DEEPINFER_GPU_SIDE_STREAM=0 \$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/serial_v4.json"
exec bash "$(dirname "$0")/device_call.sh"
