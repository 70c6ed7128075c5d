#!/usr/bin/env python3
"""Per-launch table of an Nsight Compute CSV with duration, DRAM bytes and L2 hit rate
(tools/gpu/ncu_prefill_traffic.sh): each launch at least --min-us long (default 1500: the 16K-token prefill rows),
in launch order, with its DRAM read / write GB, the achieved DRAM GB/s and the L2 sector hit rate.

usage: ncu_traffic_table.py CSV [--min-us US]
"""
import argparse
import os
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_table import read_rows, to_number  # noqa: E402  (the same CSV reader and units)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--min-us", type=float, default=1500.0)
    args = ap.parse_args()
    launches = OrderedDict()  # launch id -> {metric: value}
    for row in read_rows(args.csv):
        metric, unit = row.get("Metric Name"), row.get("Metric Unit", "")
        value = row.get("Metric Value", "0")
        m = launches.setdefault(row.get("ID"), {})
        if metric == "lts__t_sector_hit_rate.pct":
            m[metric] = float(value.replace(",", ""))
            continue
        try:
            m[metric] = to_number(value, unit)
        except ValueError:
            continue
    print(f"{'launch':>6} {'us':>9} {'DRAM read GB':>13} {'write GB':>9} {'GB/s':>6} {'L2 hit %':>9}")
    for lid, m in launches.items():
        us = m.get("gpu__time_duration.sum", 0.0)
        if us < args.min_us:
            continue
        rd, wr = m.get("dram__bytes_read.sum", 0.0), m.get("dram__bytes_write.sum", 0.0)
        hit = m.get("lts__t_sector_hit_rate.pct", float("nan"))
        print(f"{lid:>6} {us:9.1f} {rd / 1e9:13.3f} {wr / 1e9:9.3f} {(rd + wr) / (us * 1e-6) / 1e9:6.0f} {hit:9.1f}")


if __name__ == "__main__":
    main()
