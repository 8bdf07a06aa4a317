"""``exp``, ``expm1``, ``log`` and ``power`` whose results are the same on every CPU.

numpy's vectorised transcendental functions differ in the last bit or two between CPUs (AVX2,
AVX-512, ARM): each is accurate to a few units in the last place, not correctly rounded. These
wrappers call numpy's function, then round each result to ``BITS`` significant bits. Only a
result within ``SLACK_ULP`` of a midpoint between two such values could round either way on
another machine: that one is computed again in ``decimal`` (integer arithmetic, the same
everywhere) and rounded from there. So every machine gets the exact value rounded to ``BITS``
bits, always, not almost always; the float arithmetic that follows (+, -, *, /, sqrt) is
IEEE-exact, hence the same everywhere too. ``docs/model.md`` ("Results that do not depend on
the CPU") says why and what it costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

Array = np.ndarray[Any, Any]

#: Significant bits kept (float32's precision): a relative step of 2^-24, about 6e-8. A float64
#: has 53: rounding clears the low ``DROPPED`` bits of its bit pattern, rounding half up (in
#: magnitude; a carry moves into the exponent, as it should).
BITS = 24
DROPPED = 53 - BITS
_LOW = np.uint64(2**DROPPED - 1)
_HALF = np.uint64(2 ** (DROPPED - 1))
_KEEP = ~_LOW
#: A bound on |numpy's result - exact value|, in units in the last place of the result: 256
#: ULP, where numpy's vectorised float64 functions are within a few. A result this close to a
#: midpoint (one in 2^20) takes the exact path.
SLACK_ULP = 2**8
_NEAR_FROM = np.uint64(2 ** (DROPPED - 1) - SLACK_ULP)
_NEAR_WIDTH = np.uint64(2 * SLACK_ULP)
#: Digits of the exact path: its error (1e-40 relative) is far below 2^-24.
EXACT = Context(prec=40, rounding=ROUND_HALF_UP)


#: Elements rounded per block: the scratch of the midpoint test stays in the cache, and a large
#: matrix costs no second allocation.
_BLOCK = 2**15


def _rounded(values: Array, exact: Callable[[int], Decimal]) -> Array:
    """``values`` (a fresh C-ordered float64 result, finite and normal or 0) rounded in place to
    ``BITS`` significant bits, each as its exact value would round: ``exact(i)`` is the exact
    value of flat element ``i``, asked for only where ``values`` lies near a midpoint. NaN and
    infinities are kept."""
    bits = values.reshape(-1).view(np.uint64)
    scratch = np.empty(min(bits.size, _BLOCK), dtype=np.uint64)
    near = []
    for first in range(0, bits.size, _BLOCK):
        block = bits[first:first + _BLOCK]
        low = np.subtract(block, _NEAR_FROM, out=scratch[:block.size])
        low &= _LOW
        if (hits := np.flatnonzero(low < _NEAR_WIDTH)).size:
            near += (hits + first).tolist()
        block += _HALF
        block &= _KEEP
    if near:
        out = bits.view(np.float64)
        with localcontext(EXACT):
            for i in near:
                out[i] = _exactly_rounded(exact(i))
    return values


def _exactly_rounded(value: Decimal) -> float:
    """``value`` rounded half up (in magnitude) to ``BITS`` significant bits."""
    if value.is_zero():
        return 0.0
    exponent = math.frexp(float(value))[1] - 1  # 2^exponent <= |value|, unless float() rounded up
    mantissa = abs(value) / Decimal(2) ** exponent
    if mantissa < 1:
        exponent, mantissa = exponent - 1, mantissa * 2
    steps = int((mantissa * 2 ** (BITS - 1)).to_integral_value())
    return math.copysign(math.ldexp(steps, exponent - BITS + 1), value)


def exp(x: ArrayLike) -> Array:
    x = np.asarray(x, dtype=float)
    return _rounded(np.exp(x, out=np.empty(x.shape)), lambda i: Decimal(x.flat[i].item()).exp())


def expm1(x: ArrayLike) -> Array:
    x = np.asarray(x, dtype=float)
    return _rounded(np.expm1(x, out=np.empty(x.shape)), lambda i: _expm1_exact(Decimal(x.flat[i].item())))


def _expm1_exact(x: Decimal) -> Decimal:
    if abs(x) < Decimal("1e-5"):  # e^x - 1 would cancel: four terms of the series (error x^5/120)
        return x + x * x / 2 + x**3 / 6 + x**4 / 24
    return x.exp() - 1


def log(x: ArrayLike) -> Array:
    x = np.asarray(x, dtype=float)
    return _rounded(np.log(x, out=np.empty(x.shape)), lambda i: Decimal(x.flat[i].item()).ln())


def power(x: ArrayLike, y: float) -> Array:
    """``x ** y`` for ``x >= 0``."""
    x = np.asarray(x, dtype=float)
    return _rounded(np.power(x, y, out=np.empty(x.shape)), lambda i: Decimal(x.flat[i].item()) ** Decimal(y))
