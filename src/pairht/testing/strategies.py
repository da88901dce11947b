"""Hypothesis strategies for inclusion-probability vectors, awkward cases included.

Designs and estimators are easy to get right on "nice" inputs; the failures live at ties,
probabilities a hair away from 0 or 1, exact 0s and 1s and the smallest populations. These
strategies draw such inputs on purpose, so a property test that passes has seen them.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

__all__ = ["fixed_size_inclusion_probabilities", "inclusion_probabilities"]

#: Values a property test should meet: extremes, ties with each other and round halves.
_AWKWARD = (1e-6, 1e-3, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0 - 1e-6, 1.0 - 1e-9)


def _interior() -> st.SearchStrategy[float]:
    """A probability strictly inside (0, 1), often one of the awkward values."""
    return st.one_of(
        st.sampled_from(_AWKWARD),
        st.floats(min_value=1e-6, max_value=1.0 - 1e-9, allow_nan=False),
    )


def _check_sizes(min_size: int, max_size: int) -> None:
    if not (isinstance(min_size, int) and isinstance(max_size, int)) or min_size < 1:
        raise ValueError(f"min_size must be an int >= 1; got {min_size!r}")
    if max_size < min_size:
        raise ValueError(f"max_size must be >= min_size = {min_size}; got {max_size!r}")


@st.composite
def _free_probabilities(draw: st.DrawFn, size: int) -> np.ndarray:
    """``size`` values in (0, 1), with ties (a repeated value) half of the time."""
    values = draw(st.lists(_interior(), min_size=size, max_size=size))
    if size >= 2 and draw(st.booleans()):
        values[1] = values[0]
    return np.asarray(values, dtype=np.float64)


def inclusion_probabilities(
    min_size: int = 2,
    max_size: int = 10,
    integer_sum: bool = False,
    allow_zero: bool = True,
    allow_one: bool = True,
) -> st.SearchStrategy[np.ndarray]:
    """Strategy for ``(N,)`` float64 arrays of inclusion probabilities in [0, 1].

    Values come from a list of awkward ones (``1e-6``, ``1 - 1e-9``, ``0.5``, ...) or
    uniformly from ``[1e-6, 1 - 1e-9]``, with forced ties, and exact 0s and 1s when allowed.

    Parameters
    ----------
    min_size, max_size : int
        Range of the length ``N`` (``1 <= min_size <= max_size``).
    integer_sum : bool
        Draw from :func:`fixed_size_inclusion_probabilities` instead: ``sum(pi)`` is an
        integer (as needed by fixed-size designs).
    allow_zero, allow_one : bool
        Whether entries exactly 0 / exactly 1 may appear.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of (N,) ndarray

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> from pairht.testing.strategies import inclusion_probabilities
    >>> @settings(max_examples=20)
    ... @given(inclusion_probabilities(max_size=5))
    ... def test_in_unit_interval(pi):
    ...     assert ((pi >= 0) & (pi <= 1)).all() and 2 <= pi.size <= 5
    >>> test_in_unit_interval()
    """
    _check_sizes(min_size, max_size)
    if integer_sum:
        return fixed_size_inclusion_probabilities(min_size, max_size, allow_zero, allow_one)
    extra = []
    if allow_zero:
        extra.append(st.just(0.0))
    if allow_one:
        extra.append(st.just(1.0))
    value = st.one_of(_interior(), *extra) if extra else _interior()

    @st.composite
    def build(draw: st.DrawFn) -> np.ndarray:
        n = draw(st.integers(min_size, max_size))
        pi = np.asarray(draw(st.lists(value, min_size=n, max_size=n)), dtype=np.float64)
        if n >= 2 and draw(st.booleans()):
            pi[-1] = pi[0]  # a tie
        return pi

    return build()


def fixed_size_inclusion_probabilities(
    min_size: int = 2,
    max_size: int = 10,
    allow_zero: bool = True,
    allow_one: bool = True,
    n_excluded: int | None = None,
) -> st.SearchStrategy[np.ndarray]:
    """Strategy for ``(N,)`` inclusion probabilities whose sum is an integer ``n >= 1``.

    Two constructions are mixed, then shuffled:

    * complementary pairs ``(p, 1 - p)`` (exact in float64 up to one rounding), so values
      near 0 and near 1 appear together and ``N = 2`` gives ``(p, 1 - p)``;
    * free values shifted on the logit scale, ``sigmoid(logit(p_k) + c)``, with ``c`` solved
      so the sum is an integer (ties survive the shift);

    plus optional exact 0s and 1s. The sum is an integer to within 1e-12 (the designs accept
    1e-9).

    Parameters
    ----------
    min_size, max_size : int
        Range of the length ``N`` (``2 <= min_size <= max_size``).
    allow_zero, allow_one : bool
        Whether entries exactly 0 / exactly 1 may appear.
    n_excluded : int, optional
        Fix ``sum(pi) = N - n_excluded`` (every sample leaves out exactly ``n_excluded``
        units; all entries strictly inside (0, 1), so ``allow_zero`` and ``allow_one`` must
        be False). With ``n_excluded = 1`` every fixed-size design has every inclusion of
        order ``< N`` positive, ``pi_S = sum_{u not in S} (1 - pi_u)``: the way to draw
        designs for tests that need positive higher-order inclusions without filtering.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of (N,) ndarray

    Examples
    --------
    >>> import numpy as np
    >>> from hypothesis import given, settings
    >>> from pairht.testing.strategies import fixed_size_inclusion_probabilities
    >>> @settings(max_examples=20)
    ... @given(fixed_size_inclusion_probabilities(max_size=6))
    ... def test_integer_sum(pi):
    ...     assert abs(pi.sum() - np.round(pi.sum())) < 1e-9 and pi.sum() > 0.5
    >>> test_integer_sum()
    """
    _check_sizes(min_size, max_size)
    if min_size < 2:
        raise ValueError(
            f"min_size must be >= 2 for an integer sum with a free unit; got {min_size}"
        )
    if n_excluded is not None:
        if isinstance(n_excluded, bool) or not isinstance(n_excluded, int) or n_excluded < 1:
            raise ValueError(f"n_excluded must be an int >= 1 or None; got {n_excluded!r}")
        if allow_zero or allow_one:
            raise ValueError("n_excluded needs allow_zero=False and allow_one=False")
        if max_size <= n_excluded:
            raise ValueError(f"max_size must exceed n_excluded = {n_excluded}; got {max_size}")

    @st.composite
    def build_excluded(draw: st.DrawFn) -> np.ndarray:
        assert n_excluded is not None
        n_units = draw(st.integers(max(min_size, n_excluded + 1), max_size))
        free = draw(_free_probabilities(n_units))
        return _shift_to_integer(free, draw, target=n_units - n_excluded)

    if n_excluded is not None:
        return build_excluded()

    @st.composite
    def build(draw: st.DrawFn) -> np.ndarray:
        n_units = draw(st.integers(min_size, max_size))
        n_zero = draw(st.integers(0, n_units - 2)) if allow_zero else 0
        n_one = draw(st.integers(0, n_units - 2 - n_zero)) if allow_one else 0
        n_free = n_units - n_zero - n_one
        if n_free % 2 == 0 and draw(st.booleans()):
            half = draw(_free_probabilities(n_free // 2))
            free = np.concatenate([half, 1.0 - half])
        else:
            free = _shift_to_integer(draw(_free_probabilities(n_free)), draw)
        pi = np.concatenate([free, np.zeros(n_zero), np.ones(n_one)])
        perm = draw(st.permutations(range(pi.size)))
        return pi[np.asarray(perm, dtype=np.int64)]

    return build()


def _shift_to_integer(p: np.ndarray, draw: st.DrawFn, target: int | None = None) -> np.ndarray:
    """``sigmoid(logit(p) + c)`` with ``c`` chosen so the sum is an integer in [1, len - 1].

    ``len(p) >= 2``; ``target`` (default: drawn) is the sum. Shifted values are kept within
    [1e-9, 1 - 1e-9].
    """
    from scipy.optimize import brentq
    from scipy.special import expit, logit

    if target is None:
        target = draw(st.integers(1, p.size - 1))
    z = logit(p)

    def gap(c: float) -> float:
        return float(np.sum(expit(z + c))) - target

    c = brentq(gap, -60.0, 60.0, xtol=1e-15, rtol=1e-15, maxiter=500)
    out = np.clip(expit(z + c), 1e-9, 1.0 - 1e-9)
    # Put the last ulps of the integer sum on the unit farthest from 0 and 1.
    k = int(np.argmin(np.abs(out - 0.5)))
    out[k] += target - float(np.sum(out))
    return out
