#!/usr/bin/env bash
# Written in session 56: run 265's clock log showed the H100 at its 700 W limit under the prefill rows (clock-event
# reason 0x4, SW power cap; SM clock 1.0-1.9 GHz, 1.98 GHz idle), and the same v13 kernel timed 4.9-6.0 ms (V4 w13)
# by its place in the run, while the dense FP8 ceiling timed right after it stayed at 1343-1386 TFLOP/s. So the
# roofline now also times each prefill row's v13 under sustained load (300 ms settle + >= 300 ms back to back) between
# two dense FP8 ceilings timed the same way (fraction_of_sustained_dense_fp8). Steps, with the clock log beside them:
# the prefill-only roofline in full twice (sustained rows on), then the full decode tables of both models (v4_decode
# --chunk 2048 --pdl on; on a card under 120 GB 10 / 6 layers now: run 265 ran out of memory with 16 / 10).
#   pack (here): PACK_ONLY="v4_decode roofline" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session56_call2.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="$(stamped_step prefill_sustained_1 roofline '--prefill-only --prefill-16k');
$(stamped_step prefill_sustained_2 roofline '--prefill-only --prefill-16k');
$(stamped_step tables_v4 v4_decode '--chunk 2048 --pdl on');
$(stamped_step tables_v41 v4_decode '--family v41 --chunk 2048 --pdl on')"
clock_logged
