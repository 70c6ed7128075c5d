#!/usr/bin/env python3
"""How often V4.1's token-side fold would be exact (bench/gpu/NOTES.md "Session 37", status item 6).

At activation block 32 the grouped MXFP4 prefill promotes each 32-wide K block's partial with the token's scale
(one FFMA per accumulator element per 32 K). The fold would re-express a token's four 32-blocks of a 128-wide K tile
at the largest of their e8m0 scales, S = max s_j: code_j * 2^(s_j - S) in e4m3, exact when every shifted code is an
e4m3 value, so that the tile is promoted once, as at act block 128. This counts the (token, 128-tile) pairs where that
holds, for activations quantized as the engine's FP8 quantizer does (e8m0 scale 2^ceil(log2(amax / 448)), e4m3
round to nearest), on synthetic inputs: no real V4.1 activations are available here.
  usage: python3 tools/gpu/act32_fold_rate.py [--tokens 256] [--k 2048] [--seed 1]
"""
import argparse

import numpy as np


def e4m3_values():
    """Every finite e4m3 (fn) value, sorted: subnormals m/8 * 2^-6, normals (1 + m/8) * 2^(e - 7), max 448."""
    vals = set()
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:  # NaN
                continue
            v = (m / 8) * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
            vals.update((v, -v))
    return np.array(sorted(vals))


E4M3 = e4m3_values()


def to_e4m3(x):
    """Nearest e4m3 value (ties to the lower one: rare, and irrelevant to a rate)."""
    idx = np.clip(np.searchsorted(E4M3, x), 1, len(E4M3) - 1)
    lo, hi = E4M3[idx - 1], E4M3[idx]
    return np.where(np.abs(x - lo) <= np.abs(hi - x), lo, hi)


def fold_rate(x):
    """(exact fold rate, rate of tiles whose four scales are equal) over x's (token, 128-tile) pairs."""
    tokens, k = x.shape
    blocks = x.reshape(tokens, k // 32, 32)
    amax = np.abs(blocks).max(-1)
    s = np.ceil(np.log2(np.maximum(amax, 1e-30) / 448.0))
    codes = to_e4m3(blocks / 2.0 ** s[..., None])
    s_tile = s.reshape(tokens, k // 128, 4)
    codes_tile = codes.reshape(tokens, k // 128, 4, 32)
    top = s_tile.max(-1, keepdims=True)
    shifted = codes_tile * 2.0 ** (s_tile - top)[..., None]
    exact = np.isin(shifted, E4M3).all(axis=(-1, -2))
    return exact.mean(), (s_tile == top).all(-1).mean()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.k % 128:
        ap.error("--k must be a multiple of 128")
    rng = np.random.default_rng(a.seed)
    shape = (a.tokens, a.k)
    gate, up = rng.standard_normal(shape), rng.standard_normal(shape)
    inputs = {
        "gaussian": rng.standard_normal(shape),
        "gaussian, channel spread": rng.standard_normal(shape) * np.exp(0.5 * rng.standard_normal(a.k)),
        "swiglu of gaussians (w2 input)": gate / (1 + np.exp(-gate)) * up,
    }
    tiles_per_chunk = 128
    for name, x in inputs.items():
        exact, equal = fold_rate(x)
        print(f"{name:32} exact fold {100 * exact:5.1f} % of (token, 128-tile) pairs, all four scales equal "
              f"{100 * equal:5.1f} %; a {tiles_per_chunk}-token chunk's tile all exact: {100 * exact**tiles_per_chunk:.3g} %")


if __name__ == "__main__":
    main()
