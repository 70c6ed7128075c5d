#!/usr/bin/env bash
# Written in session 56: run 268's sustained dense FP8 ceilings (300 ms windows) moved 1084-1297 TFLOP/s with the
# board's state, so the fraction of the sustained rate read 49-59 % for V4 w13 across runs 266 / 268. Here every
# sustained window is 1000 ms (settle) + >= 1000 ms (timed), `roofline --prefill-only --prefill-16k --sustain-ms 1000`
# twice, the clock log beside the call, to see whether the longer windows hold the ceiling and the fraction steadier.
#   pack (here): PACK_ONLY="roofline" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session56_call4.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="$(stamped_repeats prefill_sustained1000 roofline '--prefill-only --prefill-16k --sustain-ms 1000' 2)"
clock_logged
