#!/usr/bin/env python3
"""The routed experts' span per MoE layer from a traced decode step (tools/gpu/trace_decode.sh's *_sequence.txt):
for each routing kernel on the main stream, the next two fp4_wgmma_kernel launches (routed w1|w3, then w2) and the
next combine_kernel; prints the mean over layers of w1|w3's duration, w2's end after w1|w3's end, w1|w3 start -> w2
end, and routing start -> combine end (us). It reads start and duration only, so a w2 grid that starts early (and
waits) is measured by its end, not its duration."""
import re
import statistics
import sys


def main():
    rows = []
    for line in open(sys.argv[1]):
        m = re.match(r"\s*([\d.]+)\s+([\d.]+)\s+(-?[\d.]+)\s+(\d+)\s+(.*)$", line)
        if m:
            rows.append((float(m.group(1)), float(m.group(2)), m.group(5).strip()))
    spans = {"w13 dur": [], "w2 end - w13 end": [], "w13 start -> w2 end": [], "route start -> combine end": []}
    for i, (t, d, name) in enumerate(rows):
        if not name.startswith("decode_route_kernel"):
            continue
        fp4 = [r for r in rows[i + 1:i + 12] if "fp4_wgmma_kernel" in r[2]][:2]
        comb = next((r for r in rows[i + 1:i + 12] if r[2].startswith("combine_kernel")), None)
        if len(fp4) < 2 or comb is None:
            continue
        (s13, d13, _), (s2, d2, _) = fp4
        spans["w13 dur"].append(d13)
        spans["w2 end - w13 end"].append(s2 + d2 - s13 - d13)
        spans["w13 start -> w2 end"].append(s2 + d2 - s13)
        spans["route start -> combine end"].append(comb[0] + comb[1] - t)
    n = len(spans["w13 dur"])
    print(f"MoE layers traced: {n}")
    for k, v in spans.items():
        if v:
            print(f"  {k:28} mean {statistics.mean(v):7.2f} us  min {min(v):7.2f}  max {max(v):7.2f}")


if __name__ == "__main__":
    main()
