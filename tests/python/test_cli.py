"""deepinfer generate: JSONL batch in/out, bad lines answered (not fatal), batched == alone, sampling flags."""
import json
import os
import subprocess
import tempfile
import unittest

SRC = os.environ.get("DEEPINFER_SOURCE_DIR", ".")
CLI = os.environ.get("DEEPINFER_CLI", "build/deepinfer")
MODEL = os.path.join(SRC, "tests/golden/fixtures/v4_tiny")


def run(*args):
    return subprocess.run([CLI, "generate", "--model", MODEL, "--quiet", *args], capture_output=True, text=True)


class CliTest(unittest.TestCase):
    def jsonl(self, lines, *flags):
        with tempfile.TemporaryDirectory() as d:
            inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
            with open(inp, "w") as f:
                f.write("\n".join(lines) + "\n")
            r = run("--input", inp, "--output", out, *flags)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                return [json.loads(line) for line in f]

    def test_batch(self):
        lines = [
            json.dumps({"id": "g", "prompt_token_ids": [0, 10, 20], "temperature": 0, "max_tokens": 5}),
            "{not json",
            json.dumps({"prompt_token_ids": [0, 1], "top_k": -5}),
            json.dumps({"prompt_token_ids": [0, 1], "tempreature": 1}),
            json.dumps({"id": 7, "prompt_token_ids": [3, 4, 5], "temperature": 1.0, "seed": 9, "max_tokens": 6,
                        "logprobs": 0}),
        ]
        out = self.jsonl(lines)
        self.assertEqual([o["index"] for o in out], [0, 1, 2, 3, 4])
        self.assertEqual([o["finish_reason"] for o in out][1:4], ["rejected"] * 3)
        self.assertIn(":2: not JSON", out[1]["message"])
        self.assertIn("params.top_k", out[2]["message"])
        self.assertIn("tempreature: unknown field", out[3]["message"])
        self.assertEqual(out[0]["id"], "g")
        # The greedy line equals the single-prompt run.
        single = run("--prompt-ids", "0,10,20", "--max-tokens", "5")
        self.assertEqual(single.stdout.strip(), ",".join(map(str, out[0]["token_ids"])))
        # The seeded line alone gives the same tokens and bitwise the same logprobs.
        alone = self.jsonl([lines[4]])
        self.assertEqual(alone[0]["token_ids"], out[4]["token_ids"])
        self.assertEqual([x["logprob"] for x in alone[0]["logprobs"]], [x["logprob"] for x in out[4]["logprobs"]])

    def test_flags_give_defaults(self):
        out = self.jsonl([json.dumps({"prompt_token_ids": [0, 10]})], "--temperature", "0.9", "--seed", "3",
                         "--max-tokens", "4", "--top-p", "0.8")
        again = run("--prompt-ids", "0,10", "--temperature", "0.9", "--seed", "3", "--max-tokens", "4",
                    "--top-p", "0.8")
        self.assertEqual(again.stdout.strip(), ",".join(map(str, out[0]["token_ids"])))

    def test_bad_flags_are_errors(self):
        r = run("--prompt-ids", "0,x")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--prompt-ids", r.stderr)
        r = run("--prompt-ids", "0,1", "--top-p", "2")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("params.top_p", r.stderr)


if __name__ == "__main__":
    unittest.main()
