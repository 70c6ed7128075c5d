#!/usr/bin/env python3
"""Table of a prefill A/B's sustained rows (roofline --sustained; session 56): for each build and 16K v13 row, the
median sustained time over the runs, its change against the first build, how many runs it was faster than the
first build's run of the same round, the fraction of the sustained dense FP8 rate (min-max over the runs), and the
median burst time (the row's plain timing at the run's start) against the first build's.

usage: prefill_sustained_table.py DIR [PREFIX]   (DIR holds PREFIX + prefill_<build>_<round>.json, as
       tools/gpu/calls/session56_call3.sh writes them (no prefix) or as bench/results keeps them (PREFIX
       gpu_h100_runNNN_); build "roofline" is the base, else the first in sorted order)
"""
import json
import os
import re
import statistics
import sys


def main(d, prefix=""):
    runs = {}  # build -> round -> {row: (sustained time, fraction, burst time)}
    for f in sorted(os.listdir(d)):
        m = re.fullmatch(re.escape(prefix) + r"prefill_(.+)_(\d+)\.json", f)
        if not m:
            continue
        build, rnd = m.group(1), int(m.group(2))
        rows = {}
        for r in json.load(open(os.path.join(d, f)))["kernels"]:
            if r["kernel"] == "mxfp4_prefill_v13" and "sustained_time_us" in r:
                key = f"{r['model']} {r['shape'].split()[0]}"
                rows[key] = (r["sustained_time_us"], r["fraction_of_sustained_dense_fp8"], r["time_us"])
        runs.setdefault(build, {})[rnd] = rows
    order = sorted(runs, key=lambda b: (b != "roofline", b))
    if not order:
        sys.exit(f"no prefill_<build>_<round>.json with sustained rows in {d}")
    base = order[0]
    keys = sorted({k for b in runs for r in runs[b].values() for k in r})
    print(f"{'row':<10} {'build':<20} {'median us':>10} {'vs base':>8} {'faster':>7}  {'of sustained FP8':<16} "
          f"{'burst us':>9} {'vs base':>8}")
    for k in keys:
        for b in order:
            t = [runs[b][r][k][0] for r in sorted(runs[b]) if k in runs[b][r]]
            fr = [runs[b][r][k][1] for r in sorted(runs[b]) if k in runs[b][r]]
            if not t:
                continue
            med = statistics.median(t)
            bmed = statistics.median([runs[base][r][k][0] for r in runs[base] if k in runs[base][r]])
            burst = statistics.median([runs[b][r][k][2] for r in runs[b] if k in runs[b][r]])
            bburst = statistics.median([runs[base][r][k][2] for r in runs[base] if k in runs[base][r]])
            wins = sum(1 for r in runs[b] if k in runs[b][r] and r in runs[base] and k in runs[base][r]
                       and runs[b][r][k][0] < runs[base][r][k][0])
            n = sum(1 for r in runs[b] if k in runs[b][r] and r in runs[base])
            print(f"{k:<10} {b:<20} {med:>10.1f} {100 * (med / bmed - 1):>+7.2f}% {wins:>3}/{n:<3}  "
                  f"{f'{100 * min(fr):.1f}-{100 * max(fr):.1f} %':<16} {burst:>9.1f} {100 * (burst / bburst - 1):>+7.2f}%")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(*sys.argv[1:])
