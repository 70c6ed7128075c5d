"""bench/gpu/act32_fold_stats.py's arithmetic against e4m3's definition: every finite e4m3 (fn) value, built from
its bit fields (sign, 4 exponent bits with bias 7, 3 mantissa bits; exponent field 0 = subnormals of step 2^-9;
S.1111.111 is NaN), rounds to itself; the midpoint between two neighbours rounds to the one with the even mantissa;
and the fold count flags exactly the tiles built to lose a bit."""
import importlib.util
import os
import unittest

import numpy as np

SCRIPT = os.path.join(os.environ.get("DEEPINFER_SOURCE_DIR", "."), "bench/gpu/act32_fold_stats.py")
spec = importlib.util.spec_from_file_location("act32_fold_stats", SCRIPT)
fold = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fold)


def e4m3_values():
    """The 126 positive finite e4m3 (fn) values in increasing order, and whether each one's mantissa is even."""
    values, even = [], []
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:
                continue  # NaN
            if e == 0 and m == 0:
                continue  # zero
            values.append(m * 2.0**-9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
            even.append(m % 2 == 0)
    return np.array(values), np.array(even)


class E4m3Rounding(unittest.TestCase):
    def test_every_value_is_a_fixed_point(self):
        v, _ = e4m3_values()
        self.assertEqual(v[-1], 448.0)
        np.testing.assert_array_equal(fold.e4m3(v), v)
        np.testing.assert_array_equal(fold.e4m3(-v), -v)

    def test_midpoints_round_to_even(self):
        v, even = e4m3_values()
        mid = (v[:-1] + v[1:]) / 2
        want = np.where(even[:-1], v[:-1], v[1:])
        np.testing.assert_array_equal(fold.e4m3(mid), want)

    def test_saturates_at_448(self):
        self.assertEqual(fold.e4m3(np.array([1000.0]))[0], 448.0)


class FoldCount(unittest.TestCase):
    def test_a_shift_that_loses_a_bit_is_flagged(self):
        # One token, K 256 = two tiles. Tile 0: blocks 0-3 with amax 448 * 2^0 and 448 * 2^-1 (d = 1 for blocks 1-3),
        # block 1 holding 2^-6 * 2^-1 * 9/8: its code 9/8 * 2^-6 (a normal) shifted by one binade needs 4 bits of a
        # subnormal of step 2^-9 -> not exact. Tile 1: all four blocks at one scale -> nothing to shift.
        x = np.zeros((1, 256))
        x[0, 0] = 448.0
        for b in (1, 2, 3):
            x[0, 32 * b] = 224.0
        x[0, 33] = 9 / 8 * 2.0**-6 * 0.5
        x[0, 128:256] = 1.0
        r = fold.fold_stats(x, item_tokens=1)
        self.assertEqual(r["pairs"], 0.5)
        self.assertEqual(r["lost_per_token"], 1)
        self.assertEqual(r["tokens"], 1.0)

    def test_a_shift_that_keeps_every_bit_is_not_flagged(self):
        x = np.zeros((1, 128))
        x[0, 0] = 448.0
        for b in (1, 2, 3):
            x[0, 32 * b] = 224.0
        x[0, 33] = 1.5  # code 1.5, shifted to 0.75: a normal e4m3
        r = fold.fold_stats(x, item_tokens=1)
        self.assertEqual(r["pairs"], 0.0)
        self.assertEqual(r["shifted_blocks"], 0.75)


if __name__ == "__main__":
    unittest.main()
