"""Exact design expectations by enumeration: prove an estimator unbiased on your own inputs.

A design-based estimator is a function of the sample ``s`` (a mask). Its design expectation
is the finite sum ``E[T] = sum_s P(s) T(s)`` over the design's support, which
``Design.support()`` enumerates exactly for small ``N``. Comparing that sum with the target
is a proof of (conditional) unbiasedness for the given population, up to float round-off,
not a Monte Carlo check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pairht.designs.base import MAX_SUPPORT_UNITS, Design


def exact_expectation(
    estimator: Callable[..., Any],
    design: Design,
    *args: Any,
    vectorized: bool = False,
    max_units: int = MAX_SUPPORT_UNITS,
    **kwargs: Any,
) -> np.ndarray:
    r"""``E_design[T] = sum_s P(s) T(s)``, summed exactly over ``design.support()``.

    Parameters
    ----------
    estimator : callable
        Called as ``estimator(*args, mask=s, **kwargs)`` with ``s`` a boolean ``(N,)`` mask
        (or, with ``vectorized=True``, once with all masks ``(K, N)``, returning a leading
        axis of length ``K``).
    design : Design
        The sampling design; its support is enumerated (``N <= max_units``).
    *args, **kwargs
        Passed to ``estimator``.
    vectorized : bool
        Whether ``estimator`` accepts a batch of masks.
    max_units : int
        Passed to ``design.support``.

    Returns
    -------
    ndarray
        The expectation, shaped like one output of ``estimator``.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import Bernoulli
    >>> from pairht.testing import exact_expectation
    >>> d = Bernoulli([0.5, 0.25])
    >>> float(exact_expectation(lambda mask: mask.sum(), d))  # E[sample size] = sum(pi)
    0.75
    """
    masks, probs = design.support(max_units=max_units)
    if vectorized:
        values = np.asarray(estimator(*args, mask=masks, **kwargs), dtype=np.float64)
        if values.shape[:1] != probs.shape:
            raise ValueError(
                f"a vectorized estimator must return a leading axis of length "
                f"{probs.shape[0]} (one value per support mask); got shape {values.shape}"
            )
        return np.tensordot(probs, values, axes=1)
    total: np.ndarray | None = None
    for mask, p in zip(masks, probs):
        value = p * np.asarray(estimator(*args, mask=mask, **kwargs), dtype=np.float64)
        total = value if total is None else total + value
    assert total is not None  # a support always holds at least one mask
    return total


def assert_design_unbiased(
    estimator: Callable[..., Any],
    design: Design,
    rewards: ArrayLike,
    scores: ArrayLike,
    atol: float = 1e-10,
    *,
    rtol: float = 0.0,
    vectorized: bool = False,
) -> None:
    r"""Assert ``E_design[estimator] == pair_gradient(rewards, scores)`` exactly (to ``atol``).

    The estimator is called as ``estimator(rewards, scores, mask, joint)`` for every sample
    ``mask`` of ``design.support()``, with ``joint = design.joint()`` (the signature of
    :func:`pairht.estimators.pair_ht_gradient`). Its exact design expectation is compared
    with the complete-pair target ``(1/M) sum_{i<j} h_ij`` (PAIR paper, Theorem 2).

    Parameters
    ----------
    estimator : callable
        ``estimator(rewards, scores, mask, joint) -> (d,)``; with ``vectorized=True`` it
        receives all masks ``(K, N)`` at once and returns ``(K, d)``.
    design : Design
        The design, with ``design.n_units == G`` (small: its support is enumerated).
    rewards : (G,) array_like
    scores : (G, d) array_like
    atol, rtol : float
        Passed to ``numpy.testing.assert_allclose``; 1e-10 absolute suits float64 sums over
        a few thousand samples of moderate weights.
    vectorized : bool
        Whether ``estimator`` accepts a batch of masks.

    Raises
    ------
    AssertionError
        With the expectation, the target and their largest difference, if they differ.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import Bernoulli
    >>> from pairht.estimators import pair_ht_gradient
    >>> from pairht.testing import assert_design_unbiased
    >>> rng = np.random.default_rng(0)
    >>> r, s = rng.random(5), rng.normal(size=(5, 3))
    >>> assert_design_unbiased(pair_ht_gradient, Bernoulli([0.3, 0.5, 0.9, 0.6, 0.2]), r, s)
    >>> def naive(rewards, scores, mask, joint):  # no inverse weights: biased
    ...     return pair_ht_gradient(rewards, scores, mask, np.ones_like(joint))
    >>> try:
    ...     assert_design_unbiased(naive, Bernoulli([0.3, 0.5, 0.9, 0.6, 0.2]), r, s)
    ... except AssertionError:
    ...     print("biased")
    biased
    """
    from pairht.estimators import pair_gradient

    joint = design.joint()

    def call(mask: np.ndarray) -> Any:
        return estimator(rewards, scores, mask, joint)

    expectation = exact_expectation(call, design, vectorized=vectorized)
    target = pair_gradient(rewards, scores)
    np.testing.assert_allclose(
        expectation,
        target,
        rtol=rtol,
        atol=atol,
        err_msg="design expectation of the estimator differs from the complete-pair target",
    )
