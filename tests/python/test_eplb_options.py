"""The EPLB engine options and statistics in the Python module, on the bundled v4_tiny model (CPU, 8 experts):
options round-trip, validation errors naming the option, and the EngineStats EPLB fields."""
import os
import unittest

import deepinfer
from deepinfer import LLM, SamplingParams
from deepinfer import _core

MODEL = os.path.join(os.environ.get("DEEPINFER_SOURCE_DIR", "."), "tests/golden/fixtures/v4_tiny")
SMALL = dict(max_batch_tokens=64, prefill_chunk=16, show_progress=False)


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


if __name__ == "__main__":
    unittest.main()
