#!/usr/bin/env bash
# Same-run A/B of the decode graph's L2 weight prefetch (bench/gpu/NOTES.md "L2 prefetch"): batch-1 decode with
# DEEPINFER_L2_PREFETCH off / on, alternating so drift hits both sides, then each fork point alone, the per-line
# modes and V4.1. Writes one JSON per run under $OUT/l2 and prints batch 1 / 8 at 4K context last.
#   usage (GPU machine, repo root, after tools/gpu/run_bounded.sh unpacked the binaries): tools/gpu/l2_prefetch_ab.sh BIN_DIR
set -uo pipefail
bin=${1:-/tmp/deepinfer-bin}
out=${OUT:-$PWD/gpu-out}/l2
mkdir -p "$out"
run() { # run NAME ENV... -- ARGS...: one v4_decode --quick run with the given environment
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  timeout 90 env "${envs[@]}" "$bin/v4_decode" --quick --pdl on "$@" --out "$out/$name.json" >"$out/$name.log" 2>&1 \
    || echo "$name failed (rc $?)"
}
# Most telling first: a call cut short still has the plain A/B.
for i in 1 2; do
  run off_$i DEEPINFER_L2_PREFETCH=0 --
  run on_$i DEEPINFER_L2_PREFETCH=1 --
done
run v41_off DEEPINFER_L2_PREFETCH=0 -- --family v41
run v41_on DEEPINFER_L2_PREFETCH=1 -- --family v41
for p in 1 2 3 4; do run point_$p DEEPINFER_L2_PREFETCH=1 DEEPINFER_L2_PREFETCH_POINTS=$p --; done
run mode_line DEEPINFER_L2_PREFETCH=1 DEEPINFER_L2_PREFETCH_MODE=line --
python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
print(f"{'run':14} {'b1 4K ms':>9} {'b1 roofline':>11} {'b8 4K ms':>9}")
for f in sorted(os.listdir(d)):
    if not f.endswith('.json'):
        continue
    rows = {(r['batch'], r['context']): r for r in json.load(open(os.path.join(d, f)))['decode']}
    b1, b8 = rows.get((1, 4096)), rows.get((8, 4096))
    print(f"{f[:-5]:14} {b1['step_ms']:9.3f} {b1['fraction_of_copy_roofline']:11.3f} "
          f"{(b8 or {}).get('step_ms', float('nan')):9.3f}")
PY
