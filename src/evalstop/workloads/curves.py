"""True-quality and training-loss curves as functions of progress p in [0, 1].

All functions are vectorised over ``p``. Quality is on a 0..1 scale. ``exp``, ``expm1``,
``log`` and ``power`` come from ``evalstop._snap``: the same results on every CPU.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _snap

FloatArray = NDArray[np.float64]


def gao_rl(p: ArrayLike, peak: float, gamma: float = 1.0) -> FloatArray:
    """Gao et al.'s RL form R(d) = d(alpha - beta ln d), normalised to peak value 1 at ``peak``.

    With d = d* (p/peak)^gamma the normalised curve is c (1 - ln c), c = d/d*, independent of
    alpha and beta: those only set the scale (d*, R*), which the caller's amplitude absorbs.
    ``gamma = 1`` is Gao's observation that sqrt(KL) grows about linearly in steps.
    """
    c = _snap.power(np.asarray(p, dtype=float) / peak, gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(c > 0, c * (1.0 - _snap.log(np.where(c > 0, c, 1.0))), 0.0)
    return np.asarray(g, dtype=float)


def training_loss(p: ArrayLike, tau: float, start: float = 1.0, floor: float = 0.2) -> FloatArray:
    """Monotonically falling loss floor + (start - floor) e^(-p/tau), for every job kind."""
    p = np.asarray(p, dtype=float)
    return np.asarray(floor + (start - floor) * _snap.exp(-p / tau), dtype=float)


