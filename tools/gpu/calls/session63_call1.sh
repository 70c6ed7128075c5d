#!/usr/bin/env bash
# Session 63: the decode and prefill tables and the batch-1 CUPTI timelines at the landing of both waiting patches
# (the attention GEMMs' outputs in bf16, V4.1's MoE combine read by the next site entry; runs 283-284), as runs 281-282
# did at session 59's code: the standing numbers of every batch / context row and the chain that
# tools/gpu/critical_path.py reads, on the new engine; then the MXFP4 experts' in-step stamps (`--fp4-stamps`, V4 and
# V4.1: late block starts, first stage, launch gap per product), last taken on an H200 in run 178 (session 33's code),
# whose split of the routed w2's start-up NOTES "Session 62" reads. ~100 s on the GPU.
#   pack (here): the same as session61_call1.sh's (its v4_decode is the landing's engine).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session63_call1.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(stamped_step tables_v4 v4_decode '--chunk 2048 --pdl on');
$(stamped_step tables_v41 v4_decode '--family v41 --chunk 2048 --pdl on');
trace_v4|OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16;
trace_v41|OUT=\$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41;
$(fp4_stamps_step stamps_v4 '');
$(fp4_stamps_step stamps_v41 '--family v41')"
export EXTRA_GPU0="$steps"
clock_logged
