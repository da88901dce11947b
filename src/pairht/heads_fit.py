r"""Low-capacity prefix heads that carry signal with few labels: a regularised linear probe.

With a few hundred labels, a 256-wide MLP on 576-d prefix features overfits (held-out Brier no
better than a constant). The probe here has one linear map per head and an L2 penalty chosen by
cross-validation, so its capacity adapts to the number of labels:

* features: standardised, then projected on their top ``n_components`` principal directions
  (``x = V_k^T (u - mean) / scale``, ``V_k`` from the training features only, so it is fitted
  without labels); this bounds the probe's dimension, and its Newton solves, at ``k + 1``;
* success: weighted L2 logistic regression on ``x``,

      (a, b) = argmin  sum_i w_i [softplus(z_i) - y_i z_i] / sum_i w_i + (lam / 2) ||a||^2,
      z_i = a . x_i + b,

  then a temperature ``T`` fitted on the cross-validated logits
  (:func:`pairht.calibration.fit_temperature`): ``p_hat = sigmoid(z / T)``;
* cost: weighted ridge regression of ``log C`` on ``x`` over the candidates with a suffix
  (``C > 0``): ``c_hat = exp(a_c . x + b_c)``;

``lam`` is chosen from a grid by K-fold cross-validation (folds by group, e.g. by prompt, when
groups are given), minimising the weighted held-out Brier score (success) and squared log error
(cost). Weights are the inverse-probability weights ``w_i = 1 / pi_i`` of the labels (PAIR
paper, Eq. head-losses), so every criterion estimates its value over all candidates.

Held-out skill is reported against the constant predictor fitted on the same training labels
(``p_bar``: IPW mean of ``y``; ``log c_bar``: IPW mean of ``log C``):

    skill_success = 1 - Brier(p_hat) / Brier(p_bar),
    skill_cost    = 1 - sum w (log c_hat - log C)^2 / sum w (log c_bar - log C)^2   (an R^2).

Numpy only (plus :mod:`pairht.calibration`): part of the torch-free core.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import RNGLike, as_generator, check_finite
from pairht.calibration import fit_temperature, ipw_geometric_mean, ipw_mean, log_cost_error

__all__ = [
    "DEFAULT_LAMBDAS",
    "LinearProbe",
    "brier_skill",
    "fit_linear_probe",
    "fit_logistic",
    "fit_ridge",
    "group_folds",
    "log_cost_r2",
    "reliability_slope",
    "skill_score",
]

#: L2 penalties tried by cross-validation (per-sample scale: the loss is a weighted mean).
DEFAULT_LAMBDAS = tuple(float(x) for x in np.logspace(-4, 1, 11))


def _softplus(z: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, z)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-_softplus(-z))


def group_folds(groups: ArrayLike, n_folds: int, rng: RNGLike = 0) -> np.ndarray:
    """Fold index per row, whole groups per fold (groups shuffled, then dealt round-robin).

    Examples
    --------
    >>> f = group_folds([0, 0, 1, 1, 2, 2, 3, 3], 2, rng=0)
    >>> bool((f[::2] == f[1::2]).all()), sorted(set(f.tolist()))
    (True, [0, 1])
    """
    g = np.asarray(groups).reshape(-1)
    uniq, inv = np.unique(g, return_inverse=True)
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise ValueError(f"n_folds must be an int >= 2; got {n_folds!r}")
    if uniq.size < n_folds:
        raise ValueError(
            f"n_folds must be <= the number of groups ({uniq.size}); got n_folds = {n_folds}"
        )
    order = as_generator(rng).permutation(uniq.size)
    fold_of_group = np.empty(uniq.size, dtype=np.int64)
    fold_of_group[order] = np.arange(uniq.size) % n_folds
    return fold_of_group[inv]


def fit_logistic(
    X: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    lam: float,
    *,
    init: tuple[np.ndarray, float] | None = None,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> tuple[np.ndarray, float]:
    r"""Weighted L2-penalised logistic regression by damped Newton steps.

    Minimises ``F(a, b) = sum_i w_i [softplus(z_i) - y_i z_i] / sum_i w_i + (lam/2)||a||^2``
    with ``z = X a + b`` (intercept unpenalised). ``F`` is strictly convex in ``a`` for
    ``lam > 0``; Newton with backtracking converges to its unique minimiser. Soft labels ``y``
    in [0, 1] are allowed.

    Returns
    -------
    (a, b) : ((d,) array, float)

    Examples
    --------
    >>> X = np.array([[-1.0], [1.0], [-1.0], [1.0]]); y = np.array([0.0, 1.0, 1.0, 1.0])
    >>> a, b = fit_logistic(X, y, np.ones(4), 1e-3)
    >>> bool(a[0] > 0)
    True
    """
    # Cost: the probe's cross-validation calls this 45 times per refit (4 folds x 11 penalties
    # + the final fit), a few Newton steps each, and the refit is most of a PAIR step's head
    # time. So each step forms the Hessian as one symmetric product ``Xs^T Xs`` with
    # ``Xs = sqrt(h) [X, 1]`` (BLAS syrk: half the flops of ``X^T (h X)``), keeps ``z`` from
    # the accepted line-search point instead of recomputing ``X a + b``, and backtracks along
    # ``dz = X da + db`` (one matrix-vector product per step, not one per trial).
    n, d = X.shape
    ws = w / w.sum()
    a = np.zeros(d) if init is None else np.array(init[0], dtype=float)
    b = float(np.log((ws @ y + 1e-3) / (1 - ws @ y + 1e-3))) if init is None else float(init[1])
    X1 = np.empty((n, d + 1))
    X1[:, :d] = X
    X1[:, d] = 1.0
    penalty = np.full(d + 1, lam)
    penalty[d] = 1e-12  # jitter: a separable intercept direction has h.sum() -> 0

    def objective(z_, a_):
        return float(ws @ (_softplus(z_) - y * z_) + 0.5 * lam * a_ @ a_)

    z = X @ a + b
    f = objective(z, a)
    for _ in range(max_iter):
        s = _sigmoid(z)
        r = ws * (s - y)
        g = X1.T @ r
        g[:d] += lam * a
        Xs = X1 * np.sqrt(ws * s * (1.0 - s))[:, None]
        H = Xs.T @ Xs
        H[np.diag_indices(d + 1)] += penalty
        step = np.linalg.solve(H, g)
        dz = X1 @ step
        slope = 1e-4 * float(g @ step)
        t = 1.0
        while True:
            a_new, b_new, z_new = a - t * step[:d], b - t * float(step[d]), z - t * dz
            f_new = objective(z_new, a_new)
            if f_new <= f - t * slope or t < 1e-8:
                break
            t *= 0.5
        a, b, z, decrease = a_new, b_new, z_new, f - f_new
        f = f_new
        if decrease <= tol * max(1.0, abs(f)):
            break
    return a, b


def fit_ridge(
    X: np.ndarray, t: np.ndarray, w: np.ndarray, lambdas: ArrayLike
) -> list[tuple[np.ndarray, float]]:
    r"""Weighted ridge regressions of ``t`` on ``X`` for every ``lam`` in ``lambdas``.

    Each minimises ``sum_i w_i (t_i - x_i . a - b)^2 / sum_i w_i + lam ||a||^2`` (intercept
    unpenalised), solved exactly from one eigendecomposition of the weighted covariance
    ``S = Xc^T W Xc / sum w``: ``a = V (Lambda + lam)^{-1} V^T Xc^T W tc / sum w``.

    Returns
    -------
    list of (a, b), one per ``lam``
    """
    ws = w / w.sum()
    mx, mt = ws @ X, float(ws @ t)
    Xc = X - mx
    S = Xc.T @ (Xc * ws[:, None])
    evals, V = np.linalg.eigh(S)
    proj = V.T @ (Xc.T @ (ws * (t - mt)))
    out = []
    for lam in np.asarray(lambdas, dtype=float).reshape(-1):
        a = V @ (proj / (np.maximum(evals, 0.0) + lam))
        out.append((a, mt - float(mx @ a)))
    return out


def skill_score(err: np.ndarray, ref: np.ndarray, w: np.ndarray) -> float:
    """``1 - sum w err / sum w ref`` for per-label errors of a predictor and of a reference.

    The one implementation of the skill of a head against a constant predictor
    (:func:`brier_skill`, :func:`log_cost_r2`, the heads' prequential skill); NaN unless the
    reference error is positive.

    Examples
    --------
    >>> skill_score(np.array([0.0, 1.0]), np.array([2.0, 2.0]), np.ones(2))
    0.75
    """
    den = float(w @ ref)
    return 1.0 - float(w @ err) / den if den > 0 else float("nan")


def reliability_slope(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    r"""The weighted least-squares slope through the origin, ``sum w x y / sum w x^2``.

    With ``x_i = p_hat_i - p_bar_g`` (a prediction's deviation from the mean prediction of its
    group ``g``) and ``y_i = r_i - p_bar_g`` (the label's), it is the factor ``beta`` for which
    the shrunk predictions ``p_bar_g + beta (p_hat_i - p_bar_g)`` have the least weighted
    squared error, i.e. the least-squares shrinkage toward the group mean: 1 for a calibrated
    head (``E[r | p_hat] = p_hat``) whatever its skill, 0 for deviations unrelated to the
    labels, below 1 for an overconfident head. NaN when ``sum w x^2 = 0``.

    Examples
    --------
    >>> reliability_slope(np.array([-0.2, 0.2]), np.array([-0.2, 0.2]), np.ones(2))
    1.0
    >>> reliability_slope(np.array([-0.2, 0.2]), np.array([-0.1, 0.1]), np.ones(2))
    0.5
    """
    den = float(w @ (x * x))
    return float(w @ (x * y)) / den if den > 0 else float("nan")


def brier_skill(p_hat: ArrayLike, y: ArrayLike, p_ref: ArrayLike, w: ArrayLike | None = None):
    """``1 - sum w (p_hat - y)^2 / sum w (p_ref - y)^2`` (NaN when the reference is exact).

    Examples
    --------
    >>> brier_skill([1.0, 0.0], [1.0, 0.0], [0.5, 0.5])
    1.0
    """
    p, yy, r = (np.asarray(x, dtype=float).reshape(-1) for x in (p_hat, y, p_ref))
    ww = np.ones_like(yy) if w is None else np.asarray(w, dtype=float).reshape(-1)
    return skill_score((p - yy) ** 2, (r - yy) ** 2, ww)


def log_cost_r2(c_hat: ArrayLike, c: ArrayLike, c_ref: ArrayLike, w: ArrayLike | None = None):
    """``1 - sum w (log c_hat - log c)^2 / sum w (log c_ref - log c)^2`` over ``c > 0``.

    Examples
    --------
    >>> log_cost_r2([10.0, 20.0], [10.0, 20.0], [14.0, 14.0])
    1.0
    """
    ch, cc, cr = (np.asarray(x, dtype=float).reshape(-1) for x in (c_hat, c, c_ref))
    ww = np.ones_like(cc) if w is None else np.asarray(w, dtype=float).reshape(-1)
    pos = cc > 0
    if not pos.any():
        return float("nan")
    return skill_score(log_cost_error(ch[pos], cc[pos]), log_cost_error(cr[pos], cc[pos]),
                       ww[pos])


@dataclass(frozen=True)
class LinearProbe:
    """A fitted linear probe: ``p_hat = sigmoid((a . x + b) / T)``, ``c_hat = exp(a_c . x + b_c)``
    on projected standardised features ``x = ((u - mean) / scale) @ basis``.

    ``p_const`` and ``c_const`` are the constant predictor fitted on the same labels (the skill
    reference). ``lam_success`` / ``lam_cost`` are the penalties cross-validation chose.
    """

    mean: np.ndarray
    scale: np.ndarray
    basis: np.ndarray
    coef_success: np.ndarray
    intercept_success: float
    temperature: float
    coef_cost: np.ndarray
    intercept_cost: float
    lam_success: float
    lam_cost: float
    p_const: float
    c_const: float

    def outputs(self, features: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """``(logits, c_hat)``: the untempered success logits ``a . x + b`` and
        ``c_hat = exp(a_c . x + b_c)``, float64 arrays of shape ``features.shape[:-1]``, from
        one projection of the features (the costly part on a replay window)."""
        u = np.asarray(features, dtype=float)
        if u.ndim < 1 or u.shape[-1] != self.mean.size:
            raise ValueError(
                f"features must have shape (..., {self.mean.size}); got {u.shape}"
            )
        x = ((u - self.mean) / self.scale) @ self.basis
        logits = x @ self.coef_success + self.intercept_success
        return logits, np.exp(np.clip(x @ self.coef_cost + self.intercept_cost, -50.0, 50.0))

    def logits(self, features: ArrayLike) -> np.ndarray:
        """Untempered success logits ``a . x + b``, shape ``features.shape[:-1]``."""
        return self.outputs(features)[0]

    def predict(self, features: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """``(p_hat, c_hat)`` float64 arrays of shape ``features.shape[:-1]``, with
        ``p_hat = sigmoid(logits / temperature)``."""
        logits, c = self.outputs(features)
        return _sigmoid(logits / self.temperature), c


def _cv_folds(n: int, groups: np.ndarray | None, n_folds: int, rng) -> np.ndarray:
    if groups is not None and np.unique(groups).size >= n_folds:
        return group_folds(groups, n_folds, rng)
    # No groups: contiguous blocks (labels arrive in batches, so neighbours are correlated).
    return (np.arange(n) * n_folds) // max(n, 1)


def fit_linear_probe(
    features: ArrayLike,
    rewards: ArrayLike,
    costs: ArrayLike,
    weights: ArrayLike | None = None,
    *,
    groups: ArrayLike | None = None,
    lambdas: ArrayLike = DEFAULT_LAMBDAS,
    n_folds: int = 4,
    n_components: int | None = 64,
    passthrough: int = 0,
    rng: RNGLike = 0,
) -> LinearProbe:
    r"""Fit the success and cost probes, choosing each L2 penalty by K-fold cross-validation.

    Parameters
    ----------
    features : (n, H) array          prefix features ``u_i``
    rewards : (n,) array in [0, 1]   success labels
    costs : (n,) array >= 0          realised suffix tokens; 0 (prefix ended) trains the success
                                     probe only
    weights : (n,) array > 0, optional   IPW weights ``1 / pi_i`` (default 1)
    groups : (n,) array, optional    fold groups (e.g. prompt ids): no group is split across folds
    lambdas : sequence of float > 0  penalty grid
    n_folds : int >= 2               cross-validation folds (fewer when labels are scarce)
    n_components : int, optional     principal directions kept (None: all, ``H``)
    passthrough : int >= 0           the last ``passthrough`` columns are standardised but not
                                     projected: a few informative scalars (the confidence
                                     features) kept whole beside the principal directions of
                                     the others, which could otherwise drown them
    rng : seed for the group shuffle

    Returns
    -------
    LinearProbe

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(200, 5)); y = (u[:, 0] > 0).astype(float)
    >>> c = 30 * np.exp(u[:, 1])
    >>> probe = fit_linear_probe(u, y, c)
    >>> p, ch = probe.predict(u)
    >>> bool(brier_skill(p, y, np.full(200, probe.p_const)) > 0.5)
    True
    """
    u = check_finite("features", features)
    if u.ndim != 2 or u.shape[0] < 1:
        raise ValueError(f"features must have shape (n, H) with n >= 1; got {u.shape}")
    n = u.shape[0]
    y = check_finite("rewards", rewards).reshape(-1)
    c = check_finite("costs", costs).reshape(-1)
    w = np.ones(n) if weights is None else check_finite("weights", weights).reshape(-1)
    for name, arr in (("rewards", y), ("costs", c), ("weights", w)):
        if arr.shape != (n,):
            raise ValueError(f"{name} must have shape ({n},) like features[:, 0]; got {arr.shape}")
    if ((y < 0) | (y > 1)).any():
        raise ValueError("rewards must lie in [0, 1] (success labels)")
    if (c < 0).any():
        raise ValueError("costs must be >= 0 (suffix tokens)")
    if (w <= 0).any():
        raise ValueError("weights must be > 0 (inverse inclusion probabilities)")
    lams = np.asarray(lambdas, dtype=float).reshape(-1)
    if lams.size == 0 or (lams <= 0).any():
        raise ValueError(f"lambdas must be a non-empty grid of values > 0; got {lams.tolist()}")
    g = None if groups is None else np.asarray(groups).reshape(-1)
    gen = as_generator(rng)

    mean = u.mean(0)
    scale = u.std(0)
    scale = np.where(scale > 1e-8 * max(float(scale.max()), 1e-300), scale, 1.0)
    z = (u - mean) / scale
    if n_components is not None and (isinstance(n_components, bool) or n_components < 1):
        raise ValueError(f"n_components must be a positive int or None; got {n_components!r}")
    if isinstance(passthrough, bool) or not isinstance(passthrough, (int, np.integer)) or not (
        0 <= passthrough <= z.shape[1]
    ):
        raise ValueError(
            f"passthrough must be an int in [0, H = {z.shape[1]}] (feature columns kept "
            f"unprojected); got {passthrough!r}"
        )
    h = z.shape[1] - int(passthrough)
    zp = z[:, :h]
    # Fewer labels than features: the L2 solution lies in the span of the (centred) training
    # features anyway, so projecting on their n principal directions loses nothing.
    k = min(zp.shape) if n_components is None else min(int(n_components), *zp.shape)
    if 0 < k < h:
        _, _, vt = np.linalg.svd(zp - zp.mean(0), full_matrices=False)
        projection = vt[:k].T
    else:
        projection = np.eye(h)
    # block diagonal: the projected columns, then the passthrough columns as they are
    basis = np.zeros((z.shape[1], projection.shape[1] + int(passthrough)))
    basis[:h, : projection.shape[1]] = projection
    basis[h:, projection.shape[1] :] = np.eye(int(passthrough))
    x = z @ basis
    p_const = float(np.clip(ipw_mean(y, w), 1e-6, 1 - 1e-6))
    pos = c > 0
    c_const = ipw_geometric_mean(c, w, 1.0)

    k = int(min(n_folds, n))
    folds = _cv_folds(n, g, k, gen) if k >= 2 else None

    # --- success: CV over the penalty path, warm-started from the strongest penalty down.
    lam_p, temperature = float(lams.max()), 1.0
    if folds is not None and 0 < p_const < 1 and y.min() < y.max():
        order = np.sort(lams)[::-1]
        brier = np.zeros(order.size)
        oof = np.zeros((order.size, n))
        for f in range(k):
            tr, te = folds != f, folds == f
            if not te.any() or y[tr].min() == y[tr].max():
                continue
            init = None
            for j, lam in enumerate(order):
                init = fit_logistic(x[tr], y[tr], w[tr], lam, init=init)
                oof[j, te] = x[te] @ init[0] + init[1]
                brier[j] += w[te] @ (_sigmoid(oof[j, te]) - y[te]) ** 2
        j = int(np.argmin(brier))
        lam_p = float(order[j])
        temperature = fit_temperature(oof[j], y, weights=w)
    if y.min() < y.max():
        a_p, b_p = fit_logistic(x, y, w, lam_p)
    else:  # one class only: the constant is all the labels say
        a_p, b_p = np.zeros(x.shape[1]), float(np.log(p_const / (1 - p_const)))

    # --- cost: ridge on log C over rows with a suffix, penalty by CV.
    lam_c = float(lams.max())
    a_c, b_c = np.zeros(x.shape[1]), float(np.log(c_const))
    if pos.sum() >= 2:
        lc = np.log(np.where(pos, c, 1.0))
        if folds is not None and pos.sum() >= 2 * k:
            err = np.zeros(lams.size)
            for f in range(k):
                tr, te = pos & (folds != f), pos & (folds == f)
                if tr.sum() < 2 or not te.any():
                    continue
                for j, (a, b) in enumerate(fit_ridge(x[tr], lc[tr], w[tr], lams)):
                    err[j] += w[te] @ (x[te] @ a + b - lc[te]) ** 2
            lam_c = float(lams[int(np.argmin(err))])
        a_c, b_c = fit_ridge(x[pos], lc[pos], w[pos], [lam_c])[0]
    return LinearProbe(
        mean=mean, scale=scale, basis=basis, coef_success=a_p, intercept_success=float(b_p),
        temperature=float(temperature), coef_cost=a_c, intercept_cost=float(b_c),
        lam_success=lam_p, lam_cost=lam_c, p_const=p_const, c_const=c_const,
    )
