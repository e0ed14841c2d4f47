"""The wire codecs in NumPy: float32 <-> f16, bf16, FP8 E4M3 and E5M2, written from the
definitions of docs/compression.md and nothing else.

This is the course lab's step 3 ("implement float8 and float16 compression and decompression
with NumPy"), done with real formats: round to nearest, ties to even; subnormals; saturating or
IEEE overflow; NaN rules. It shares no code with fusedcoll's C++ codecs, which is what makes it
their test oracle (python/tests: every FP8 and 16-bit code, and >= 10^5 float32 patterns, bit for
bit). It is slow; training uses ``fusedcoll.encode`` / ``decode``.

Rounding is done in float64: every float32 value and every point of the narrower grids is a
dyadic rational that float64 holds exactly, so ``rint(a / q) * q`` with ``q`` the grid's quantum
(a power of two) is exact, and ``rint`` rounds half to even.
"""

from collections import namedtuple

import numpy as np

__all__ = ["FORMATS", "encode", "decode", "encode_scaled", "decode_scaled", "scale_for",
           "max_finite"]

_Spec = namedtuple("_Spec", "exp_bits man_bits bias has_inf bits")
_SPECS = {
    "f16": _Spec(5, 10, 15, True, 16),
    "bf16": _Spec(8, 7, 127, True, 16),
    "fp8_e4m3": _Spec(4, 3, 7, False, 8),
    "fp8_e5m2": _Spec(5, 2, 15, True, 8),
}
FORMATS = tuple(_SPECS)


def _spec(fmt):
    try:
        return _SPECS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}") from None


def max_finite(fmt):
    """Largest finite value: E4M3 has no infinity and gives its top code S.1111.111 to NaN,
    so its largest is S.1111.110 = 448; the others end one binade below infinity."""
    s = _spec(fmt)
    if fmt == "fp8_e4m3":
        return (1 + 6 / 8) * 2.0 ** (15 - s.bias)
    return (2 - 2.0 ** -s.man_bits) * 2.0 ** ((1 << s.exp_bits) - 2 - s.bias)


def _code_dtype(s):
    return np.uint16 if s.bits == 16 else np.uint8


def encode(x, fmt, overflow="saturate"):
    """float32 array -> codes (uint16 for f16/bf16, uint8 for FP8)."""
    s = _spec(fmt)
    if overflow not in ("saturate", "ieee"):
        raise ValueError(f"overflow must be 'saturate' or 'ieee', got {overflow!r}")
    saturate = overflow == "saturate"
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.int64)
    sign = (bits >> 31) << (s.bits - 1)
    a = np.abs(x.astype(np.float64))
    finite = np.isfinite(a)
    a_fin = np.where(finite, a, 0.0)

    emin = 1 - s.bias  # exponent of the smallest normal
    _, e = np.frexp(a_fin)  # a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1
    e = np.maximum(e.astype(np.int64) - 1, emin)  # below the normals, the subnormal quantum
    q = np.ldexp(1.0, e - s.man_bits)
    v = np.rint(a_fin / q) * q

    too_big = finite & (v > max_finite(fmt))
    v = np.where(too_big, 0.0, v)
    _, ev = np.frexp(v)
    ev = ev.astype(np.int64) - 1
    normal = v >= 2.0 ** emin
    exp_field = np.where(normal, ev + s.bias, 0)
    frac = np.where(normal, np.ldexp(v, -ev) - 1.0, np.ldexp(v, -emin))
    mant = np.rint(np.ldexp(frac, s.man_bits)).astype(np.int64)
    code = (exp_field << s.man_bits) | mant

    all_ones = (1 << s.exp_bits) - 1
    inf_code = all_ones << s.man_bits
    if fmt == "fp8_e4m3":
        max_code, nan_code = 0x7E, 0x7F
    else:
        max_code, nan_code = inf_code - 1, None
    overflow_code = max_code if saturate else (inf_code if s.has_inf else 0x7F)
    code = np.where(too_big, overflow_code, code)

    is_inf = np.isinf(x)
    code = np.where(is_inf, inf_code if s.has_inf else (max_code if saturate else 0x7F), code)

    is_nan = np.isnan(x)
    if fmt == "f16":
        nan = 0x7E00 | ((bits >> 13) & 0x1FF)  # quiet, the top 9 payload bits
    elif fmt == "bf16":
        nan = (bits >> 16) & 0x7FFF | 0x40  # quiet; the sign is added below
    elif fmt == "fp8_e5m2":
        nan = 0x7E | ((bits >> 21) & 1)  # quiet, the top payload bit
    else:
        nan = nan_code
    code = np.where(is_nan, nan, code)
    return (sign | code).astype(_code_dtype(s))


def decode(codes, fmt):
    """Codes -> float32 (exact: every code is a float32 value)."""
    s = _spec(fmt)
    c = np.ascontiguousarray(codes).astype(np.int64) & ((1 << s.bits) - 1)
    negative = (c >> (s.bits - 1)) & 1
    e = (c >> s.man_bits) & ((1 << s.exp_bits) - 1)
    m = c & ((1 << s.man_bits) - 1)
    emin = 1 - s.bias
    magnitude = np.where(e == 0, np.ldexp(m.astype(np.float64), emin - s.man_bits),
                         np.ldexp(1.0 + np.ldexp(m.astype(np.float64), -s.man_bits),
                                  e - s.bias))
    value = np.where(negative == 1, -magnitude, magnitude).astype(np.float32)
    bits = value.view(np.uint32).astype(np.int64)

    sign32 = negative << 31
    all_ones = (1 << s.exp_bits) - 1
    if fmt == "fp8_e4m3":
        nan = (e == all_ones) & (m == 7)
        bits = np.where(nan, sign32 | 0x7FC00000, bits)
    elif fmt == "bf16":
        special = e == all_ones
        bits = np.where(special, c << 16, bits)  # inf and NaN keep their bits
    else:
        special = e == all_ones
        shift = 23 - s.man_bits
        nan_bits = sign32 | 0x7F800000 | 0x400000 | (m << shift)  # quiet, payload kept
        inf_bits = sign32 | 0x7F800000
        bits = np.where(special, np.where(m == 0, inf_bits, nan_bits), bits)
    return bits.astype(np.uint32).view(np.float32)


def encode_scaled(x, fmt, scale, overflow="saturate"):
    """``encode(x * scale)``, the product rounded to float32 first."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return encode((x * np.float32(scale)).astype(np.float32), fmt, overflow)


def decode_scaled(codes, fmt, scale):
    """``decode(codes) / scale`` in float32."""
    return (decode(codes, fmt) / np.float32(scale)).astype(np.float32)


def scale_for(fmt, amax, headroom=1.0, pow2=False):
    """``max_finite(fmt) / (amax * headroom)`` computed in float64; with ``pow2`` rounded down to
    a power of two; clamped to [2^-126, 2^127]; then rounded to float32. 1 for ``amax == 0``."""
    amax, headroom = float(np.float32(amax)), float(np.float32(headroom))
    if not np.isfinite(amax) or amax < 0:
        raise ValueError(f"cannot scale for amax {amax}")
    if amax == 0:
        return 1.0
    s = max_finite(fmt) / (amax * headroom)
    if pow2:
        _, e = np.frexp(s)
        s = float(np.ldexp(1.0, int(e) - 1))
    return float(np.float32(min(max(s, 2.0 ** -126), 2.0 ** 127)))
