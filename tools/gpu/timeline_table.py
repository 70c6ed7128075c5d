#!/usr/bin/env python3
"""Per-kernel table of one traced decode step (tools/gpu/nsys_decode.sh): from nsys's cuda_gpu_trace CSV (one row
per kernel / memcpy with its start and duration in ns), sums each kernel name's busy time and launches, and the
step's span (first start to last end), the union of busy intervals and the idle time between them, so the gap of a
decode step to its bytes' time shows as kernel time vs idle time."""
import argparse
import collections
import csv
import re
import sys


def ns(value):
    """A CSV time in ns as an exact integer: the starts are ~1.8e18, past a double's 53 bits (as floats they would
    round to multiples of 256 ns)."""
    return int(value.split(".")[0])


def short_name(name):
    """A kernel's name without its namespaces' anonymous parts, parameters, and our namespace prefix."""
    name = re.sub(r"\(anonymous namespace\)::", "", name).replace("void ", "").strip()
    name = name.split("(")[0]
    return re.sub(r"^deepinfer::cuda::", "", name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--sequence", default="",
                    help="FIRST:COUNT: also list activities FIRST.. in start order (start and end from the first "
                         "one's start, duration, gap after the latest end so far, stream), to read one layer's chain")
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    if not rows:
        sys.exit("timeline_table: empty trace")
    start_key = next(k for k in rows[0] if k.startswith("Start"))
    dur_key = next(k for k in rows[0] if k.startswith("Duration"))
    name_key = "Name" if "Name" in rows[0] else next(k for k in rows[0] if "Name" in k)
    spans = []
    per = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        s, d = ns(r[start_key]), ns(r[dur_key])
        spans.append((s, s + d))
        name = short_name(r[name_key])
        per[name][0] += 1
        per[name][1] += d
    spans.sort()
    busy, cur_s, cur_e = 0.0, spans[0][0], spans[0][1]
    for s, e in spans[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    span = max(e for _, e in spans) - spans[0][0]
    summed = sum(v[1] for v in per.values())
    print(f"{len(spans)} activities, span {span / 1e3:.1f} us, busy (union) {busy / 1e3:.1f} us, "
          f"idle {100 * (span - busy) / span:.1f} %, summed kernel time {summed / 1e3:.1f} us "
          f"(overlap {summed / max(busy, 1):.2f}x)")
    print(f"{'kernel':60s} {'n':>4s} {'us':>9s} {'share':>6s} {'us/layer':>9s} {'us/launch':>9s}")
    for name, (n, d) in sorted(per.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"{name[:60]:60s} {n:4d} {d / 1e3:9.1f} {100 * d / summed:5.1f}% {d / 1e3 / a.layers:9.2f} "
              f"{d / 1e3 / n:9.2f}")
    if a.sequence:
        print_sequence(rows, start_key, dur_key, name_key, a.sequence)


def print_sequence(rows, start_key, dur_key, name_key, spec):
    first, count = (int(v) for v in spec.split(":"))
    strm_key = next((k for k in rows[0] if k.startswith("Strm") or k == "Stream"), None)
    acts = sorted(rows, key=lambda r: ns(r[start_key]))[first:first + count]
    if not acts:
        return
    t0 = ns(acts[0][start_key])
    prev_s, prev_e = t0, t0
    print(f"\nactivities {first}..{first + len(acts) - 1} in start order (us)")
    print(f"{'t':>8s} {'dur':>7s} {'gap':>6s} {'strm':>4s} {'end':>8s}  kernel")
    for r in acts:
        s, d = ns(r[start_key]), ns(r[dur_key])
        gap = s - prev_e
        strm = r[strm_key] if strm_key else "?"
        name = short_name(r[name_key])
        print(f"{(s - t0) / 1e3:8.2f} {d / 1e3:7.2f} {gap / 1e3:6.2f} {strm:>4s} {(s + d - t0) / 1e3:8.2f}  {name[:90]}")
        prev_s, prev_e = s, max(prev_e, s + d)


if __name__ == "__main__":
    main()
