#!/usr/bin/env bash
# Planned first device call of session 14 (written in session 13; binaries of the last commit, packed with
# tools/gpu/pack_prebuilt.sh): every one-GPU suite at the defaults (~390 s: the V4.1 site entry now goes through
# V41GpuModel::enter_site / leave_site, and the chain form must pass as before; the suites include session 13's new
# kernel tests GpuHcLaggedSite.*, GpuBf16Gemv.*, GpuMoe.RouteStampsSameBits), then the V4.1 model suites with the fused
# site entry on (NOTES "V4.1 site entry in one launch") and with the CSA2 decode select by bins on (NOTES "V4.1 CSA2
# indexer: decode select by bins"; its bitwise test GpuCsa2SelectBins.* is in the default suite). The measurements
# follow in session14_call2.sh.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session14_call1.sh
set -uo pipefail
export EXTRA_GPU0='site_entry_fused|DEEPINFER_V41_SITE_ENTRY=fused $b/test_gpu_model --gtest_filter="GpuV41SiteEntry.*:GpuPdlModel.V41*:GpuSiteMixBranch.*:V41GpuForward.*";
csa2_select_bins|DEEPINFER_CSA2_SELECT=bins $b/test_gpu_model --gtest_filter="GpuV41Modules.Csa2*:V41GpuForward.*:GpuV41SiteEntry.*"'
exec bash "$(dirname "$0")/../device_call.sh"
