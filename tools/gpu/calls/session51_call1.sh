#!/usr/bin/env bash
# Session 51: session50_call1.sh's fourteen builds (never run: session 50 got no machine) plus helpers 145-146's
# patches, as one BIN A/B against the base in two calls, alternating so drift hits every build; test_gpu /
# test_gpu_model carry every patch. bench/gpu/attempts/README.md has each patch's row; compare each chained build
# with its predecessor:
#   v4_decode_audit4 / _fp4_consume / _fp4_scales / _fp4_desc   the MXFP4 stream chain (each vs the one before)
#   v4_decode_rows_ahead / _route_fence / _gemv_pin             session 49's (helpers 133, 135, 134; vs the base)
#   v4_decode_site_norm, v4_decode_lagged5 (site_norm + helper-141; vs site_norm, on V4.1)
#   v4_decode_select_keys, v4_decode_score_sel / _candidates (select_keys + helper-143 / helper-142; vs select_keys)
#   v4_decode_csa2_slot    select_keys + score_sel + candidates + helper-146 (vs score_sel and candidates, V4.1)
#   v4_decode_fp8_scale    helper-145 alone (the FP8 block scale in integer form; vs the base)
#   v4_decode_all          every patch together
#   pack (here; bench/gpu/NOTES.md "Session 51" has the full pack_patch_ab.sh command), then split into two packs
#   (tar -cf - FILES | xz -T1 --lzma2=preset=6,dict=192MiB) that each fit a call's 64 MiB copy with the tracked files:
#     PART=a (.gpubin/bins.tar.xz):   test_gpu test_gpu_model v4_decode v4_decode_audit4 v4_decode_fp4_consume
#                                     v4_decode_fp4_scales v4_decode_fp4_desc v4_decode_all
#     PART=b (.gpubin_b/bins.tar.xz, moved to .gpubin/ for its call): v4_decode and the other ten builds
#   usage (GPU machine, repo root): PART=a bash tools/gpu/calls/session51_call1.sh (batches 1 / 8, 3 repeats, then the
#          tests of every patched kernel), then PART=b with the other pack (no tests: part a's test binaries carry
#          every patch). QUICK=1: batch 1, 2 repeats; NO_TESTS=1 drops part a's tests; PRINT_ONLY=1 prints the steps.
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
case "${PART:-}" in
  a) bins="v4_decode v4_decode_audit4 v4_decode_fp4_consume v4_decode_fp4_scales v4_decode_fp4_desc v4_decode_all" ;;
  b) bins="v4_decode v4_decode_rows_ahead v4_decode_route_fence v4_decode_gemv_pin v4_decode_site_norm"
     bins+=" v4_decode_lagged5 v4_decode_select_keys v4_decode_score_sel v4_decode_candidates v4_decode_csa2_slot"
     bins+=" v4_decode_fp8_scale"
     NO_TESTS=1 ;;
  *) echo "session51_call1.sh: PART=a or PART=b (see the header)" >&2; exit 2 ;;
esac
filter=$PATCHED_KERNEL_TESTS
# Session 51 adds helpers 145-146's kernels: every CSA2 test, the KV records and the FP8 quantizers.
filter+=':GpuCsa2*:GpuKv*:GpuFp8*'
steps="$(bin_ab_models "ab_s51$PART" "$bins")"
if [ "${NO_TESTS:-0}" != 1 ]; then
  steps+=";
$(filtered_tests_steps "$filter")"
fi
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
