#!/usr/bin/env bash
# The MXFP4 stream's stamps inside the decode step (`v4_decode --fp4-stamps`, bench/gpu/NOTES.md "The MXFP4 stream's
# stamps inside the step"): V4 and V4.1 with PDL, V4 without; prints each run's medians beside the alone lines.
#   usage (GPU machine, repo root): tools/gpu/fp4_step_stamps.sh BIN_DIR OUT_DIR
set -uo pipefail
b=$1 out=$2
run() {  # name, args...
  local name=$1; shift
  timeout 150 "$b/v4_decode" --quick "$@" --fp4-stamps --out "$out/fp4_stamps_$name.json" \
    >"$out/fp4_stamps_$name.log" 2>&1 || echo "$name failed (rc $?)"
  echo "== $name"
  tail -8 "$out/fp4_stamps_$name.log" | cut -c1-300
}
run v4 --pdl on
run v41 --pdl on --family v41
run v4_nopdl --pdl off
