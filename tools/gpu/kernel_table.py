#!/usr/bin/env python3
"""Sum an Nsight Compute CSV (one row per kernel and metric, from tools/gpu/profile_decode.sh) by kernel name.

Prints, heaviest first: launches, total microseconds, share of the summed time, DRAM bytes read + written, the
achieved GB/s and its fraction of the copy rate (--copy-gbs, default the H200's measured ~4000 GB/s), and per layer
microseconds (--layers). Kernel names are shortened to the function name without template arguments.
"""
import argparse
import csv
import io
import re
import sys
from collections import OrderedDict


def short_name(name):
    # ncu writes an anonymous namespace as `<unnamed>` (after `::` or a space) or as a bare `unnamed>` (run 203: at
    # the start of a name, or right after a template's `<`, as in `kernel<unnamed>::Marks>`), whose lone `>` would
    # end the template depth count below early
    name = re.sub(r"(?<!\w)<unnamed>", "anon", name)
    name = name.replace("unnamed>", "anon")
    name = re.sub(r"\(.*$", "", name)  # drop the parameter list
    depth, out = 0, []
    for ch in name:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    name = "".join(out).strip()
    name = re.sub(r"^(void|auto)\s+", "", name)
    return "::".join(name.split("::")[-2:])  # the kernel and its namespace or class


def read_rows(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')  # ncu prints its own lines before the CSV header
    if start < 0:
        sys.exit(f"kernel_table: no CSV header in {path}")
    return list(csv.DictReader(io.StringIO(text[start:])))


def to_number(value, unit):
    v = float(value.replace(",", ""))
    # ncu writes either unit form ("ns" / "nsecond", "KB" / "Kbyte"), depending on its version and options.
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3,
             "s": 1e6, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "B": 1.0, "KB": 1e3, "MB": 1e6,
             "GB": 1e9}
    if unit not in scale:
        raise ValueError(f"unknown unit {unit!r}")
    return v * scale.get(unit, 1.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--copy-gbs", type=float, default=4000.0)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()

    kernels = OrderedDict()  # launch id -> {name, us, bytes}
    for row in read_rows(args.csv):
        kid = row.get("ID")
        k = kernels.setdefault(kid, {"name": short_name(row.get("Kernel Name", "?")), "us": 0.0, "bytes": 0.0})
        metric, unit, value = row.get("Metric Name"), row.get("Metric Unit", ""), row.get("Metric Value", "0")
        try:
            number = to_number(value, unit)
        except ValueError:
            continue
        if metric == "gpu__time_duration.sum":
            k["us"] += number
        elif metric in ("dram__bytes_read.sum", "dram__bytes_write.sum"):
            k["bytes"] += number
    if not kernels:
        sys.exit("kernel_table: no kernel rows")

    by_name = OrderedDict()
    for k in kernels.values():
        s = by_name.setdefault(k["name"], {"n": 0, "us": 0.0, "bytes": 0.0})
        s["n"] += 1
        s["us"] += k["us"]
        s["bytes"] += k["bytes"]
    total_us = sum(s["us"] for s in by_name.values())
    total_bytes = sum(s["bytes"] for s in by_name.values())
    print(f"{len(kernels)} kernels, {total_us:.1f} us summed (serialized), {total_bytes / 1e6:.1f} MB DRAM, "
          f"{total_bytes / (total_us * 1e-6) / 1e9 if total_us else 0:.0f} GB/s overall "
          f"= {100 * total_bytes / (total_us * 1e-6) / 1e9 / args.copy_gbs if total_us else 0:.1f} % of "
          f"{args.copy_gbs:.0f} GB/s")
    print(f"{'kernel':44s} {'n':>4s} {'us':>9s} {'share':>6s} {'MB':>9s} {'GB/s':>7s} {'copy%':>6s} "
          f"{'us/layer':>9s} {'us/launch':>9s}")
    for name, s in sorted(by_name.items(), key=lambda kv: -kv[1]["us"])[: args.top]:
        gbs = s["bytes"] / (s["us"] * 1e-6) / 1e9 if s["us"] else 0.0
        per_layer = s["us"] / args.layers if args.layers else float("nan")
        print(f"{name[:44]:44s} {s['n']:4d} {s['us']:9.1f} {100 * s['us'] / total_us:5.1f}% "
              f"{s['bytes'] / 1e6:9.2f} {gbs:7.0f} {100 * gbs / args.copy_gbs:5.1f}% {per_layer:9.1f} "
              f"{s['us'] / s['n']:9.2f}")


if __name__ == "__main__":
    main()
