"""The Python offline API on the bundled v4_tiny model: generate, streaming, seeds, rejections."""
import os
import unittest

import deepinfer
from deepinfer import LLM, SamplingParams

MODEL = os.path.join(os.environ.get("DEEPINFER_SOURCE_DIR", "."), "tests/golden/fixtures/v4_tiny")


class LLMTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = LLM(model=MODEL, max_batch_tokens=64, prefill_chunk=16)

    def test_generate_batch_equals_alone(self):
        prompts = [[0, 10, 20, 30], [0, 5], list(range(2, 40)), [7]]
        params = [SamplingParams(temperature=0.9, top_p=0.9, seed=11 + i, max_tokens=10, logprobs=1)
                  for i in range(len(prompts))]
        batched = self.llm.generate(prompts, params)
        self.assertEqual(len(batched), 4)
        for p, sp, out in zip(prompts, params, batched):
            alone = self.llm.generate([p], sp)[0]
            self.assertEqual(out.token_ids, alone.token_ids)
            self.assertEqual([lp.logprob for lp in out.logprobs], [lp.logprob for lp in alone.logprobs])
            self.assertIn(out.finish_reason, ("length", "finished"))
            self.assertEqual(out.prompt_token_ids, p)

    def test_stream_matches_generate(self):
        sp = SamplingParams(temperature=0.7, seed=5, max_tokens=12)
        events = list(self.llm.stream([0, 10, 20], sp))
        self.assertEqual(sum(e.terminal for e in events), 1)
        self.assertTrue(events[-1].terminal)
        tokens = [t for e in events for t in e.token_ids]
        self.assertEqual(tokens, self.llm.generate([[0, 10, 20]], sp)[0].token_ids)

    def test_stats_account_for_the_steps(self):
        self.llm.generate([[0, 10, 20]], SamplingParams(temperature=0, max_tokens=4))
        st = self.llm.engine.stats()
        self.assertGreater(st["steps"], 0)
        self.assertLessEqual(st["async_steps"], st["steps"])
        self.assertGreater(st["host_seconds"], 0.0)
        self.assertGreater(st["model_wait_seconds"], 0.0)
        self.assertEqual(st["device_busy_seconds"], 0.0)  # the CPU model has no device timeline

    def test_greedy_is_deterministic_and_limited(self):
        a = self.llm.generate([0, 10, 20], SamplingParams(temperature=0, max_tokens=6))[0]
        b = self.llm.generate([0, 10, 20], SamplingParams(temperature=0, max_tokens=6))[0]
        self.assertEqual(a.token_ids, b.token_ids)
        self.assertLessEqual(len(a.token_ids), 6)

    def test_cancel(self):
        it = self.llm.stream([0, 1, 2, 3], SamplingParams(max_tokens=500, ignore_eos=True))
        first = next(it)
        it.cancel()
        rest = list(it)
        self.assertFalse(first.terminal)
        self.assertEqual(rest[-1].reason, deepinfer.FinishReason.cancelled)

    def test_rejections_name_the_field(self):
        out = self.llm.generate([[0, 1]], SamplingParams(top_p=2.0))[0]
        self.assertEqual(out.finish_reason, "rejected")
        self.assertIn("params.top_p", out.message)
        out = self.llm.generate(["text without a tokenizer"])[0]
        self.assertEqual(out.finish_reason, "rejected")
        self.assertIn("tokenizer", out.message)
        with self.assertRaises(TypeError):
            SamplingParams(temprature=1.0)
        with self.assertRaises(deepinfer.DeepinferError):
            self.llm.chat([{"role": "user", "content": "hi"}])

    def test_bad_model_dir_is_an_error(self):
        with self.assertRaises(deepinfer.DeepinferError):
            LLM(model="/nonexistent/model")

    def test_device_option_reaches_the_backend(self):
        # An unknown device is named; "cuda" reaches the CUDA backend when the build has it, which refuses this
        # 4-head fixture by its shape (the GPU attention is V4-Flash's 64 x 512), else it is named unavailable.
        with self.assertRaises(deepinfer.DeepinferError) as unknown:
            LLM(model=MODEL, device="tpu")
        self.assertIn("device 'tpu' is not available", str(unknown.exception))
        with self.assertRaises(deepinfer.DeepinferError) as cuda:
            LLM(model=MODEL, device="cuda")
        message = str(cuda.exception)
        self.assertTrue("64 heads of 512" in message or "not available" in message or "CUDA" in message, message)


if __name__ == "__main__":
    unittest.main()
