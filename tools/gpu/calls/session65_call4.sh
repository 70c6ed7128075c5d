#!/usr/bin/env bash
# Session 65: the landing's (ef96c19d) decode tables at the machine's default layer counts (`v4_decode --chunk 2048
# --pdl on`: batches 1 / 8 / 64 / 256 at 4K and 64K, prefill), V4 and V4.1, as run 285 took them for HEAD before it.
#   pack (here): run 290's (`.gpubin/bins.tar.xz`, sha256 5b6dcd47…).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session65_call4.sh   (~60 s)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="$(stamped_step tables_v4 v4_decode '--chunk 2048 --pdl on');
$(stamped_step tables_v41 v4_decode '--family v41 --chunk 2048 --pdl on')"
clock_logged
