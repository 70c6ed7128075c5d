#!/usr/bin/env bash
# Per-instruction warp stall samples of one kernel launch (issue 4: where a latency-bound kernel waits): ncu's
# source page as SASS, with the sampled stall reasons of every instruction, then the 40 instructions with the most
# samples and the stall reasons summed over the kernel.
#   usage (GPU machine, repo root): bash tools/gpu/ncu_sass_stalls.sh NAME KERNEL_REGEX SKIP -- CMD...
#   e.g. bash tools/gpu/ncu_sass_stalls.sh prefill_v8 mxfp4_prefill_v8_kernel 0 -- $bin/roofline --prefill-only --quick
#   NCU_EXTRA: more ncu options (e.g. "--profile-from-start off --graph-profiling node" for v4_decode --profile-step).
#   output: $OUT/ncu_sass_NAME.{ncu-rep,csv,txt}
#   For a kernel with warp roles (producer polls beside consumer loops) the top list is mostly the polls: split the
#   CSV by code region and opcode with tools/gpu/ncu_sass_split.py (run 261).
set -uo pipefail
name=$1 regex=$2 skip=$3
shift 4
source "$(dirname "$0")/ncu_setup.sh"
ncu_setup ncu_sass_stalls || exit 1
rep=$OUT/ncu_sass_$name
timeout 240 "$NCU" --kernel-name "regex:$regex" --launch-skip "$skip" --launch-count 1 --set full \
  --import-source no ${NCU_EXTRA:-} -f -o "$rep" "$@" >"$rep.profile.log" 2>&1
echo "ncu profile rc=$? ($(ls -la "$rep.ncu-rep" 2>/dev/null | awk '{print $5}') bytes)"
if [ ! -s "$rep.ncu-rep" ]; then
  # No launch matched (session 44's call: a regex in source spelling, `<true`, against ncu's `<(bool)1`): say so, with
  # the kernel names ncu listed, instead of an empty table.
  echo "ncu_sass_stalls: no report: no launch matched '$regex' (skip $skip), or ncu failed ($rep.profile.log); the" \
    "kernel names ncu listed (NCU_EXTRA='--kernel-name-base demangled' matches against these):"
  grep -E '^ *[0-9]+\. ' "$rep.profile.log" | head -40
  exit 1
fi
"$NCU" -i "$rep.ncu-rep" --page source --print-source sass --csv >"$rep.csv" 2>"$rep.csv.err" ||
  "$NCU" -i "$rep.ncu-rep" --page source --csv >"$rep.csv" 2>>"$rep.csv.err"
echo "source page: $(wc -l <"$rep.csv") lines; $(head -c 300 "$rep.csv.err")"
python3 - "$rep.csv" >"$rep.txt" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
# The page starts with a "Kernel Name" line; the column header is the first row naming the SASS / source column.
hdr = next((i for i, r in enumerate(rows) if any(h.strip().lower() in ("source", "sass") for h in r)), None)
if hdr is None:
    print("no source column; first rows:", rows[:3]); sys.exit(0)
head = rows[hdr]
rows = rows[hdr:]
print("columns:", head)
def col(pred):
    return [i for i, h in enumerate(head) if pred(h)]
src = (col(lambda h: h.strip().lower() in ("source", "sass")) or [1])[0]
samp = col(lambda h: "Warp Stall Sampling (All" in h)
reasons = [i for i, h in enumerate(head) if i not in samp and ("stall" in h.lower() or "Samples" in h)]
def num(s):
    try: return float(s.replace(",", ""))
    except ValueError: return 0.0
body = [r for r in rows[1:] if len(r) == len(head)]
if samp:
    body.sort(key=lambda r: -num(r[samp[0]]))
    total = sum(num(r[samp[0]]) for r in body) or 1
    print(f"total samples {total:.0f}; top instructions:")
    for r in body[:40]:
        extra = " ".join(f"{head[i]}={r[i]}" for i in reasons if num(r[i]) > 0.05 * num(r[samp[0]]))
        print(f"{num(r[samp[0]]) / total * 100:5.1f}%  {r[src][:90]:90s} {extra}")
sums = collections.Counter()
for r in body:
    for i in reasons: sums[head[i]] += num(r[i])
print("stall columns summed:", sums.most_common(20))
PY
head -60 "$rep.txt"
