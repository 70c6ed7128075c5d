#!/usr/bin/env bash
# Written in session 56: helper-166's table words staged once per warp and K tile in shared memory (v13's clean NT 11
# / 12 loop: each lane computes 4 of the warp's 128 words instead of every lane its own 16) against main, timed the
# way run 266 showed the board needs (its power cap): 8 alternating `--prefill-only --prefill-16k --quick --sustained`
# runs a build (each 16K v13 row also sustained, 300 ms settle + >= 300 ms, between two sustained dense FP8
# ceilings), a clock log beside the call; then the prefill GEMM's bitwise tests with the patch.
#   roofline         main
#   roofline_h166    + bench/gpu/attempts/session56_prefill_v13_tables_in_smem.patch
#   pack (here): KEEP_STAGE=/tmp/st56a tools/gpu/pack_patch_ab.sh \
#     h166:roofline=bench/gpu/attempts/session56_prefill_v13_tables_in_smem.patch
#   usage (GPU machine, repo root): bash tools/gpu/calls/session56_call3.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="" sep=""
for i in 1 2 3 4 5 6 7 8; do
  for r in roofline roofline_h166; do
    steps+="$sep$(stamped_step "prefill_${r}_$i" "$r" '--prefill-only --prefill-16k --quick --sustained')"
    sep=$';\n'
  done
done
steps+=";
$(filtered_tests_steps 'GpuMoePrefillGemm.*:GpuMoe.*')"
export EXTRA_GPU0="$steps"
clock_logged
