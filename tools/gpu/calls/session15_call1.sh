#!/usr/bin/env bash
# Planned first device call of session 15 (written in session 14; binaries of the last commit, packed with
# tools/gpu/pack_prebuilt.sh): every one-GPU suite at the defaults (~310 s side by side; they include helpers 89-91's
# new tests: GpuCsa2SelectBins.CandidateSourceBins, GpuBf16Gemv.* with the staged form, GpuSiteMixBranch.
# V41FfnMixAfterRouteBitwise, GpuBranchPriority.V4AndV41StepBitwise), then the V4.1 model suites with the candidate
# source by bins and with the FFN mix after the routing (~520 s in all, as session 14's first call). The other two
# switches' suites and the measurements follow in session15_call2.sh.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session15_call1.sh
set -uo pipefail
export EXTRA_GPU0='candidates_bins|DEEPINFER_CSA2_CANDIDATES=bins $b/test_gpu_model --gtest_filter="GpuV41Modules.Csa2*:V41GpuForward.*:GpuV41SiteEntry.*";
ffn_mix_after_route|DEEPINFER_V41_FFN_MIX=after_route $b/test_gpu_model --gtest_filter="V41GpuForward.*:GpuV41SiteEntry.*:GpuPdlModel.V41*"'
exec bash "$(dirname "$0")/../device_call.sh"
