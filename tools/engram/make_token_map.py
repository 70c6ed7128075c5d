#!/usr/bin/env python3
"""Compute the Engram token map of a DeepSeek-V4.1 tokenizer (model-spec.md §4 "Engram").

Engram hashes n-grams of *compressed* token ids: tokens whose decoded text normalizes to the same key
share one id. The normalization is NFKC, NFD, strip accents, lowercase, runs of [ \\t\\r\\n] collapsed to one
space, then stripped, except that a token that is exactly one space keeps it. A token whose decoding is
not valid UTF-8 on its own (it contains U+FFFD) is keyed by its vocabulary string instead. Ids are assigned
in order of first appearance over the vocabulary.

The engine reads the result from `engram_token_map.json` next to the checkpoint:
  {"compressed_vocab_size": N, "token_map": [class id per token id]}
For the real model N must equal text_config.engram_compressed_vocab_size (99,092).

Usage: make_token_map.py TOKENIZER_JSON OUT_JSON [--expect-classes N]
"""
import argparse
import json
import sys

from tokenizers import Regex, Tokenizer, normalizers

_LONE_SPACE = "\ue000"  # private-use placeholder that survives Strip()


def engram_normalizer() -> normalizers.Normalizer:
    return normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.NFD(),
        normalizers.StripAccents(),
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), _LONE_SPACE),
        normalizers.Strip(),
        normalizers.Replace(_LONE_SPACE, " "),
    ])


def token_key(tok: Tokenizer, norm: normalizers.Normalizer, token_id: int) -> str:
    text = tok.decode([token_id], skip_special_tokens=False)
    if "\ufffd" in text:
        return tok.id_to_token(token_id)
    normalized = norm.normalize_str(text)
    return normalized or text


def compute_token_map(tokenizer_json: str) -> tuple[list[int], int]:
    tok = Tokenizer.from_file(tokenizer_json)
    norm = engram_normalizer()
    class_of_key: dict[str, int] = {}
    token_map = []
    for token_id in range(tok.get_vocab_size(with_added_tokens=True)):
        key = token_key(tok, norm, token_id)
        token_map.append(class_of_key.setdefault(key, len(class_of_key)))
    return token_map, len(class_of_key)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizer_json")
    ap.add_argument("out_json")
    ap.add_argument("--expect-classes", type=int, help="fail unless the class count equals this")
    args = ap.parse_args()
    token_map, classes = compute_token_map(args.tokenizer_json)
    if args.expect_classes is not None and classes != args.expect_classes:
        print(f"error: {classes} classes, expected {args.expect_classes}", file=sys.stderr)
        return 1
    with open(args.out_json, "w") as f:
        json.dump({"compressed_vocab_size": classes, "token_map": token_map}, f, separators=(",", ":"))
    print(f"{args.out_json}: {len(token_map)} tokens -> {classes} classes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
