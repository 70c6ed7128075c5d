#!/usr/bin/env bash
# Session 35, third call: the CSA2 decode select's selector form (DEEPINFER_CSA2_SELECTOR=block, csa2_indexer_gpu.h;
# bench/gpu/NOTES.md "Session 35"): a block of its own a row rehearses the select while the score blocks score, then
# waits for their arrivals and selects with its code fetched. Its tests (GpuCsa2SelectBins.SelectorBlock against the
# CPU, the split kernels and the ticket form; the V4.1 step bitwise with it, eager and graphs) beside the rest of the
# decode select / indexer / module / forward tests of both models (DecodeTiles takes the score blocks' count and place), the V4.1 select stamps in both forms, and a same-call A/B of the switch on
# V4.1 (4 repeats) and on V4 (2 repeats: V4's indexer has no selector form, so its steps must not move).
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session35_call3.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="selector_tests|\$b/test_gpu_model --gtest_filter='GpuCsa2*:GpuV41Modules.*:GpuDecodeFused.*:GpuCompressorIndexer.*:GpuIndexScoreShape.*:GpuIndexQueryFirst.*:V4GpuForward.*:V41GpuForward.*';
sel_ticket|DEEPINFER_CSA2_SELECTOR=ticket \$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_ticket.json;
sel_block|DEEPINFER_CSA2_SELECTOR=block \$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_block.json;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_CSA2_SELECTOR 'ticket block' 4 --family v41;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_CSA2_SELECTOR 'ticket block' 2"
exec bash "$(dirname "$0")/../device_call.sh"
