#!/usr/bin/env bash
# Written in session 56: the prefill fraction's method (NOTES "Session 55", last paragraph) and a fresh set of the
# committed benchmark tables at 7fbcc40's code, on whichever card comes (asked as nvidia-h200). An nvidia-smi clock /
# power / clock-event log runs beside every step (tools/gpu/clock_log.sh: clocks.csv, clock_reasons.csv), and the
# roofline's lines carry wall times (tools/gpu/stamp_lines.sh), so each prefill row can be lined up with the SM clock
# under it. Steps: the prefill-only roofline in full (9 replays), 4 quick rounds, in full again (each v13 row also
# against the dense FP8 ceiling timed right after it: fraction_of_adjacent_dense_fp8); 4 alternating decode repeats of
# main at batches 1 / 8, both models; then the full roofline and the full decode tables (v4_decode --chunk 2048 --pdl
# on, batches 1 / 8 / 64 / 256 at 4K and 64K, prefill 4K / 32K) of both models.
#   pack (here): PACK_ONLY="test_gpu test_gpu_model v4_decode roofline" BUILD_DIR=build-cuda \
#     bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session56_call1.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(stamped_step prefill_full_1 roofline '--prefill-only --prefill-16k')"
for i in 1 2 3 4; do steps+=";
$(stamped_step prefill_quick_$i roofline '--prefill-only --prefill-16k --quick')"; done
steps+=";
$(stamped_step prefill_full_2 roofline '--prefill-only --prefill-16k');
$(bin_ab_models ab_dec "v4_decode" 4);
$(stamped_step roofline_full roofline '');
$(stamped_step tables_v4 v4_decode '--chunk 2048 --pdl on');
$(stamped_step tables_v41 v4_decode '--family v41 --chunk 2048 --pdl on')"
export EXTRA_GPU0="$steps"
clock_logged
