"""fusedcoll.encode / decode (the C++ codecs, through the torch operators) against the NumPy
codecs of fusedcoll.codecs, written independently from docs/compression.md (ctest
torch_codecs): every FP8 and 16-bit code decodes to the same bits; >= 10^5 float32 patterns of
every class encode to the same code, saturating and IEEE, scaled and not."""

import os
import sys
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fusedcoll  # noqa: E402
from fusedcoll import codecs  # noqa: E402

CODE_TYPES = {"f16": (np.uint16, torch.float16), "bf16": (np.uint16, torch.bfloat16),
              "fp8_e4m3": (np.uint8, torch.uint8), "fp8_e5m2": (np.uint8, torch.uint8)}


def payload_tensor(codes, fmt):
    """A numpy code array as the torch payload dtype of `fmt` (same bits)."""
    _, torch_type = CODE_TYPES[fmt]
    if torch_type == torch.uint8:
        return torch.from_numpy(codes.copy())
    return torch.from_numpy(codes.view(np.int16).copy()).view(torch_type)


def codes_of(payload):
    """The payload's bits as a numpy array of unsigned codes."""
    if payload.dtype == torch.uint8:
        return payload.numpy()
    return payload.view(torch.int16).numpy().view(np.uint16)


def f32_patterns(count, seed):
    """Float32 bit patterns covering every class: random bits (all exponents, NaNs, infinities,
    subnormals), values near every format's rounding boundaries and overflow thresholds, and
    signed zeros."""
    rng = np.random.default_rng(seed)
    random_bits = rng.integers(0, 2 ** 32, size=count, dtype=np.uint64).astype(np.uint32)
    # Magnitudes spread over the narrow formats' ranges, where the rounding is interesting.
    exps = rng.integers(-30, 18, size=count)
    mant = rng.random(count) + 1.0
    ranged = (np.ldexp(mant, exps) * rng.choice([-1.0, 1.0], size=count)).astype(np.float32)
    # Exact ties and their neighbours: k + 1/2 quanta of every grid, +-1 ulp.
    ties = []
    for m_bits in (10, 7, 3, 2):
        for e in range(-26, 17):
            for k in range(0, 1 << m_bits, max(1, (1 << m_bits) // 16)):
                ties.append(np.ldexp(1.0 + (k + 0.5) / (1 << m_bits), e))
    ties = np.array(ties, dtype=np.float32)
    near = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)),
                           np.nextafter(ties, np.float32(0))])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 448, 464,
                        464.01, 480, 57344, 61439.99, 61440, 3.3895e38, 3.4e38, 1e-45, -1e-45,
                        2 ** -24, 2 ** -25, 2 ** -9, 2 ** -10, 2 ** -16, 2 ** -17, 2 ** -133,
                        2 ** -134], dtype=np.float32)
    nan_payloads = (np.uint32(0x7F800000) | rng.integers(1, 1 << 23, size=2000,
                                                         dtype=np.uint64).astype(np.uint32))
    nans = np.concatenate([nan_payloads, nan_payloads | np.uint32(0x80000000)]).view(np.float32)
    return np.concatenate([random_bits.view(np.float32), ranged, near, -near, special, nans])


