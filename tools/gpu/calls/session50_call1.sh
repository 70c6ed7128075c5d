#!/usr/bin/env bash
# Written in session 50 (lent no machine: every start failed), for the next session: session49_call1.sh's eight patch
# sets plus session 50's four (helpers 141-144), as one fourteen-build BIN A/B against the base, alternating so drift
# hits every build; test_gpu / test_gpu_model carry every patch. Builds (bench/gpu/attempts/README.md has each row):
#   v4_decode_audit4 / _fp4_consume / _fp4_scales   the MXFP4 stream chain of session49_call1.sh (compare each with
#                                                   the one before it)
#   v4_decode_fp4_desc     fp4_scales + session50_fp4_descriptors_uniform.patch (helper-144: the consume loop's wgmma
#                          descriptors on the uniform datapath, ~31 instructions a stage fewer; compare with fp4_scales)
#   v4_decode_rows_ahead / _route_fence / _gemv_pin    session 49's (helpers 133, 135, 134)
#   v4_decode_site_norm    session49_site_norm_weight_early.patch (helper-137)
#   v4_decode_lagged5      site_norm + session50_lagged_site_rows_of_5.patch (helper-141: V4.1's lagged pre-site,
#                          round trips 8 -> 3; compare with site_norm, on V4.1)
#   v4_decode_select_keys  session49_select_keys_in_rounds.patch (helper-136)
#   v4_decode_score_sel    select_keys + session50_score_select_paths.patch (helper-143: the score blocks' divisions,
#                          the page-table lookup's gap, the emit's page-table lines in L1; compare with select_keys)
#   v4_decode_candidates   select_keys + session50_candidate_keys_from_smem.patch (helper-142: the CSA2 candidate
#                          source's block keys from shared memory; compare with select_keys, on V4.1)
#   v4_decode_all          every patch together
#   pack (here; ~60 min on 2 cores): ALL=1 tools/gpu/pack_patch_ab.sh with the sets above, each NAME=PATCH+PATCH...
#     in the order the comments give (bench/gpu/NOTES.md "Session 50" has the full command). Its one tarball (44 MB:
#     the builds are 49 MB each, beyond xz's 192 MiB window of one another) does not fit the 64 MiB copy with the
#     tracked ~33 MB, so the call comes in two parts, each ~22 MB, from the unpacked tarball:
#       PART=a (.gpubin/bins.tar.xz):   test_gpu test_gpu_model v4_decode v4_decode_audit4 v4_decode_fp4_consume
#                                       v4_decode_fp4_scales v4_decode_fp4_desc v4_decode_all
#       PART=b (.gpubin_b/bins.tar.xz, moved to .gpubin/ for its call): v4_decode v4_decode_rows_ahead
#                                       v4_decode_route_fence v4_decode_gemv_pin v4_decode_site_norm v4_decode_lagged5
#                                       v4_decode_select_keys v4_decode_score_sel v4_decode_candidates
#     (tar -cf - FILES | xz -T1 --lzma2=preset=6,dict=192MiB, ~3 min each here).
#   usage (GPU machine, repo root): PART=a bash tools/gpu/calls/session50_call1.sh   (~4 min: batches 1 / 8, 3
#          repeats, then the tests), then PART=b with the other pack (~3.5 min, no tests: part a's test binaries
#          carry every patch). QUICK=1: batch 1, 2 repeats; NO_TESTS=1 drops part a's tests.
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
case "${PART:-}" in
  a) bins="v4_decode v4_decode_audit4 v4_decode_fp4_consume v4_decode_fp4_scales v4_decode_fp4_desc v4_decode_all" ;;
  b) bins="v4_decode v4_decode_rows_ahead v4_decode_route_fence v4_decode_gemv_pin v4_decode_site_norm"
     bins+=" v4_decode_lagged5 v4_decode_select_keys v4_decode_score_sel v4_decode_candidates"
     NO_TESTS=1 ;;
  *) echo "session50_call1.sh: PART=a or PART=b (see the header)" >&2; exit 2 ;;
esac
filter=$PATCHED_KERNEL_TESTS
steps="$(bin_ab_models "ab_s50$PART" "$bins")"
if [ "${NO_TESTS:-0}" != 1 ]; then
  steps+=";
$(filtered_tests_steps "$filter")"
fi
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
