#!/usr/bin/env bash
# Planned second device call of session 14 (same binaries as session14_call1.sh): session 13's compiled-not-run work,
# measured (16 V4-Flash / 10 V4.1-Flash layers, 4K, `v4_decode --quick --pdl on` through tools/gpu/decode_switch_ab.sh):
#  - the fused V4.1 site entry (NOTES "V4.1 site entry in one launch"): A/B chain vs fused;
#  - the routing phase stamps inside the step (NOTES "Fused decode routing: phase stamps inside the model"): which phase
#    makes the routing 16-20 us per V4 layer in the step against 10.4 us alone (NOTES "Session 13");
#  - the compressor pair's bf16 GEMV (NOTES "bf16 GEMV for the compressor pair"): its rows beside cuBLAS, and A/Bs
#    against the ~18 us join wait on HCA layers;
#  - the V4.1 CSA2 decode select by bins (NOTES "V4.1 CSA2 indexer: decode select by bins"): A/B against radix.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session14_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='ab_v41_site_entry|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_V41_SITE_ENTRY "chain fused" 2 --family v41;
route_stamps_v4_tail|$b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_v4.json;
route_stamps_shared_after_tail|DEEPINFER_MOE_SHARED_FIRST=0 $b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_v4_shared_after.json;
route_stamps_v41_tail|$b/v4_decode --quick --family v41 --pdl on --route-stamps --out $OUT/rs_v41.json;
route_phases_tail|$b/roofline --route-phases-only --out $OUT/route_phases.json;
bf16_gemv_rows_tail|$b/roofline --bf16-gemv-only --out $OUT/roofline_bf16_gemv.json;
ab_bf16_gemv|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BF16_GEMV "cublas stream" 2;
ab_bf16_gemv_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BF16_GEMV "cublas stream" 2 --family v41;
ab_csa2_select|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_CSA2_SELECT "radix bins" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
