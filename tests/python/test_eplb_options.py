"""The EPLB engine options and statistics in the Python module, on the bundled v4_tiny model (CPU, 8 experts):
options round-trip, validation errors naming the option, and the EngineStats EPLB fields; and process_group:
`deepinfer launch --nproc 2 -- python script` (rank 0 generates, rank 1 serves) gives the one-process outputs."""
import json
import os
import socket
import subprocess
import sys
import unittest

import deepinfer
from deepinfer import LLM, SamplingParams
from deepinfer import _core

MODEL = os.path.join(os.environ.get("DEEPINFER_SOURCE_DIR", "."), "tests/golden/fixtures/v4_tiny")
SMALL = dict(max_batch_tokens=64, prefill_chunk=16, show_progress=False)
CLI = os.environ.get("DEEPINFER_CLI", "build/deepinfer")
TIMEOUT = 60  # seconds; a hang fails the test instead of the CI job

# One rank of `deepinfer launch`, or the whole engine with argv[1] == "one": prints the outputs as JSON (rank 0).
SCRIPT = r"""
import json, sys
from deepinfer import LLM, SamplingParams
group = sys.argv[1] == "group"
llm = LLM(model=sys.argv[2], max_batch_tokens=64, prefill_chunk=16, show_progress=False,
          data_parallel=2 if group else 1, process_group=group)
if llm.engine.group_rank == 0:
    prompts = [[0, 10, 20, 30], [0, 5], list(range(2, 30)), [7], [1, 2, 3]]
    params = [SamplingParams(temperature=0, max_tokens=6), SamplingParams(temperature=0.9, seed=3, max_tokens=6,
              logprobs=1), SamplingParams(temperature=0, max_tokens=5), SamplingParams(temperature=0.7, seed=9,
              max_tokens=4, logprobs=1), SamplingParams(top_p=2.0)]
    outs = llm.generate(prompts, params)
    print(json.dumps([[o.request_id, o.token_ids, o.finish_reason, [lp.logprob for lp in o.logprobs]]
                      for o in outs]))
    print("RANK_REQUESTS", json.dumps([r["requests"] for r in llm.engine.stats()["ranks"]]))
llm.engine.serve()  # rank 0 ends the group, the others serve until then (no group: returns at once)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EplbOptionsTest(unittest.TestCase):
    def test_options_round_trip(self):
        o = _core.EngineOptions()
        self.assertEqual(o.eplb_rebalance_steps, 0)  # the C++ defaults
        self.assertAlmostEqual(o.eplb_rebalance_min_gain, 0.02)
        self.assertFalse(o.process_group)
        o.expert_parallel = 2
        o.eplb_window_steps = 8
        o.eplb_redundant_experts = 2
        o.eplb_rebalance_steps = 4
        o.eplb_rebalance_min_gain = 0.05
        o.process_group = True
        self.assertEqual((o.expert_parallel, o.eplb_window_steps, o.eplb_redundant_experts), (2, 8, 2))
        self.assertEqual(o.eplb_rebalance_steps, 4)
        self.assertAlmostEqual(o.eplb_rebalance_min_gain, 0.05)
        self.assertTrue(o.process_group)
        # options_from_env copies every field through.
        e = _core.options_from_env(o)
        self.assertEqual(e.eplb_rebalance_steps, 4)
        self.assertAlmostEqual(e.eplb_rebalance_min_gain, 0.05)

    def test_validation_errors_name_the_option(self):
        cases = [
            (dict(eplb_rebalance_steps=-1), "eplb_rebalance_steps"),
            (dict(eplb_rebalance_min_gain=1.5), "eplb_rebalance_min_gain"),
            (dict(eplb_rebalance_min_gain=-0.1), "eplb_rebalance_min_gain"),
            # Rebalancing moves experts between the data-parallel ranks.
            (dict(eplb_rebalance_steps=4, expert_parallel=2), "data_parallel"),
            # The CPU reference holds every expert: nothing to move.
            (dict(eplb_rebalance_steps=4, expert_parallel=2, data_parallel=2, eplb_window_steps=8), "every expert"),
            (dict(expert_parallel=2, eplb_window_steps=8, eplb_redundant_experts=1), "split evenly"),
        ]
        for options, needle in cases:
            with self.subTest(options=options):
                with self.assertRaises(deepinfer.DeepinferError) as caught:
                    LLM(model=MODEL, **SMALL, **options)
                self.assertIn(needle, str(caught.exception))

    def test_stats_have_the_eplb_fields(self):
        llm = LLM(model=MODEL, **SMALL, data_parallel=2, expert_parallel=2, eplb_window_steps=8,
                  eplb_redundant_experts=2)
        llm.generate([[0, 10, 20, 30], [0, 5, 6]], SamplingParams(temperature=0, max_tokens=4))
        st = llm.engine.stats()
        self.assertGreater(st["eplb_window_pairs"], 0)
        self.assertEqual(st["eplb_rebalances"], 0)  # no rebalancing asked
        self.assertEqual(st["eplb_slots_moved"], 0)
        # Without rebalancing the placement in use is the contiguous one.
        self.assertEqual(st["moe_lb_placed"], st["moe_lb_contiguous"])
        self.assertGreaterEqual(st["moe_lb_placed"], 1.0)
        self.assertEqual(len(st["ranks"]), 2)
        self.assertEqual(llm.engine.group_rank, 0)
        llm.engine.serve()  # no process group: returns at once


class ProcessGroupTest(unittest.TestCase):
    def run_script(self, mode, launch=False):
        cmd = [sys.executable, "-c", SCRIPT, mode, MODEL]
        if launch:
            cmd = [CLI, "launch", "--nproc", "2", "--master-port", str(free_port()), "--"] + cmd
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = [line for line in done.stdout.splitlines() if line.startswith("[[")]
        self.assertEqual(len(lines), 1, done.stdout)  # rank 0 only
        ranks = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("RANK_REQUESTS")]
        return json.loads(lines[0]), json.loads(ranks[0]) if ranks else []

    def test_launch_gives_the_one_process_outputs(self):
        if not os.path.exists(CLI):
            self.skipTest("no deepinfer CLI at " + CLI)
        one, _ = self.run_script("one")
        self.assertEqual([o[2] for o in one].count("rejected"), 1)
        group, rank_requests = self.run_script("group", launch=True)
        self.assertEqual(group, one)
        self.assertEqual(len(rank_requests), 2)
        self.assertGreater(rank_requests[1], 0)  # rank 1's process ran some of them


if __name__ == "__main__":
    unittest.main()
