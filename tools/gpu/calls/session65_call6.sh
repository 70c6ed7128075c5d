#!/usr/bin/env bash
# Session 65: the MXFP4 experts' in-step stamps at ef96c19d (`v4_decode --fp4-stamps`, batch 1), V4 and V4.1: whether
# stage_b's L1 prefetches before the zeroing (landed in ef96c19d) moved the first stage as run 286's hook form did
# (V4 w2 first stage landed 4.12 -> 3.27 us against run 285's HEAD), without the hook's slower w1|w3 block.
#   pack (here): session65_call5.sh's (v4_decode at ef96c19d's engine).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session65_call6.sh   (~60 s)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="$(fp4_stamps_step stamps_v4 '');
$(fp4_stamps_step stamps_v41 '--family v41')"
clock_logged
