#!/usr/bin/env bash
# `roofline --fp4-phases` (the MXFP4 decode stream's per-block phase stamps, alone), one run; prints its `plain` rows.
# (It swept DEEPINFER_FP4_EARLY_START until that switch was removed after run 128: bench/gpu/NOTES.md "The MXFP4
# stream's early start".)
#   usage (GPU machine, repo root): tools/gpu/fp4_phases_sweep.sh BIN_DIR OUT_DIR
set -uo pipefail
b=$1 out=$2
timeout 200 "$b/roofline" --fp4-phases --out "$out/fp4_phases.json" >"$out/fp4_phases.log" 2>&1 ||
  echo "roofline --fp4-phases failed (rc $?)"
grep plain "$out/fp4_phases.log" | cut -c1-400
