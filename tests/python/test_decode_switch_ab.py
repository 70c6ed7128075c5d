"""tools/gpu/decode_switch_ab.sh on stand-in benchmark binaries: two "builds" (shell scripts that write v4_decode's
JSON: a step time and the last step's logits digest per batch) compared with VAR=BIN. The table lists every run and
each build's median; one line per batch says whether all runs printed the same digest (a change meant to keep every
bit) or which runs printed which; the builds run in the given order on odd repeats and reversed on even ones."""
import os
import stat
import subprocess
import tempfile
import unittest

TOOL = os.path.join(os.environ.get("DEEPINFER_SOURCE_DIR", "."), "tools/gpu/decode_switch_ab.sh")

# A stand-in for v4_decode: writes its JSON to the path after --out (batches 1 and 8, 4K context), its batch-1 time
# the next of its list (one a run), and appends its name to $d/order.
FAKE = """#!/usr/bin/env bash
out=
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
n=$(cat "$0.count" 2>/dev/null || echo 0); echo $((n + 1)) >"$0.count"
times=({ms}); ms=${{times[$n]}}
basename "$0" >>"$(dirname "$0")/../order"
cat >"$out" <<JSON
{{"decode": [{{"context": 4096, "batch": 1, "step_ms": $ms, "logits_fnv1a64": "{b1}"}},
            {{"context": 4096, "batch": 8, "step_ms": 5.0, "logits_fnv1a64": "{b8}"}}],
 "prefill": [{{"tokens_per_s": 7000}}]}}
JSON
"""


def ab(builds, reps=2):
    """Runs the A/B over {name: (batch-1 ms or a list of them, one a run, digest at batch 1, digest at batch 8)}, reps
    repeats; returns its stdout and the order the builds ran in."""
    with tempfile.TemporaryDirectory() as d:
        bins = os.path.join(d, "bin")
        os.mkdir(bins)
        for name, (ms, b1, b8) in builds.items():
            path = os.path.join(bins, name)
            times = ms if isinstance(ms, list) else [ms] * reps
            with open(path, "w") as f:
                f.write(FAKE.format(ms=" ".join(str(t) for t in times), b1=b1, b8=b8))
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        run = subprocess.run(["bash", TOOL, bins, "BIN", " ".join(builds), str(reps)], capture_output=True, text=True,
                             timeout=120, env=dict(os.environ, OUT=os.path.join(d, "out")))
        if run.returncode != 0:
            raise AssertionError(run.stderr)
        with open(os.path.join(d, "order")) as f:
            return run.stdout, f.read().split()


class DecodeSwitchAbDigests(unittest.TestCase):
    def test_same_bits_one_digest_per_batch(self):
        out, _ = ab({"v4_decode_base": (2.0, "aaaa", "cccc"), "v4_decode": (1.9, "aaaa", "cccc")})
        self.assertIn("b1 logits: one digest over 4 runs (aaaa)", out)
        self.assertIn("b8 logits: one digest over 4 runs (cccc)", out)
        # The table: one row per run with its batch-1 time.
        self.assertRegex(out, r"v4_decode_base_1\s+2\.000\s+5\.000")
        self.assertRegex(out, r"v4_decode_2\s+1\.900\s+5\.000")

    def test_different_bits_name_the_runs(self):
        out, _ = ab({"v4_decode_base": (2.0, "aaaa", "cccc"), "v4_decode": (2.0, "bbbb", "cccc")})
        line = next(l for l in out.splitlines() if l.startswith("b1 logits:"))
        self.assertTrue(line.startswith("b1 logits: 2 digests: "), line)
        self.assertIn("aaaa: v4_decode_base_1 v4_decode_base_2", line)
        self.assertIn("bbbb: v4_decode_1 v4_decode_2", line)
        self.assertIn("b8 logits: one digest over 4 runs (cccc)", out)



class DecodeSwitchAbOrder(unittest.TestCase):
    def test_even_repeats_run_the_builds_reversed(self):
        _, order = ab({"a": (2.0, "x", "y"), "b": (2.0, "x", "y"), "c": (2.0, "x", "y")}, reps=3)
        self.assertEqual(order, ["a", "b", "c", "c", "b", "a", "a", "b", "c"])

    def test_median_per_build(self):
        # Repeat i's time is the list's i-th: medians 2.1 (not the first 2.4, nor the mean 2.2) and 1.9.
        out, _ = ab({"v4_decode_base": ([2.4, 2.1, 2.1], "x", "y"), "v4_decode": ([1.9, 1.8, 2.6], "x", "y")}, reps=3)
        self.assertRegex(out, r"median v4_decode_base\s+2\.100\s+5\.000\s+7000")
        self.assertRegex(out, r"median v4_decode\s+1\.900\s+5\.000\s+7000")


if __name__ == "__main__":
    unittest.main()
