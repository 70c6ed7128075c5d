#!/usr/bin/env bash
# Session 65: the landing's chains (ef96c19d: session 64's SASS paths without the site part, run 290) and the routing's
# in-step stamps, for choosing the next batch-1 lever: traces of one batch-1 step (V4 16 layers, V4.1 10 layers; read
# with `python3 tools/gpu/critical_path.py <trace>_sequence.txt.xz --layers N --classes`), then `v4_decode
# --route-stamps` and `--route-stamps-warm` on both models (the fused routing's phases at batch 1; last measured in
# run 198, session 37, on an H200 at that session's code).
#   pack (here): run 290's (`.gpubin/bins.tar.xz`, sha256 5b6dcd47…; its v4_decode is the landing's engine).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session65_call3.sh   (~150 s)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="trace_v4|OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16;
trace_v41|OUT=\$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41"
for fam in v4 v41; do
  for form in route-stamps route-stamps-warm; do
    steps+=$';\n'"${form//-/_}_$fam|timeout 150 \$b/v4_decode --quick --pdl on --family $fam --$form --out \$OUT/${form}_$fam.json > \$OUT/${form}_$fam.log 2>&1 || true"
  done
done
export EXTRA_GPU0="$steps"
clock_logged
