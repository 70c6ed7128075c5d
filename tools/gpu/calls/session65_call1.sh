#!/usr/bin/env bash
# Session 65: run 288 (session64_call2.sh, H100) put the whole cost of run 286's slower build in the stage_b hook form
# (moe_hook / all_hook +1.5-4.6 %); the other subsets read within ~0.8 % of HEAD either way at 2 repeats. This call
# repeats HEAD against the subsets that might be a gain (round, attn, moe2, all2) at 4 repeats, on the same pack
# (.gpubin/bins.tar.xz, sha256 90751b31…: session 64's v4_decode variants), to decide whether any lands.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session65_call1.sh   (~150 s)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="$(bin_ab_models dec "v4_decode_base v4_decode_round v4_decode_attn v4_decode_moe2 v4_decode_all2" 4)"
clock_logged
