"""``evalstop._snap``: numpy's exp, expm1, log and power rounded to 24 significant bits, each
to where its exact value rounds, so that a CPU whose kernel is a few units in the last place
off gets the same floats."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, localcontext

import numpy as np
import pytest

from evalstop import _snap


def rounded_exactly(value: Decimal) -> float:
    """``value`` rounded (half to even) to 24 significant bits, in decimal arithmetic only."""
    with localcontext(_snap.EXACT):
        if value == 0:
            return 0.0
        exponent = int(np.frexp(float(value))[1])
        mantissa = value / Decimal(2) ** exponent
        if abs(mantissa) >= 1:  # float(value) rounded up to the next power of two
            exponent, mantissa = exponent + 1, mantissa / 2
        return float(np.ldexp(float((mantissa * 2**24).to_integral_value()), exponent - 24))


CASES: list[tuple[str, Callable[[np.ndarray], np.ndarray], Callable[[Decimal], Decimal], np.ndarray]] = [
    ("exp", _snap.exp, lambda x: x.exp(), np.linspace(-30.0, 30.0, 4001)),
    ("expm1", _snap.expm1, lambda x: x.exp() - 1, np.linspace(-20.0, -1e-3, 4001)),
    ("log", _snap.log, lambda x: x.ln(), np.linspace(1e-3, 50.0, 4001)),
    ("power", lambda x: _snap.power(x, 1.5), lambda x: x ** Decimal("1.5"), np.linspace(0.0, 3.0, 4001)),
]


@pytest.mark.parametrize("name,fn,exact,xs", CASES, ids=[c[0] for c in CASES])
def test_every_result_is_its_exact_value_rounded_to_24_bits(
    name: str, fn: Callable[[np.ndarray], np.ndarray], exact: Callable[[Decimal], Decimal], xs: np.ndarray
) -> None:
    got = fn(xs)
    with localcontext(_snap.EXACT):
        want = [rounded_exactly(exact(Decimal(x))) for x in xs.tolist()]
    assert got.tolist() == want


def test_expm1_of_a_tiny_argument_keeps_its_digits() -> None:
    xs = np.array([-1e-300, -1e-20, -1e-9, 1e-12])
    with localcontext(_snap.EXACT):
        want = [rounded_exactly(Decimal(x) + Decimal(x) ** 2 / 2) for x in xs.tolist()]
    assert _snap.expm1(xs).tolist() == want


def test_a_kernel_a_few_units_off_gives_the_same_floats() -> None:
    """What another CPU does: the same exact values, numpy's results off by up to 16 units in the
    last place either way. Half the values sit within a few units of a midpoint between two
    24-bit values, where plain rounding would split them."""
    rng = np.random.default_rng(5)
    mantissa = (rng.integers(2**23, 2**24, 4000) + 0.5) / 2**24  # midpoints ...
    mantissa[::2] = rng.uniform(0.5, 1.0, 2000)  # ... and anywhere
    exact = np.ldexp(mantissa, rng.integers(-30, 30, 4000))
    exact_at = {i: Decimal(v) for i, v in enumerate(exact.tolist())}

    def snapped(values: np.ndarray) -> list[float]:
        return _snap._rounded(values.copy(), lambda i: exact_at[i]).tolist()

    reference = snapped(exact)
    for ulps in (-16, -3, -1, 1, 2, 16):
        off = exact + ulps * np.spacing(exact)
        assert snapped(off) == reference
        assert snapped(np.nextafter(off, np.inf)) == reference


def test_nan_infinity_and_zero_pass_through() -> None:
    with np.errstate(divide="ignore", invalid="ignore"):
        got = _snap.log(np.array([np.nan, np.inf, 0.0, -1.0]))
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == -np.inf and np.isnan(got[3])
    with np.errstate(over="ignore"):
        assert _snap.exp(np.array([0.0, -1000.0, 1000.0])).tolist() == [1.0, 0.0, np.inf]
    assert _snap.exp(0.5).shape == () and _snap.power(np.zeros((2, 3)), 1.5).shape == (2, 3)
