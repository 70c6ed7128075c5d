#!/usr/bin/env python3
"""Which kernels a traced decode step waits on: the critical path of one step, charged per kernel.

Input: a `_sequence.txt` (or `.txt.xz`) of tools/gpu/timeline_table.py --sequence (trace_decode.sh, nsys_decode.sh):
one activity a line, `t dur gap strm end kernel` in us. Kernels launched early with PDL show their wait in `dur`, and
side-stream kernels overlap the main chain, so summed durations say little about what the step waits on.

Rule (the critical path, found from the times alone):
- Kernels on one stream run in order, so where one starts before its stream predecessor ends it was launched early
  with PDL and waited: its start is moved to that end.
- From the activity that ends last, walk back: an activity's predecessor is the one that ended last at or before its
  (moved) start. Each activity on the walk is charged its running time; the gaps between a predecessor's end and the
  next start are the path's idle time. Side-stream kernels that finish under the chain are charged nothing.
- The heuristic needs no dependency edges (the trace has none): a kernel that merely ended last before a start is
  taken as its predecessor. For the engine's decode graph that is the chain of the sublayers (the stream joins land
  after the side branches end), which is what the walk is used for.
- Known miss: a PDL launch whose primary ran on another stream id (graph traces give a layer's chain new stream ids
  at forks and joins) starts before the primary ends but is not moved; the primary then drops off the path and its
  time shows as a gap before the dependent (run 282, V4: layer 2's attention site, an 8.6 us gap). --walk shows it.

Output: per kernel name (or per class with --classes) the launches on the path, their us, us per layer and share of
the step's span; then the gaps on the path.
  usage: python3 tools/gpu/critical_path.py bench/results/gpu_h200_run282_trace_b1_v4_sequence.txt.xz --layers 16
         [--classes] [--walk 4633 4880]  (--walk: the path in time order between two trace times, e.g. one layer)
"""
import argparse
import collections
import lzma
import re
import sys

ROW = re.compile(r"^\s*(-?[\d.]+)\s+([\d.]+)\s+(-?[\d.]+)\s+(\d+)\s+([\d.]+)\s+(.+?)\s*$")

# Kernel classes in the model's language (first match wins); names are timeline_table.py's short names.
CLASSES = [
    ("dense weight streams (FP8 / W8A16 / bf16 GEMV)", r"stream_gemm_kernel|w8a16_gemv|bf16_gemv"),
    ("MXFP4 routed experts", r"fp4_wgmma|fp4_stream"),
    ("LM head", r"nvjet|cublas|gemm.*sm90"),
    ("mHC sites and head", r"^hc_|embed_streams"),
    ("routing", r"route"),
    ("attention core (split, merge)", r"sink_attention"),
    ("indexer", r"index_|query_finish|visible_entry|selector"),
    ("norms, RoPE, FP8 quantize", r"rms_norm|rope|quantize"),
    ("compressors, window rows", r"compressor|add_ape|window_rows|csa2_entry|csa2_save"),
    ("combine", r"combine"),
]


def read_rows(path):
    """(t, end, stream, name) per activity line, in file order."""
    opener = lzma.open if path.endswith(".xz") else open
    rows = []
    with opener(path, "rt") as f:
        for line in f:
            m = ROW.match(line)
            if m:
                rows.append((float(m.group(1)), float(m.group(5)), int(m.group(4)), m.group(6)))
    if not rows:
        sys.exit(f"{path}: no activity rows (expected timeline_table.py --sequence output)")
    return rows


def class_of(name):
    for label, pattern in CLASSES:
        if re.search(pattern, name):
            return label
    return "other"


def without_pdl_waits(rows):
    """The rows with each start moved to its stream predecessor's end where it began earlier (a PDL wait)."""
    by_stream = collections.defaultdict(list)
    for row in rows:
        by_stream[row[2]].append(row)
    out = []
    for stream_rows in by_stream.values():
        prev_end = float("-inf")
        for t, end, stream, name in sorted(stream_rows):
            out.append((min(max(t, prev_end), end), end, stream, name))
            prev_end = max(prev_end, end)
    return out


