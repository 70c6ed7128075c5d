#!/usr/bin/env python3
"""Compares two SASS listings of one CUDA source (tools/gpu/sass.sh SOURCE.cu '.' output) kernel by kernel.

A kernel is the same when its instruction lines are the same after removing the addresses and the encodings'
comments, and after normalizing what names code without being code: the anonymous namespaces' hashes (nvcc derives
them from the file's path, so the same file in two worktrees gets two names), the kernel's own name (its returns
name it: a template argument added to a kernel renames it), and the file-wide numbers of branch labels and internal
helper functions (new code elsewhere in the file renumbers them), each replaced by its order of first use in the
kernel, so a branch to another target still differs.

Prints one line per kernel that differs (instruction counts before / after, the first differing instruction; where
the kernels differ only in immediate operands, the substitutions and their counts instead, e.g. a global symbol's
offset that moved because the file gained a __device__ variable: still a difference, for the reader to judge), per
kernel gone, per kernel renamed with the same instructions (paired, not a difference) and per new kernel (reported,
not a difference: the question is whether the existing kernels kept their code), then a summary line; exits 1 when an
existing kernel differs or is gone.

usage: tools/gpu/sass_compare.py BEFORE.sass AFTER.sass
"""
import re
import sys
from collections import OrderedDict

_ANON = re.compile(r"_GLOBAL__N__[0-9a-f]+_")
_INSTR = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/")
_ADDR = re.compile(r"/\*[0-9a-f]+\*/")
_NUMBERED = re.compile(r"\.L_x_\d+|\$__internal_\d+_")
_IMMEDIATE = re.compile(r"0x[0-9a-f]+")


def _immediate_changes(code, now):
    """{(before, after): count} where the two kernels differ only in immediate operands, else None."""
    if len(code) != len(now):
        return None
    changes = {}
    for x, y in zip(code, now):
        if x == y:
            continue
        if _IMMEDIATE.sub("#", x) != _IMMEDIATE.sub("#", y):
            return None
        for a, b in zip(_IMMEDIATE.findall(x), _IMMEDIATE.findall(y)):
            if a != b:
                changes[(a, b)] = changes.get((a, b), 0) + 1
    return changes


def _renumbered(lines, name):
    """The kernel's lines with its own name as <self> and its labels / internal helpers numbered by first use."""
    order = {}

    def ordinal(m):
        kind = "L" if m.group(0).startswith(".L") else "internal"
        return f"<{kind}{order.setdefault(m.group(0), len(order))}>"

    return [_NUMBERED.sub(ordinal, line.replace(name, "<self>")) for line in lines]


def kernels(path):
    """{kernel name: [instruction text]} in file order."""
    out = OrderedDict()
    name = None
    with open(path) as f:
        for line in f:
            if line.startswith(".text."):
                name = _ANON.sub("_GN_", line.split()[0][len(".text."):].rstrip(":"))
                out[name] = []
            elif name is not None and _INSTR.match(line):
                text = _ADDR.sub("", line).split(";")[0]
                out[name].append(_ANON.sub("_GN_", " ".join(text.split())))
    return OrderedDict((name, _renumbered(lines, name)) for name, lines in out.items())


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    before, after = kernels(sys.argv[1]), kernels(sys.argv[2])
    gone = [n for n in before if n not in after]
    new = [n for n in after if n not in before]
    # A kernel renamed (a template argument added) with the same instructions: paired, not a difference.
    for old_name in list(gone):
        twin = next((n for n in new if after[n] == before[old_name]), None)
        if twin is not None:
            print(f"  renamed, same instructions: {old_name} -> {twin}")
            gone.remove(old_name)
            new.remove(twin)
    differing, immediates_only = len(gone), 0
    for name in gone:
        print(f"  only before: {name}")
    for name, code in before.items():
        if name in after and after[name] != code:
            now = after[name]
            changes = _immediate_changes(code, now)
            if changes:
                listed = ", ".join(f"{a} -> {b} x{n}" for (a, b), n in sorted(changes.items()))
                print(f"  differs in immediates only: {name} ({len(code)} instructions; {listed})")
                immediates_only += 1
            else:
                first = next((i for i, (x, y) in enumerate(zip(code, now)) if x != y), min(len(code), len(now)))
                print(f"  differs: {name} ({len(code)} -> {len(now)} instructions; first at {first}: "
                      f"{code[first] if first < len(code) else '(end)'} -> "
                      f"{now[first] if first < len(now) else '(end)'})")
            differing += 1
    for name in new:
        print(f"  new: {name} ({len(after[name])} instructions)")
    print(f"{sys.argv[2]}: {len(before)} kernels before, {len(after)} after, {differing} differ or are gone "
          f"({immediates_only} in immediates only), {len(new)} new")
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