class Codecs(unittest.TestCase):
    def assert_same_codes(self, got, expected, what, inputs=None):
        if not np.array_equal(got, expected):
            bad = np.nonzero(got != expected)[0][:5]
            detail = ", ".join(
                f"[{i}] in={inputs.view(np.uint32)[i]:#010x} got={got[i]:#x} expected={expected[i]:#x}"
                if inputs is not None else f"[{i}] got={got[i]:#x} expected={expected[i]:#x}"
                for i in bad)
            self.fail(f"{what}: {np.count_nonzero(got != expected)} codes differ: {detail}")

    def test_every_code_decodes_to_the_same_bits(self):
        for fmt, (code_type, _) in CODE_TYPES.items():
            with self.subTest(format=fmt):
                codes = np.arange(1 << (8 * np.dtype(code_type).itemsize), dtype=np.int64)
                codes = codes.astype(code_type)
                got = fusedcoll.decode(payload_tensor(codes, fmt), fmt).numpy().view(np.uint32)
                expected = codecs.decode(codes, fmt).view(np.uint32)
                self.assert_same_codes(got, expected, f"decode {fmt}")
                for scale in (2.0 ** 7, 3.0):
                    got = fusedcoll.decode(payload_tensor(codes, fmt), fmt, scale=scale)
                    expected = codecs.decode_scaled(codes, fmt, scale)
                    self.assert_same_codes(got.numpy().view(np.uint32),
                                           expected.view(np.uint32), f"decode {fmt} / {scale}")

    def test_float32_patterns_encode_to_the_same_codes(self):
        x = f32_patterns(120_000, seed=5)
        self.assertGreaterEqual(x.size, 100_000)
        for fmt in CODE_TYPES:
            for overflow in ("saturate", "ieee"):
                with self.subTest(format=fmt, overflow=overflow):
                    got = codes_of(fusedcoll.encode(torch.from_numpy(x), fmt, overflow=overflow))
                    expected = codecs.encode(x, fmt, overflow)
                    self.assert_same_codes(got, expected, f"encode {fmt} {overflow}", x)

    def test_scaled_encoding(self):
        x = f32_patterns(20_000, seed=6)
        x = x[np.isfinite(x)]
        for fmt in ("fp8_e4m3", "fp8_e5m2", "f16"):
            for scale in (2.0 ** -20, 0.7, 2.0 ** 12):
                with self.subTest(format=fmt, scale=scale):
                    got = codes_of(fusedcoll.encode(torch.from_numpy(x), fmt, scale=scale))
                    self.assert_same_codes(got, codecs.encode_scaled(x, fmt, scale),
                                           f"encode {fmt} x {scale}", x)

    def test_scale_for(self):
        for fmt in CODE_TYPES:
            for amax in (0.0, 1e-30, 3e-3, 1.0, 447.9, 1e30):
                for headroom in (1.0, 3.0):
                    for pow2 in (False, True):
                        self.assertEqual(fusedcoll.scale_for(fmt, amax, headroom, pow2),
                                         codecs.scale_for(fmt, amax, headroom, pow2),
                                         (fmt, amax, headroom, pow2))
        with self.assertRaises(fusedcoll.InvalidArgument):
            fusedcoll.scale_for("fp8_e4m3", float("nan"))

    def test_payload_dtypes_and_round_trip(self):
        x = torch.linspace(-3, 3, 101)
        mantissa_bits = {"f16": 10, "bf16": 7, "fp8_e4m3": 3, "fp8_e5m2": 2}
        for fmt, (_, torch_type) in CODE_TYPES.items():
            payload = fusedcoll.encode(x, fmt)
            self.assertEqual(payload.dtype, torch_type)
            self.assertEqual(payload.shape, x.shape)
            back = fusedcoll.decode(payload, fmt)
            # Round to nearest: within half a unit in the last place, relative to |x|.
            bound = x.abs() * 2.0 ** -(mantissa_bits[fmt] + 1) + 2.0 ** -9
            self.assertTrue(bool(((back - x).abs() <= bound).all()), fmt)
        self.assertTrue(torch.equal(fusedcoll.decode(fusedcoll.encode(x, "none"), "none"), x))
        # f16 through torch's own IEEE conversion gives the same bits for in-range values.
        self.assertTrue(torch.equal(fusedcoll.encode(x, "f16").view(torch.int16),
                                    x.half().view(torch.int16)))

    def test_codec_errors(self):
        with self.assertRaises(TypeError):
            fusedcoll.encode(torch.ones(3, dtype=torch.float64), "f16")
        with self.assertRaises(TypeError):
            fusedcoll.decode(torch.ones(3), "fp8_e4m3")
        with self.assertRaises(ValueError):
            fusedcoll.encode(torch.ones(3), "fp8")
        with self.assertRaises(ValueError):
            fusedcoll.encode(torch.ones(3), "fp8_e4m3", scale=-1.0)
        with self.assertRaises(ValueError):
            fusedcoll.encode(torch.ones(4, 2).t(), "f16")

    def test_block_amax(self):
        x = torch.tensor([1.0, -5.0, 2.0, 0.5, -0.25])
        self.assertTrue(torch.equal(fusedcoll.block_amax(x, 2), torch.tensor([5.0, 2.0, 0.25])))
        self.assertTrue(torch.equal(fusedcoll.block_amax(x), torch.tensor([5.0])))


if __name__ == "__main__":
    unittest.main()
