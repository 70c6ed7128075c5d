#!/usr/bin/env bash
# Same-call A/B of one environment switch on the whole-model decode benchmark: `v4_decode --quick --pdl on` (16
# V4-Flash layers, 4K context) once per value of VAR, the values alternating REPS times so drift hits all of them,
# in the given order on odd repeats and reversed on even ones (runs 300-301 on one H100: the arm run second in a pair
# read ~0.3-0.4 % slower with identical kernels), then a table of the decode step time per batch (1 / 8 / 64 / 256,
# or the extra args' `--batches`) and the 4K prefill rate, per run, and each value's median.
#   usage (GPU machine, repo root, binaries unpacked by run_bounded.sh):
#     tools/gpu/decode_switch_ab.sh BIN_DIR VAR "VALUE ..." [REPS (2)] [extra v4_decode args]
#   e.g. decode_switch_ab.sh /tmp/deepinfer-bin DEEPINFER_INDEX_SELECT "old bins new" 2
#   VAR=BIN compares binaries instead: the values name benchmark binaries in BIN_DIR (e.g. "v4_decode_old v4_decode",
#   two builds carried in one call). VAR=FLAG compares v4_decode flags: each value is one flag (e.g. --zero-index-keys)
#   or `none` for no flag. VAR=ENV compares environment sets: each value is LABEL:NAME=V[,NAME=V...] (LABEL: names
#   the runs; `LABEL:` alone sets nothing), e.g. "base: early:DEEPINFER_INDEX_INPUTS_EARLY=1".
set -uo pipefail
bin=$1 var=$2 values=$3 reps=${4:-2}
shift 4 2>/dev/null || shift $#
out=${OUT:-$PWD/gpu-out}/ab_$var
mkdir -p "$out"
read -ra forward <<<"$values"
for i in $(seq 1 "$reps"); do
  order=("${forward[@]}")
  if (( i % 2 == 0 )); then order=(); for v in "${forward[@]}"; do order=("$v" "${order[@]}"); done; fi
  for v in "${order[@]}"; do
    flag=()
    settings=(UNUSED_AB_VAR=1) name=$v
    if [ "$var" = BIN ]; then prog=$bin/$v
    elif [ "$var" = FLAG ]; then prog=$bin/v4_decode; [ "$v" = none ] || flag=("$v")
    elif [ "$var" = ENV ]; then
      prog=$bin/v4_decode name=${v%%:*} env_list=${v#*:}
      [ -z "$env_list" ] || IFS=',' read -ra settings <<<"$env_list"
    else prog=$bin/v4_decode settings=("$var=$v"); fi
    env "${settings[@]}" timeout 120 "$prog" --quick --pdl on "$@" "${flag[@]}" --out "$out/${name}_$i.json" \
      >"$out/${name}_$i.log" 2>&1 || echo "$var=$v run $i failed (rc $?)"
  done
done
python3 - "$out" "$var" <<'PY'
import json, os, statistics, sys
d, var = sys.argv[1], sys.argv[2]
runs = []
digests = {}  # batch -> {last step's logits digest (v4_decode): [runs]}
for f in sorted(os.listdir(d)):
    if f.endswith(".json"):
        j = json.load(open(os.path.join(d, f)))
        step = {x["batch"]: x["step_ms"] for x in j.get("decode", []) if x.get("context") == 4096 and "step_ms" in x}
        pre = max((x.get("tokens_per_s", 0) for x in j.get("prefill", [])), default=0)
        runs.append((f[:-5], step, pre))
        for x in j.get("decode", []):
            if x.get("context") == 4096 and "logits_fnv1a64" in x:
                digests.setdefault(x["batch"], {}).setdefault(x["logits_fnv1a64"], []).append(f[:-5])
# The batches the runs measured (v4_decode --batches; default 1 / 8 / 64 / 256).
batches = sorted({b for _, step, _ in runs for b in step}) or [1, 8, 64, 256]
print(f"{var:28} " + " ".join(f"{'b%d ms' % b:>8}" for b in batches) + f" {'prefill t/s':>12}")
for name, step, pre in runs:
    print(f"{name:28} " + " ".join(f"{step.get(b, float('nan')):8.3f}" for b in batches) + f" {pre:12.0f}")
# Each value's median over its repeats (run names are VALUE_REPEAT).
by_value = {}
for name, step, pre in runs:
    by_value.setdefault(name.rsplit("_", 1)[0], []).append((step, pre))
for value, rs in sorted(by_value.items()):
    meds = [statistics.median([s[b] for s, _ in rs if b in s]) if any(b in s for s, _ in rs) else float("nan")
            for b in batches]
    print(f"{'median ' + value:28} " + " ".join(f"{m:8.3f}" for m in meds)
          + f" {statistics.median([p for _, p in rs]):12.0f}")
# Bits: runs of builds or switches that keep every operation print one digest per batch (v4_decode's logits hash).
for b, by_digest in sorted(digests.items()):
    if len(by_digest) == 1:
        print(f"b{b} logits: one digest over {sum(map(len, by_digest.values()))} runs ({next(iter(by_digest))})")
    else:
        print(f"b{b} logits: {len(by_digest)} digests: " + "; ".join(f"{h}: {' '.join(r)}" for h, r in by_digest.items()))
PY
