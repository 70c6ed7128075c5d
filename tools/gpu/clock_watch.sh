#!/usr/bin/env bash
# The GPU's SM / memory clocks and power while one command runs: nvidia-smi sampled every 20 ms into $OUT/<name>.csv
# (tools/gpu/clock_log.sh), then the command's own output, then percentiles of each column over the samples taken
# while it ran. Used to tell whether a latency kernel that is slower inside the decode step than in its own bench
# runs at another clock there (bench/gpu/NOTES.md "Session 20").
#   usage (GPU machine): OUT=... bash tools/gpu/clock_watch.sh NAME COMMAND [ARGS...]
set -uo pipefail
name=$1
shift
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
csv=$OUT/$name.csv
CLOCK_LOG_MS=20 bash "$(dirname "$0")/clock_log.sh" start "$OUT" "$name"
sleep 0.5
"$@" >"$OUT/$name.log" 2>&1
rc=$?
sleep 0.2
bash "$(dirname "$0")/clock_log.sh" stop "$OUT" "$name"
echo "$name: rc=$rc, $(wc -l <"$csv") samples"
python3 - "$csv" <<'PY'
import sys
cols = ["sm_mhz", "mem_mhz", "power_w", "temp_c", "util_pct"]
vals = {c: [] for c in cols}
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    if len(f) < 6:
        continue
    try:
        for c, x in zip(cols, f[1:]):
            vals[c].append(float(x))
    except ValueError:
        continue
for c in cols:
    v = sorted(vals[c])
    if not v:
        continue
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
    print(f"  {c:9} min {v[0]:8.0f}  p10 {q(0.1):8.0f}  p50 {q(0.5):8.0f}  p90 {q(0.9):8.0f}  max {v[-1]:8.0f}")
PY
