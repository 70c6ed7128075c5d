#!/usr/bin/env python3
"""Where a kernel's warps wait, by code region and opcode, from ncu_sass_stalls.sh's source-page CSV.

ncu_sass_stalls.sh lists the 40 instructions with the most stall samples; for a large kernel with warp roles (a
producer warp polling its `empty` barriers beside issue-bound consumer warpgroups) that list is mostly the producer's
TRYWAIT loop, which says nothing about the kernel's limit. This splits the samples instead:
  - by region: address ranges given as NAME=START:END (hex offsets from the kernel's first instruction), the rest
    'other'; each region's share of all samples and its top stall reasons;
  - per region, the mbarrier waits (a SYNCS...TRYWAIT and the BRA polling it) by barrier operand;
  - per opcode (predicate and modifiers after the first '.' kept) inside one region: samples, share of the region's
    executed instructions, top stall reasons. The instruction mix says what a consumer loop spends its issue on.
  usage: ncu_sass_split.py CSV [--region NAME=START:END ...] [--mix NAME] [--bucket HEX]
  --bucket prints samples / executed / wgmma instructions per address bucket first (default 0x2000), to find the
  regions.
"""
import argparse
import collections
import csv
import re


def load(path):
    rows = list(csv.reader(open(path, errors="replace")))
    hdr = next(i for i, r in enumerate(rows) if "Source" in r)
    head = rows[hdr]
    body = [r for r in rows[hdr + 1:] if len(r) == len(head)]
    return head, body


def num(s):
    try:
        return float(s.replace(",", "") or 0)
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--region", action="append", default=[], help="NAME=START:END, hex offsets")
    ap.add_argument("--mix", help="the region whose opcode mix is printed")
    ap.add_argument("--bucket", default="0x2000")
    a = ap.parse_args()
    head, body = load(a.csv)
    ia, isrc = head.index("Address"), head.index("Source")
    isamp, iex = head.index("Warp Stall Sampling (All Samples)"), head.index("Instructions Executed")
    reasons = [i for i, h in enumerate(head) if h.startswith("stall_") and "Not Issued" not in h]
    base = int(body[0][ia], 16)
    total = sum(num(r[isamp]) for r in body) or 1.0
    regions = []
    for spec in a.region:
        name, rng = spec.split("=")
        lo, hi = (int(x, 16) for x in rng.split(":"))
        regions.append((name, lo, hi))

    def region_of(off):
        return next((n for n, lo, hi in regions if lo <= off < hi), "other")

    step = int(a.bucket, 16)
    buckets = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    by_region = collections.defaultdict(collections.Counter)
    waits = collections.Counter()
    mix, mix_ex, mix_st = collections.Counter(), collections.Counter(), collections.defaultdict(collections.Counter)
    for i, r in enumerate(body):
        off = int(r[ia], 16) - base
        s = r[isrc].strip()
        b = buckets[off // step]
        b[0] += num(r[isamp])
        b[1] += num(r[iex])
        if "GMMA" in s:
            b[2] += num(r[iex])
        g = region_of(off)
        by_region[g]["ALL"] += num(r[isamp])
        for j in reasons:
            by_region[g][head[j][6:]] += num(r[j])
        if "BRA" in s and i > 0 and "TRYWAIT" in body[i - 1][isrc]:
            operand = body[i - 1][isrc].split("[")[1].split("]")[0]
            waits[(g, operand)] += num(r[isamp]) + num(body[i - 1][isamp])
        if g == a.mix:
            op = re.sub(r"^@!?U?P\w+\s+", "", s).split()
            op = op[0] if op else "?"
            mix[op] += num(r[isamp])
            mix_ex[op] += num(r[iex])
            for j in reasons:
                mix_st[op][head[j][6:]] += num(r[j])
    print(f"{len(body)} instructions, {total:.0f} samples")
    print(f"buckets of {a.bucket} (>= 0.5 % of the samples): offset, samples %, instructions executed, of them wgmma")
    for k in sorted(buckets):
        smp, ex, mma = buckets[k]
        if smp / total >= 0.005:
            print(f"  {hex(k * step):>9} {100 * smp / total:5.1f} % {ex:14.0f} {mma:11.0f}")
    print("regions: samples %, top stall reasons (% of all samples)")
    for g, c in sorted(by_region.items(), key=lambda kv: -kv[1]["ALL"]):
        top = " ".join(f"{k}={100 * v / total:.1f}" for k, v in c.most_common(8) if k != "ALL")
        print(f"  {g:12} {100 * c['ALL'] / total:5.1f} %  {top}")
    print("mbarrier waits (TRYWAIT + its BRA) by region and barrier operand, % of all samples:")
    for (g, operand), v in waits.most_common(12):
        print(f"  {g:12} [{operand}] {100 * v / total:.1f}")
    if a.mix:
        ex_total = sum(mix_ex.values()) or 1.0
        print(f"opcode mix of {a.mix}: samples % of all, share of the region's executed instructions, top reasons")
        for op, v in mix.most_common(25):
            top = " ".join(f"{k}={100 * x / total:.1f}" for k, x in mix_st[op].most_common(3))
            print(f"  {op:32} {100 * v / total:5.1f} %  exec {100 * mix_ex[op] / ex_total:5.1f} %  {top}")


if __name__ == "__main__":
    main()
