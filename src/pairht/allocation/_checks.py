"""Scalar argument checks of the allocation API (arrays go through :mod:`pairht._validation`).

Each check raises ``TypeError`` for a value of the wrong kind and ``ValueError`` for one out of
range, naming the argument, the value and the rule, so that a misspelt setting never changes
what is computed (``fallback="no"`` is truthy to Python but is refused here).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_finite, check_int, check_real


def check_flag(name: str, value: object) -> bool:
    """Return ``value`` as a ``bool``; anything but ``True``/``False`` raises ``TypeError``.

    ``np.bool_`` is accepted. Strings, ints and ``None`` are refused: Python's truthiness
    would read ``"no"`` and ``"False"`` as ``True``.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False; got {value!r} ({type(value).__name__})")


def check_tol(name: str, tol: object) -> float:
    """A relative KKT tolerance in ``(0, 1)``."""
    return check_real(name, tol, low=0.0, high=1.0, high_open=True,
                      rule="a relative KKT residual")


def check_max_iter(name: str, max_iter: object) -> int:
    """An iteration cap: an int ``>= 1`` (bools and floats raise ``TypeError``)."""
    return check_int(name, max_iter, low=1, rule="a positive iteration cap")


def broadcast_budget(budget: ArrayLike, batch: tuple[int, ...]) -> np.ndarray:
    """``budget`` finite, broadcast to the batch shape, as float64 (a fresh array)."""
    bud = check_finite("budget", budget)
    try:
        return np.broadcast_to(bud, batch).astype(np.float64)
    except ValueError:
        raise ValueError(f"budget must be a scalar or have the batch shape {batch}; got shape "
                         f"{bud.shape}") from None
