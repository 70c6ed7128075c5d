#!/usr/bin/env python3
"""How often V4.1's per-32 activation scales could be folded into one scale per 128-wide K tile, exactly.

Why: the grouped MXFP4 prefill GEMM (src/layers/moe/mxfp4_prefill.cu) promotes its FP8 wgmma partials once per
128 K at activation block 128 (V4) but once per 32 K at block 32 (V4.1), and that promotion caps V4.1 near half the
FP8 rate (bench/gpu/NOTES.md "Grouped MXFP4 prefill, next version"; docs/status.md issue 4, "Next session" item 6).
A token's four 32-blocks of a tile could be re-expressed at the largest of their ue8m0 scales (codes shifted down by
d = S - s_j binades) when every shifted e4m3 code stays representable; a tile of the swapped kernel (one 128-row
weight slice x up to 192 tokens of one expert) could then use the per-128 loop only if all of its tokens fold.

What it measures, per activation source: the share of (token, tile) pairs that do not fold, the share of tokens with
at least one such tile, the e4m3 codes that would lose bits per token, and the probability that a 192-token item
tile is clean. Quantization follows model-spec §2 (block 32 along K, scale 2^ceil(log2(max(amax, 1e-4) / 448)),
codes e4m3 round-to-nearest-even); e4m3 is computed here from its definition (3 mantissa bits, smallest normal 2^-6,
subnormal step 2^-9, largest finite 448), not from the engine's code.

usage: bench/gpu/act32_fold_stats.py [--tokens T] [--k K] [--seed S] [--npy ACTIVATIONS.npy ...]
  Without --npy: synthetic sources (Gaussian, Gaussian with outlier channels, Student-t, SwiGLU products).
  With --npy: each file is a [tokens, K] float array of real GEMM inputs (e.g. dumped from a checkpoint's prefill).
"""
import argparse

import numpy as np


def e4m3(v):
    """v rounded to the nearest e4m3 (fn) value, ties to even, saturating at 448."""
    a = np.abs(v)
    e = np.maximum(np.floor(np.log2(np.where(a > 0, a, 1.0))), -6.0)
    quantum = 2.0 ** (e - 3)
    r = np.minimum(np.rint(a / quantum) * quantum, 448.0)
    return np.sign(v) * np.where(a > 0, r, 0.0)


def quantize_block32(x):
    """(codes [T, K / 32, 32], scale exponents [T, K / 32]) of model-spec §2's activation quantization."""
    t, k = x.shape
    blocks = x.reshape(t, k // 32, 32)
    amax = np.maximum(np.abs(blocks).max(-1), 1e-4)
    s = np.ceil(np.log2(amax / 448.0))
    return e4m3(blocks / (2.0 ** s)[..., None]), s


def fold_stats(x, item_tokens):
    codes, s = quantize_block32(np.asarray(x, dtype=np.float64))
    t, nb, _ = codes.shape
    tiles = nb // 4
    c = codes[:, : tiles * 4].reshape(t, tiles, 4, 32)
    st = s[:, : tiles * 4].reshape(t, tiles, 4)
    d = st.max(-1, keepdims=True) - st
    shifted = c * (2.0 ** -d)[..., None]
    lost = e4m3(shifted) != shifted  # a code that the shift moves off the e4m3 grid
    pair_bad = lost.reshape(t, tiles, -1).any(-1)
    p_pair = pair_bad.mean()
    return {
        "pairs": p_pair,
        "tokens": pair_bad.any(-1).mean(),
        "lost_per_token": lost.sum() / t,
        "item_clean": (1.0 - p_pair) ** item_tokens,
        "shifted_blocks": (d > 0).mean(),
    }


def synthetic(tokens, k, rng):
    g = rng.standard_normal((tokens, k))
    outliers = np.ones(k)
    outliers[rng.choice(k, k // 100, replace=False)] = 20.0
    gate, up = rng.standard_normal((tokens, k)), rng.standard_normal((tokens, k))
    return {
        "Gaussian": g,
        "Gaussian, 1 % of channels x20": g * outliers,
        "Student-t, 3 degrees of freedom": rng.standard_t(3, (tokens, k)),
        "SwiGLU product silu(g) * u (w2's input)": gate / (1.0 + np.exp(-gate)) * up,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--item-tokens", type=int, default=192, help="tokens of one item tile (v9's chunk: 192)")
    ap.add_argument("--npy", nargs="*", default=[])
    a = ap.parse_args()
    if a.k % 128:
        ap.error("--k must be a multiple of 128")
    sources = {p: np.load(p) for p in a.npy} if a.npy else synthetic(a.tokens, a.k, np.random.default_rng(a.seed))
    if not a.npy:
        print(f"tokens {a.tokens}, K {a.k}, item tile {a.item_tokens} tokens, seed {a.seed}")
    print("| activations | (token, tile) pairs that do not fold | tokens with such a tile | codes losing bits "
          f"per token | {a.item_tokens}-token item tiles clean | 32-blocks shifted |")
    print("|---|---|---|---|---|---|")
    for name, x in sources.items():
        r = fold_stats(x, a.item_tokens)
        print(f"| {name} | {100 * r['pairs']:.2f} % | {100 * r['tokens']:.1f} % | {r['lost_per_token']:.2f} | "
              f"{100 * r['item_clean']:.1f} % | {100 * r['shifted_blocks']:.0f} % |")


if __name__ == "__main__":
    main()
