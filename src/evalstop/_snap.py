"""``exp``, ``expm1``, ``log`` and ``power`` whose results are the same on every CPU.

numpy's vectorised transcendental functions differ in the last bit or two between CPUs (AVX2,
AVX-512, ARM): each is accurate to a few units in the last place, not correctly rounded. These
wrappers call numpy's function, then round each result to ``BITS`` significant bits. Only a
result within ``SLACK`` of a midpoint between two such values could round either way on
another machine: that one is computed again in ``decimal`` (integer arithmetic, the same
everywhere) and rounded from there. So every machine gets the exact value rounded to ``BITS``
bits, always, not almost always; the float arithmetic that follows (+, -, *, /, sqrt) is
IEEE-exact, hence the same everywhere too. ``docs/model.md`` ("Results that do not depend on
the CPU") says why and what it costs.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, Context, Decimal, localcontext
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

Array = np.ndarray[Any, Any]

#: Significant bits kept (float32's precision): a relative step of 2^-24, about 6e-8.
BITS = 24
#: A bound on |numpy's result - exact value| / |exact value|: 2^-40 is 4096 units in the last
#: place, against numpy's <= 4 ULP for its vectorised float64 functions. A result this close to
#: a midpoint (a fraction 2^-15 of them) takes the exact path.
SLACK = 2.0**-40
#: Digits of the exact path: its error (1e-40 relative) is far below 2^-24.
EXACT = Context(prec=40, rounding=ROUND_HALF_EVEN)


def _rounded(values: Array, exact: Callable[[int], Decimal]) -> Array:
    """``values`` rounded to ``BITS`` significant bits, each as its exact value would round:
    ``exact(i)`` is the exact value of flat element ``i``, asked for only near a midpoint.
    NaN and infinities are kept."""
    mantissa, exponent = np.frexp(values)  # values = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    flat, powers = mantissa.reshape(-1), exponent.reshape(-1)
    scaled = flat * 2.0**BITS
    grid = np.rint(scaled)
    with np.errstate(invalid="ignore"):  # inf - inf
        distance = np.abs(np.subtract(scaled, grid, out=scaled), out=scaled)
    near = np.flatnonzero(distance > 0.5 - SLACK * 2.0**BITS)
    if near.size:
        with localcontext(EXACT):
            for i in near.tolist():
                shift = Decimal(2) ** (BITS - int(powers[i]))
                grid[i] = float((exact(i) * shift).to_integral_value())
    grid *= 2.0**-BITS
    return np.ldexp(grid, powers).reshape(np.shape(values))


def exp(x: ArrayLike) -> Array:
    x = np.asarray(x, dtype=float)
    return _rounded(np.exp(x), lambda i: Decimal(x.flat[i].item()).exp())


def expm1(x: ArrayLike) -> Array:
    x = np.asarray(x, dtype=float)
    return _rounded(np.expm1(x), lambda i: _expm1_exact(Decimal(x.flat[i].item())))


def _expm1_exact(x: Decimal) -> Decimal:
    if abs(x) < Decimal("1e-5"):  # e^x - 1 would cancel: four terms of the series (error x^5/120)
        return x + x * x / 2 + x**3 / 6 + x**4 / 24
    return x.exp() - 1


def log(x: ArrayLike) -> Array:
    x = np.asarray(x, dtype=float)
    return _rounded(np.log(x), lambda i: Decimal(x.flat[i].item()).ln())


def power(x: ArrayLike, y: float) -> Array:
    """``x ** y`` for ``x >= 0``."""
    x = np.asarray(x, dtype=float)
    return _rounded(np.power(x, y), lambda i: Decimal(x.flat[i].item()) ** Decimal(y))
