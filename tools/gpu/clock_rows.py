#!/usr/bin/env python3
"""The SM clock and board power under each row of a time-stamped benchmark log (session 56).

A benchmark run through tools/gpu/stamp_lines.sh prints its rows with epoch times; tools/gpu/clock_log.sh samples the
GPU beside it. For each row matching PATTERN, this prints the samples taken since the previous matching row (the span
in which that row was timed): the SM clock (min / median / max), the power (median / max) and the clock-event reasons
seen (0x4: SW power cap). Reads clock_log.sh's CSV (no header, no units) and the older form with a header, units and
an index column (runs 265-266).

usage: clock_rows.py STAMPED_LOG CLOCKS_CSV [PATTERN ("mxfp4_prefill_v13 ")] [REASONS_CSV]
"""
import csv
import datetime
import lzma
import re
import statistics
import sys


def epoch(ts):
    return datetime.datetime.strptime(ts.strip(), "%Y/%m/%d %H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def numbers(fields):
    return [float(re.sub(r"[^0-9.]", "", f)) for f in fields if re.search(r"[0-9]", f)]


def read_clocks(path):
    """(time, sm_mhz, power_w) per sample; the index column of the old form is dropped."""
    out = []
    for row in csv.reader(open(path)):
        if not row or not row[0][:1].isdigit():
            continue
        vals = numbers(row[1:])
        if len(vals) == 6:  # old form: index, sm, mem, power, temp, util
            vals = vals[1:]
        out.append((epoch(row[0]), vals[0], vals[2]))
    return out


def read_reasons(path):
    out = []
    for row in csv.reader(open(path)) if path else []:
        if row and row[0][:1].isdigit():
            out.append((epoch(row[0]), row[-1].strip()))
    return out


def main(log, clocks_csv, pattern="mxfp4_prefill_v13 ", reasons_csv=None):
    clocks, reasons = read_clocks(clocks_csv), read_reasons(reasons_csv)
    rows = []
    for line in (lzma.open(log, "rt") if log.endswith(".xz") else open(log)):  # committed logs > 40 KB are .xz
        t, _, text = line.partition(" ")
        try:
            rows.append((float(t), text.rstrip()))
        except ValueError:
            continue
    if not rows:
        sys.exit(f"{log}: no time-stamped lines (run it through tools/gpu/stamp_lines.sh)")
    start = rows[0][0]
    for t, text in rows:
        if not re.search(pattern, text):
            continue
        span = [c for c in clocks if start <= c[0] <= t]
        seen = sorted({r for (rt, r) in reasons if start <= rt <= t})
        start = t
        if not span:
            print(f"(no samples)  {text.strip()[:110]}")
            continue
        sm, pw = [c[1] for c in span], [c[2] for c in span]
        print(f"SM {min(sm):4.0f}/{statistics.median(sm):4.0f}/{max(sm):4.0f} MHz  "
              f"{statistics.median(pw):3.0f}/{max(pw):3.0f} W  {','.join(seen) or '-':<20} {text.strip()[:100]}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
