"""Input validation and randomness plumbing shared by every module.

Every public function validates its input here, so that each rule is written once and each
error names the argument, the offending value and the rule that was broken.
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike

RNGLike = int | np.random.Generator | np.random.SeedSequence | None


def as_generator(rng: RNGLike) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from an int seed, a Generator, a SeedSequence or None.

    Mirrors ``numpy.random.default_rng``: no global random state is ever touched.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (numbers.Integral, np.random.SeedSequence)):
        return np.random.default_rng(rng)
    raise ValueError(
        f"rng must be an int seed, a numpy.random.Generator, a SeedSequence or None; "
        f"got {type(rng).__name__}"
    )


def _first_bad(x: np.ndarray, bad: np.ndarray) -> str:
    idx = np.argwhere(bad)[0]
    where = tuple(int(i) for i in idx)
    if len(where) == 1:
        where = where[0]  # type: ignore[assignment]
    return f"{name_index(where)} = {x[tuple(idx)].item()!r}"


def name_index(where: object) -> str:
    return f"[{where}]" if not isinstance(where, tuple) else "[" + ", ".join(map(str, where)) + "]"


def check_finite(name: str, x: ArrayLike) -> np.ndarray:
    """Return ``x`` as a float64 array, or raise ``ValueError`` naming the first NaN/inf entry."""
    arr = np.asarray(x, dtype=np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name} must be finite (no NaN or inf); {name}{_first_bad(arr, bad)}")
    return arr


def check_probabilities(name: str, x: ArrayLike, *, ndim: int | None = None) -> np.ndarray:
    """Return ``x`` as float64 after checking every entry is a probability in [0, 1]."""
    arr = check_finite(name, x)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array; got shape {arr.shape}")
    if arr.ndim == 0:
        raise ValueError(f"{name} must be an array with at least one axis; got a scalar")
    bad = (arr < 0.0) | (arr > 1.0)
    if bad.any():
        raise ValueError(
            f"{name} must lie in [0, 1] (they are inclusion probabilities); "
            f"{name}{_first_bad(arr, bad)}"
        )
    return arr


def check_integer_sum(name: str, x: np.ndarray, *, tol: float = 1e-9, hint: str = "") -> int:
    """Return ``round(sum(x))`` if it is within ``tol`` of an integer, else raise ``ValueError``."""
    total = float(np.sum(x))
    n = round(total)
    if abs(total - n) > tol:
        raise ValueError(
            f"{name} must sum to an integer (fixed sample size) within {tol:g}; "
            f"got sum({name}) = {total!r}.{(' ' + hint) if hint else ''}"
        )
    return n


def check_shape(name: str, x: np.ndarray, shape: tuple[int, ...], *, what: str = "") -> None:
    """Raise ``ValueError`` unless ``x.shape == shape``."""
    if x.shape != shape:
        extra = f" ({what})" if what else ""
        raise ValueError(f"{name} must have shape {shape}{extra}; got {x.shape}")
