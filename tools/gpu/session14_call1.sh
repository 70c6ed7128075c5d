#!/usr/bin/env bash
# Planned first device call of session 14 (written in session 13; binaries of the last commit, packed with
# tools/gpu/pack_prebuilt.sh): every one-GPU suite at the defaults (the V4.1 site entry now goes through
# V41GpuModel::enter_site / leave_site: the chain form must pass as before), then session 13's compiled-not-run work:
#  - the fused V4.1 site entry (NOTES "V4.1 site entry in one launch"): its suites with the switch on, its A/B;
#  - the routing phase stamps inside the step (NOTES "Fused decode routing: phase stamps inside the model"): which phase
#    makes the routing 16-20 us per V4 layer in the step against 10.4 us alone (NOTES "Session 13").
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/session14_call1.sh
set -uo pipefail
export EXTRA_GPU0='site_entry_fused|DEEPINFER_V41_SITE_ENTRY=fused $b/test_gpu_model --gtest_filter="GpuV41SiteEntry.*:GpuPdlModel.V41*:GpuSiteMixBranch.*:V41GpuForward.*";
ab_v41_site_entry|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_V41_SITE_ENTRY "chain fused" 2 --family v41;
route_stamps_v4_tail|$b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_v4.json;
route_stamps_shared_after_tail|DEEPINFER_MOE_SHARED_FIRST=0 $b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_v4_shared_after.json;
route_stamps_v41_tail|$b/v4_decode --quick --family v41 --pdl on --route-stamps --out $OUT/rs_v41.json;
route_phases_tail|$b/roofline --route-phases-only --out $OUT/route_phases.json'
exec bash "$(dirname "$0")/device_call.sh"
