#!/usr/bin/env python3
"""Per-kernel table of one traced decode step (tools/gpu/nsys_decode.sh): from nsys's cuda_gpu_trace CSV (one row
per kernel / memcpy with its start and duration in ns), sums each kernel name's busy time and launches, and the
step's span (first start to last end), the union of busy intervals and the idle time between them, so the gap of a
decode step to its bytes' time shows as kernel time vs idle time."""
import argparse
import collections
import csv
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--top", type=int, default=40)
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
        s, d = float(r[start_key]), float(r[dur_key])
        spans.append((s, s + d))
        name = r[name_key].split("(")[0].replace("void ", "").strip()
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


if __name__ == "__main__":
    main()
