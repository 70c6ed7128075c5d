#!/usr/bin/env bash
# Written in session 56: the full roofline at the session's method (every prefill row's v13 also sustained, 1000 ms
# windows, against the sustained dense FP8 ceiling), twice, with the clock log: the committed benchmark rows of the
# engine at 7fbcc40's code.
#   pack (here): PACK_ONLY="roofline" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session56_call5.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="$(stamped_repeats roofline_full roofline '' 2)"
clock_logged