def critical_path(rows, first_kernel=None):
    """(path of (start, end, stream, name) from the step's end backwards, each start moved past a PDL wait so that
    end - start is what the kernel is charged; idle us on the path; path span us). Rows before first_kernel's first
    launch are left out (a trace's leading host-to-device copy is not part of the step)."""
    if first_kernel:
        starts = [r[0] for r in rows if first_kernel in r[3]]
        if starts:
            rows = [r for r in rows if r[0] >= min(starts)]
    running = sorted(without_pdl_waits(rows), key=lambda r: r[1])
    cur = len(running) - 1
    path = []
    while cur >= 0:
        path.append(running[cur])
        # running is sorted by end: the predecessor is the last row (before cur) that ends by this start.
        cur = next((i for i in range(cur - 1, -1, -1) if running[i][1] <= running[cur][0] + 1e-9), -1)
    idle = sum(gap for gap, *_ in walk_rows(path, float("-inf"), float("inf")))
    span = running[-1][1] - min(r[0] for r in running) if running else 0.0
    return path, idle, span


def walk_rows(path, lo, hi):
    """The path's kernels ending in [lo, hi], in time order, as (gap before it on the path, start, end, stream, name);
    the gap of the first is to its predecessor on the path (0 for the step's first kernel)."""
    forward = list(reversed(path))
    out = []
    for i, (start, end, stream, name) in enumerate(forward):
        if lo <= end <= hi:
            out.append((start - forward[i - 1][1] if i else 0.0, start, end, stream, name))
    return out


def print_walk(path, lo, hi):
    print(f"{'gap':>6} {'start':>9} {'end':>9} {'us':>6} {'strm':>4}  kernel")
    for gap, start, end, stream, name in walk_rows(path, lo, hi):
        print(f"{gap:6.2f} {start:9.2f} {end:9.2f} {end - start:6.2f} {stream:4d}  {name[:70]}")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sequence")
    ap.add_argument("--layers", type=int, default=1, help="divide by this many layers for the per-layer column")
    ap.add_argument("--classes", action="store_true", help="sum by kernel class instead of kernel name")
    ap.add_argument("--from-kernel", default="resolve_tokens",
                    help="start the step at this kernel's first launch (default: resolve_tokens)")
    ap.add_argument("--walk", nargs=2, type=float, metavar=("FROM_US", "TO_US"),
                    help="also print the path's kernels that end in [FROM_US, TO_US] in time order, with the gap "
                         "before each (the trace's clock: read a layer's bounds off the sequence file)")
    args = ap.parse_args()

    path, idle, span = critical_path(read_rows(args.sequence), args.from_kernel)
    if args.walk:
        print_walk(path, *args.walk)
    on_path = sum(end - start for start, end, _, _ in path)
    totals, launches = collections.defaultdict(float), collections.Counter()
    for start, end, _, name in path:
        us = end - start
        key = class_of(name) if args.classes else name[:60]
        totals[key] += us
        launches[key] += 1

    print(f"{args.sequence}: span {span:.1f} us; critical path {on_path:.1f} us of kernels, {idle:.1f} us of gaps")
    print(f"{'kernel class' if args.classes else 'kernel':<62} {'n':>4} {'path us':>9} {'us/layer':>9} {'share':>6}")
    for key, us in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"{key:<62} {launches[key]:>4} {us:>9.1f} {us / args.layers:>9.2f} {100 * us / span:>5.1f}%")
    print(f"{'gaps on the path (launch latency, idle)':<62} {'':>4} {idle:>9.1f} {idle / args.layers:>9.2f} "
          f"{100 * idle / span:>5.1f}%")


if __name__ == "__main__":
    main()
