r"""Calibration diagnostics and inverse-probability-weighted losses for the prefix heads.

The prefix heads predict a success probability ``p_hat_i`` and a remaining suffix cost
``c_hat_i`` from a prefix (PAIR paper, Eq. heads). Labels exist only for the candidates the
design continued (``J_i = 1``), which were selected with unequal probabilities ``pi_i``; the
losses weight each label by ``J_i / pi_i`` (Eq. head-losses) so that they estimate the loss over
all candidates without bias (Horvitz & Thompson 1952). Diagnostics follow the appendix
"Heads and calibration": Brier score, ECE over 15 equal-mass bins, temperature scaling,
and cost mean absolute percentage error.

Numpy and scipy only (part of the torch-free core).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize_scalar

from pairht._validation import (
    as_real_array,
    check_finite,
    check_probabilities,
    check_shape,
    name_index,
)

__all__ = [
    "brier",
    "cost_mape",
    "ece",
    "fit_temperature",
    "ipw_brier_loss",
    "ipw_geometric_mean",
    "ipw_log_cost_loss",
    "ipw_mean",
    "log_cost_error",
]

# Temperature search interval. Brent's bounded method on the inverse temperature beta = 1/T,
# where the NLL is convex, so the bounded minimiser is the global one inside the interval.
T_MIN, T_MAX = 0.05, 20.0


def _first(name: str, arr: np.ndarray, bad: np.ndarray) -> str:
    """``name[i, ...] = value`` for the first flagged entry (value as a plain float)."""
    k = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{name}{name_index(k if len(k) != 1 else k[0])} = {float(arr[k])!r}"


def _unit_interval(name: str, x: ArrayLike, what: str) -> np.ndarray:
    arr = check_finite(name, x)
    bad = (arr < 0.0) | (arr > 1.0)
    if bad.any():
        raise ValueError(f"{name} must lie in [0, 1] ({what}); {_first(name, arr, bad)}")
    return arr


def _weights(weights: ArrayLike | None, shape: tuple[int, ...]) -> np.ndarray:
    if weights is None:
        return np.ones(shape)
    w = check_finite("weights", weights)
    check_shape("weights", w, shape, what="one weight per prediction")
    if (w < 0).any():
        raise ValueError(f"weights must be >= 0; {_first('weights', w, w < 0)}")
    if not w.sum() > 0:
        raise ValueError(f"weights must have a positive sum; got sum(weights) = {w.sum()!r}")
    return w


def _pair(p_name: str, p: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    pa = _unit_interval(p_name, p, "predicted probabilities")
    ya = _unit_interval("y", y, "rewards / success labels")
    check_shape("y", ya, pa.shape, what=f"same shape as {p_name}")
    if pa.size == 0:
        raise ValueError(f"{p_name} must hold at least one prediction; got shape {pa.shape}")
    return pa, ya


def brier(p: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> float:
    r"""(Weighted) Brier score ``sum_i w_i (p_i - y_i)^2 / sum_i w_i``.

    Parameters
    ----------
    p : (n,) array in [0, 1]        predicted success probabilities
    y : (n,) array in [0, 1]        outcomes (binary, or partial rewards)
    weights : (n,) array >= 0, optional   e.g. IPW weights ``1 / pi_i``; default all ones

    Returns
    -------
    float

    References
    ----------
    Brier (1950), Monthly Weather Review 78:1.

    Examples
    --------
    >>> round(brier([0.8, 0.3], [1.0, 0.0]), 12)        # (0.04 + 0.09) / 2
    0.065
    >>> round(brier([0.8, 0.3], [1.0, 0.0], weights=[1.0, 3.0]), 12)   # (0.04 + 0.27) / 4
    0.0775
    """
    pa, ya = _pair("p", p, y)
    w = _weights(weights, pa.shape)
    return float(np.sum(w * (pa - ya) ** 2) / np.sum(w))


def ece(p: ArrayLike, y: ArrayLike, n_bins: int = 15, weights: ArrayLike | None = None) -> float:
    r"""Expected calibration error over equal-mass bins.

    Predictions are sorted by ``p`` (stable sort) and split into ``n_bins`` consecutive groups
    whose sizes differ by at most one (``numpy.array_split``); with ``W_b`` the weight of bin
    ``b`` and ``p_b``, ``y_b`` its weighted means,

        ECE = sum_b (W_b / W) |p_b - y_b|.

    Empty bins (``n < n_bins``) are skipped.

    Parameters
    ----------
    p : (n,) array in [0, 1]
    y : (n,) array in [0, 1]
    n_bins : int >= 1 (paper: 15)
    weights : (n,) array >= 0, optional

    Returns
    -------
    float in [0, 1]

    References
    ----------
    Naeini, Cooper & Hauskrecht (2015), AAAI; Nixon et al. (2019), CVPR Workshops
    (adaptive / equal-mass binning).

    Examples
    --------
    >>> round(ece([0.1, 0.2, 0.7, 0.9], [0.0, 1.0, 1.0, 1.0], n_bins=2), 12)
    0.275
    >>> # bins {0.1, 0.2} and {0.7, 0.9}: (|0.15 - 0.5| + |0.8 - 1.0|) / 2
    """
    pa, ya = _pair("p", p, y)
    if pa.ndim != 1:
        raise ValueError(f"p must be a 1-d array; got shape {pa.shape}")
    if isinstance(n_bins, (bool, np.bool_)) or not isinstance(n_bins, (int, np.integer)) \
            or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got n_bins = {n_bins!r}")
    w = _weights(weights, pa.shape)
    order = np.argsort(pa, kind="stable")
    total = w.sum()
    out = 0.0
    for b in np.array_split(order, int(n_bins)):
        wb = w[b].sum()
        if b.size == 0 or wb == 0:
            continue
        out += abs(np.dot(w[b], pa[b]) - np.dot(w[b], ya[b])) / total
    return float(out)


def _nll(beta: float, z: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    # -[y log s(bz) + (1-y) log(1 - s(bz))] = softplus(bz) - y bz, stable for large |bz|.
    s = beta * z
    return float(np.dot(w, np.logaddexp(0.0, s) - y * s) / w.sum())


def fit_temperature(logits: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> float:
    r"""Scalar temperature ``T`` minimising the weighted binary NLL of ``sigmoid(logits / T)``.

        T = argmin_T  sum_i w_i [softplus(z_i / T) - y_i z_i / T] / sum_i w_i

    The objective is convex in ``beta = 1/T``; it is minimised by Brent's bounded method
    (``scipy.optimize.minimize_scalar``) over ``T in [0.05, 20]``. Soft labels ``y`` in [0, 1]
    are allowed (cross-entropy). When every logit is 0 the temperature is irrelevant and 1.0
    is returned.

    Parameters
    ----------
    logits : (n,) array      untempered head outputs ``f(u_i)``
    y : (n,) array in [0, 1]
    weights : (n,) array >= 0, optional   e.g. IPW weights ``1 / pi_i``

    Returns
    -------
    float

    References
    ----------
    Guo, Pleiss, Sun & Weinberger (2017), "On calibration of modern neural networks", ICML.

    Examples
    --------
    >>> z = [4.0, -4.0, 4.0, -4.0, 4.0, -4.0]
    >>> y = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]        # right 2 times in 3 -> sigmoid(z/T) = 2/3
    >>> round(fit_temperature(z, y), 4)           # T = 4 / log 2
    5.7708
    """
    z = check_finite("logits", logits)
    if z.ndim != 1 or z.size == 0:
        raise ValueError(f"logits must be a non-empty 1-d array; got shape {z.shape}")
    ya = _unit_interval("y", y, "success labels")
    check_shape("y", ya, z.shape, what="same shape as logits")
    w = _weights(weights, z.shape)
    if not np.any(z[w > 0]):
        return 1.0
    res = minimize_scalar(
        _nll,
        bounds=(1.0 / T_MAX, 1.0 / T_MIN),
        args=(z, ya, w),
        method="bounded",
        options={"xatol": 1e-10},
    )
    return float(1.0 / res.x)


def ipw_mean(x: np.ndarray, w: np.ndarray) -> float:
    r"""Weighted mean ``sum_i w_i x_i / sum_i w_i`` (with ``w = 1/pi``: the Hajek mean).

    The one implementation of the IPW constant predictor of the success head (``p_bar``);
    no checks (callers hold validated labels and positive weights).

    Examples
    --------
    >>> ipw_mean(np.array([1.0, 0.0]), np.array([3.0, 1.0]))
    0.75
    """
    return float(w @ x / w.sum())


def ipw_geometric_mean(c: np.ndarray, w: np.ndarray, default: float) -> float:
    r"""Weighted geometric mean ``exp(sum_i w_i log C_i / sum_i w_i)`` over the costs ``C > 0``.

    The IPW constant predictor of the cost head (``c_bar``): zero costs (a prefix that already
    ended has no suffix label) do not count; ``default`` when no cost is positive.

    Examples
    --------
    >>> round(ipw_geometric_mean(np.array([10.0, 1000.0, 0.0]), np.ones(3), 1.0), 9)
    100.0
    """
    pos = c > 0
    return float(np.exp(w[pos] @ np.log(c[pos]) / w[pos].sum())) if pos.any() else default


def log_cost_error(c_hat: np.ndarray, c: np.ndarray) -> np.ndarray:
    r"""Per-label squared log-cost error ``[C_i > 0] (log c_hat_i - log C_i)^2``.

    The term of :func:`ipw_log_cost_loss` and of every cost-head criterion (the IPW training
    loss of the heads, their held-out skill): a label with ``C_i = 0`` (the prefix already
    ended, no suffix) contributes 0. ``c_hat`` must be positive; no checks.

    Examples
    --------
    >>> log_cost_error(np.array([10.0, 5.0]), np.array([10.0 * np.e, 0.0])).round(12).tolist()
    [1.0, 0.0]
    """
    pos = c > 0
    return np.where(pos, (np.log(c_hat) - np.log(np.where(pos, c, 1.0))) ** 2, 0.0)


def _ipw_inputs(
    pi: ArrayLike, mask: ArrayLike, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    m = np.asarray(mask)
    if m.dtype != bool:
        raise ValueError(
            f"mask must be a bool array (J_i, which candidates completed); got dtype {m.dtype}"
        )
    check_shape("mask", m, shape, what="one entry per candidate")
    pa = check_probabilities("pi", pi)
    check_shape("pi", pa, shape, what="one inclusion probability per candidate")
    bad = m & (pa <= 0)
    if bad.any():
        raise ValueError(
            f"pi must be > 0 for every completed candidate (mask True) to weight it by 1/pi; "
            f"{_first('pi', pa, bad)}"
        )
    return pa, m


def _ipw_reduce(err: np.ndarray, pi: np.ndarray, m: np.ndarray, reduction: str) -> float:
    """``sum_i (J_i / pi_i) err_i``, divided by ``N`` for ``reduction="mean"``."""
    terms = np.where(m, err / np.where(m, pi, 1.0), 0.0)
    if reduction == "mean":
        return float(terms.sum() / terms.size)
    if reduction == "sum":
        return float(terms.sum())
    raise ValueError(f"reduction must be 'mean' or 'sum'; got {reduction!r}")


def _labels_where(name: str, x: ArrayLike, m: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    arr = as_real_array(name, x)
    check_shape(name, arr, shape, what="one entry per candidate")
    # Unobserved labels (mask False) may be anything, NaN included; only observed ones are used.
    return check_finite(name, np.where(m, arr, 0.0))


def ipw_brier_loss(
    p: ArrayLike, y: ArrayLike, pi: ArrayLike, mask: ArrayLike, *, reduction: str = "mean"
) -> float:
    r"""Inverse-probability-weighted Brier loss (PAIR paper, Eq. head-losses).

        L_p = (1/N) sum_i (J_i / pi_i) (p_i - y_i)^2          (reduction="mean")

    over all ``N`` candidates (``reduction="sum"`` drops the ``1/N``, as written in the paper).
    Design-unbiased for the mean Brier score over all candidates, observed or not:
    ``E[J_i / pi_i] = 1``.

    Parameters
    ----------
    p : (...,) array in [0, 1]        predicted success probabilities, every candidate
    y : (...,) array in [0, 1]        rewards; entries with ``mask`` False are ignored (may be NaN)
    pi : (...,) array in [0, 1]       inclusion probabilities, > 0 where ``mask``
    mask : (...,) bool                ``J_i``, which candidates were completed
    reduction : "mean" | "sum"

    Returns
    -------
    float

    Examples
    --------
    >>> ipw_brier_loss([0.5, 0.9, 0.2], [1.0, float("nan"), 0.0], [0.5, 0.3, 0.25],
    ...                [True, False, True])      # (0.25/0.5 + 0.04/0.25) / 3
    0.22
    """
    pa = _unit_interval("p", p, "predicted probabilities")
    pi_a, m = _ipw_inputs(pi, mask, pa.shape)
    ya = _labels_where("y", y, m, pa.shape)
    _unit_interval("y", ya, "rewards / success labels")
    return _ipw_reduce((pa - ya) ** 2, pi_a, m, reduction)


def ipw_log_cost_loss(
    c_hat: ArrayLike, c: ArrayLike, pi: ArrayLike, mask: ArrayLike, *, reduction: str = "mean"
) -> float:
    r"""Inverse-probability-weighted squared log-cost error (PAIR paper, Eq. head-losses).

        L_c = (1/N) sum_i (J_i / pi_i) (log c_hat_i - log C_i)^2     (reduction="mean")

    Parameters
    ----------
    c_hat : (...,) array > 0          predicted remaining suffix tokens
    c : (...,) array                  realised suffix tokens, > 0 where ``mask`` (else ignored)
    pi, mask, reduction               as in :func:`ipw_brier_loss`; returns a float

    Examples
    --------
    >>> import math
    >>> v = ipw_log_cost_loss([100.0, 50.0], [100.0 * math.e, 7.0], [0.5, 1.0], [True, False])
    >>> round(v, 12)                              # (1 / 0.5) * 1 / 2
    1.0
    """
    ch = check_finite("c_hat", c_hat)
    if (ch <= 0).any():
        raise ValueError(
            f"c_hat must be > 0 (predicted token costs, logged); {_first('c_hat', ch, ch <= 0)}"
        )
    pi_a, m = _ipw_inputs(pi, mask, ch.shape)
    ca = _labels_where("c", c, m, ch.shape)
    bad = m & (ca <= 0)
    if bad.any():
        raise ValueError(
            f"c must be > 0 for completed candidates (its log is taken); {_first('c', ca, bad)}"
        )
    return _ipw_reduce(log_cost_error(ch, ca), pi_a, m, reduction)


def cost_mape(c_hat: ArrayLike, c: ArrayLike, weights: ArrayLike | None = None) -> float:
    r"""(Weighted) mean absolute percentage error of cost predictions.

        MAPE = sum_i w_i |c_hat_i - C_i| / C_i / sum_i w_i

    Parameters
    ----------
    c_hat : (n,) array >= 0
    c : (n,) array > 0
    weights : (n,) array >= 0, optional

    Returns
    -------
    float (a fraction: 0.1 means 10 %)

    Examples
    --------
    >>> round(cost_mape([110.0, 40.0], [100.0, 50.0]), 12)     # (0.1 + 0.2) / 2
    0.15
    """
    ch = check_finite("c_hat", c_hat)
    ca = check_finite("c", c)
    check_shape("c", ca, ch.shape, what="same shape as c_hat")
    if ch.size == 0:
        raise ValueError(f"c_hat must hold at least one prediction; got shape {ch.shape}")
    if (ch < 0).any():
        raise ValueError(f"c_hat must be >= 0 (token costs); {_first('c_hat', ch, ch < 0)}")
    if (ca <= 0).any():
        raise ValueError(
            f"c must be > 0 (percentage errors divide by it); {_first('c', ca, ca <= 0)}"
        )
    w = _weights(weights, ch.shape)
    return float(np.sum(w * np.abs(ch - ca) / ca) / np.sum(w))
