#!/usr/bin/env bash
# The dense FP8 stream's stamps inside the decode step (`v4_decode --fp8-stamps`, bench/gpu/NOTES.md "Dense FP8 stream
# stamps inside the step"): V4 and V4.1 with PDL; prints each run's per-product medians over the layers (the first
# layers' launch rows are in the logs), then the kernel alone (`roofline --fp8-phases`) for the same products.
#   usage (GPU machine, repo root): tools/gpu/fp8_step_stamps.sh BIN_DIR OUT_DIR
set -uo pipefail
b=$1 out=$2
run() {  # name, args...
  local name=$1; shift
  timeout 150 "$b/v4_decode" --quick "$@" --fp8-stamps --out "$out/fp8_stamps_$name.json" \
    >"$out/fp8_stamps_$name.log" 2>&1 || echo "$name failed (rc $?)"
  echo "== $name"
  grep -E '^ *all ' "$out/fp8_stamps_$name.log" | cut -c1-300
}
run v4 --pdl on
run v41 --pdl on --family v41
echo "== alone (roofline --fp8-phases)"
timeout 150 "$b/roofline" --fp8-phases --out "$out/fp8_stamps_alone.json" >"$out/fp8_stamps_alone.log" 2>&1 ||
  echo "roofline --fp8-phases failed (rc $?)"
grep -A1 phases "$out/fp8_stamps_alone.log" | cut -c1-420 | head -24
