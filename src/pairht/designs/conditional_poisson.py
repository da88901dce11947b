"""Conditional Poisson sampling: the maximum-entropy design of fixed size with given pi."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import check_integer_sum, check_table_size
from pairht.designs import _cps_kernels as _k
from pairht.designs.base import Design, all_masks, srswor_inclusion

#: Calibration stops once max |pi(w) - pi| / (pi (1 - pi)) is below this (round-off level).
_CALIBRATION_TOL = 1e-15
#: A calibration that cannot reach this accuracy is an error, not a silent approximation.
_CALIBRATION_REQUIRED = 1e-12
_MAX_NEWTON = 100


class ConditionalPoisson(Design):
    r"""Conditional Poisson (rejective, maximum-entropy) sampling of fixed size ``n = sum(pi)``.

    Samples of exactly ``n`` units are drawn with probability proportional to the product of
    working weights ``w_k > 0`` (Hajek 1964):

    .. math:: P(s) = \frac{\prod_{k \in s} w_k}{e_n(w)}, \quad |s| = n, \qquad
              \pi_S = \frac{\prod_{k \in S} w_k \; e_{n-|S|}(w \setminus S)}{e_n(w)},

    with ``e_m`` the elementary symmetric polynomial of degree ``m``. The weights are calibrated
    so that the first-order inclusion probabilities equal ``pi`` (Chen, Dempster & Liu 1994),
    to about 1e-15, by Newton's method on ``log w``: steps with Hajek's approximation of the
    Jacobian ``d pi_k / d log w_l = pi_kl - pi_k pi_l`` (``O(N n)`` each) while they converge
    fast, and exact-Jacobian steps (``O(N^2 n)``) when they stall; about ten iterations in
    all, where the classical fixed point ``w <- w pi / pi(w)`` needs hundreds.

    Every probability is computed from the sequential form of the design (Tillé 2006, §5.6):
    at unit ``j`` with ``r`` units still to pick, ``j`` enters with probability
    ``q_jr = w_j e_{r-1}(w_{j+1:}) / e_r(w_{j:})``. ``pi_S`` for any set ``S`` is a sum of
    products of these transition probabilities (forward probabilities times a backward sweep
    constrained to include ``S``), built from ratios of consecutive elementary symmetric
    polynomials; only positive terms are added, so the result is accurate to a few ulps times
    ``N`` even for ``pi`` near 0 or 1 and for tied or nearly tied weights. Units with
    ``pi = 1`` are always included and units with ``pi = 0`` never; the design runs on the
    remaining units with ``n`` reduced accordingly.

    Cost: ``.joint()`` is ``O(N^2 n)``; ``.inclusion`` of ``m`` sets of size ``k`` is
    ``O(n (m + D N))`` with ``D`` the number of distinct ``(k-1)``-suffixes among the sets.

    Parameters
    ----------
    pi : (N,) array_like
        Target inclusion probabilities in [0, 1] whose sum is an integer ``n`` (within 1e-9;
        a sum off by less than that is spread over the units with ``0 < pi < 1``
        proportionally to ``pi (1 - pi)`` before calibration, and ``.pi`` reports the result).

    Attributes
    ----------
    n : int
        The fixed sample size.
    working_weights : (N,) ndarray
        The calibrated ``w`` (geometric mean 1 over the units with ``0 < pi < 1``; 0 for
        ``pi = 0`` and ``inf`` for ``pi = 1``).
    calibration_error : float
        ``max_k |pi_k(w) - pi_k|`` reached by the calibration (below 1e-12, else an error).

    Raises
    ------
    ValueError
        If ``pi`` is not a 1-d array of probabilities or its sum is not an integer.

    References
    ----------
    Hajek, J. (1964). Asymptotic theory of rejective sampling with varying probabilities from a
    finite population. Ann. Math. Statist. 35(4), 1491-1523.
    Chen, X.-H., Dempster, A. P. & Liu, J. S. (1994). Weighted finite population sampling to
    maximize entropy. Biometrika 81(3), 457-469.
    Aires, N. (1999). Algorithms to find exact inclusion probabilities for conditional Poisson
    sampling and Pareto pi-ps sampling designs. Methodol. Comput. Appl. Probab. 1, 457-469.
    Tillé, Y. (2006). Sampling Algorithms. Springer, ch. 5.
    Matei, A. & Tillé, Y. (2005). Evaluation of variance approximations and estimators in
    maximum entropy sampling with unequal probability and fixed sample size. J. Off. Stat.
    21(4), 543-570.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.designs import ConditionalPoisson
    >>> d = ConditionalPoisson([0.2, 0.5, 0.6, 0.7])
    >>> d.n
    2
    >>> bool(np.allclose(d.joint().sum(axis=1), d.n * d.pi))
    True
    >>> d.sample(rng=0, size=3).sum(axis=1).tolist()
    [2, 2, 2]
    """

    name = "conditional_poisson"
    fixed_size = True
    max_inclusion_order = 64

    def __init__(self, pi: ArrayLike) -> None:
        super().__init__(pi)
        target = self._target
        n = check_integer_sum(
            "pi",
            target,
            hint="ConditionalPoisson has a fixed sample size; use Bernoulli for a random "
            "size, or rescale pi.",
        )
        target = _project_sum(target, n)
        one = target == 1.0
        free = (target > 0.0) & ~one
        # equal pi, all free: simple random sampling without replacement (closed forms)
        self._srswor = bool(free.all() and np.all(target == target[0]))
        n_free = n - int(one.sum())
        self.n = n
        self._one = one
        self._free = np.flatnonzero(free)
        self._n_free = n_free
        # unit -> index among free units, -1 for pi = 1, -2 for pi = 0
        pos = np.full(self.n_units, -2, dtype=np.int64)
        pos[one] = -1
        pos[self._free] = np.arange(self._free.size)
        self._pos = pos
        weights = np.where(one, np.inf, 0.0)
        if self._free.size:
            # the sampling and forward tables are (N_free + 1) x (n_free + 1) each
            check_table_size(
                f"ConditionalPoisson with N = {self._free.size} free units and sample size "
                f"n = {n_free} (its (N + 1) x (n + 1) sampling tables)",
                (self._free.size + 1) * (n_free + 1),
                "use fewer units, or the Bernoulli or dependent_rounding design (no tables)",
            )
            theta, pi_free, err = _calibrate(target[self._free], n_free)
            w = np.exp(theta)
            self._q, self._qc = _k.draw_tables(w, n_free)
            self._alpha = _k.forward(self._q, self._qc)
            self._pi_free = pi_free
            weights[self._free] = w
            target[self._free] = pi_free
        else:
            err = 0.0
        self.calibration_error = float(err)
        self.working_weights = weights
        self.working_weights.setflags(write=False)
        target.setflags(write=False)
        self._target = target

    @property
    def log_weights(self) -> np.ndarray:
        """``log(working_weights)``: ``-inf`` for ``pi = 0`` and ``inf`` for ``pi = 1``."""
        with np.errstate(divide="ignore"):
            return np.log(self.working_weights)

    # ------------------------------------------------------------------ hooks
    def _free_inclusion(self, rows: np.ndarray) -> np.ndarray:
        """Inclusion of rows of free-unit indices (ascending, ``-1`` padding first)."""
        return _free_inclusion(self._q, self._qc, self._alpha, self._pi_free, rows)

    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        pos = self._pos[rows]
        if self._one.any() or not self._free.size == self.n_units:
            impossible = np.any(pos == -2, axis=1)
            pos = np.sort(np.where(pos < 0, -1, pos), axis=1)
        else:  # every unit is free: rows stay sorted
            impossible = None
        out = np.ones(rows.shape[0]) if self._free.size == 0 else self._free_inclusion(pos)
        if impossible is not None:
            out[impossible] = 0.0
        return out

    def _exchangeable_inclusion(self, k: int) -> float | None:
        """Simple random sampling without replacement when every ``pi`` is equal (all units
        free): ``pi_S = C(N - k, n - k) / C(N, n) = prod_{t < k} (n - t) / (N - t)``."""
        if not self._srswor:
            return None
        return float(srswor_inclusion(self.n, self.n_units, k))

    def _joint(self) -> np.ndarray:
        N = self.n_units
        ii, jj = np.triu_indices(N, 1)
        out = np.zeros((N, N))
        vals = self._inclusion_rows(np.stack([ii, jj], axis=1).astype(np.int64))
        out[ii, jj] = vals
        out[jj, ii] = vals
        return out

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        out = np.zeros((size, self.n_units), dtype=bool)
        out[:, self._one] = True
        if self._free.size:
            u = rng.random((size, self._free.size))
            out[:, self._free] = _k.sample_chain(self._q, u)
        return out

    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        nf = self._free.size
        masks = np.zeros((1, self.n_units), dtype=bool)
        probs = np.ones(1)
        if nf:
            sub = all_masks(nf)
            sub = sub[sub.sum(axis=1) == self._n_free]
            probs = _k.path_probabilities(self._q, self._qc, sub)
            masks = np.zeros((sub.shape[0], self.n_units), dtype=bool)
            masks[:, self._free] = sub
        masks[:, self._one] = True
        return masks, probs


def _project_sum(target: np.ndarray, n: int) -> np.ndarray:
    """Make ``sum(target) == n`` exactly-ish by moving the units with ``0 < pi < 1``.

    The gap is at most 1e-9 (checked before). If the free units must all be out (``n`` equals
    the number of ones) or all in, they are set to 0 or 1. Otherwise ``pi_k`` moves by
    ``gap * pi_k (1 - pi_k) / sum_l pi_l (1 - pi_l)``, which stays inside (0, 1) whenever
    the relative shift is below 1, which is why this weighting is used.
    """
    out = target.copy()
    free = (out > 0.0) & (out < 1.0)
    n_free = n - int(np.sum(out == 1.0))
    if not free.any():
        return out
    if n_free == 0 or n_free == int(free.sum()):
        out[free] = 0.0 if n_free == 0 else 1.0
        return out
    p = out[free]
    gap = n_free - float(np.sum(p))
    if gap == 0.0:
        return out
    spread = p * (1.0 - p)
    scale = gap / float(np.sum(spread))
    if abs(scale) >= 1.0:
        raise ValueError(
            f"pi must sum to an integer; sum(pi) misses {n} by {-gap!r}, more than the "
            f"units with 0 < pi < 1 can absorb. Rescale pi."
        )
    out[free] = p + scale * spread
    return out


def _free_inclusion(q, qc, alpha, pi, rows: np.ndarray) -> np.ndarray:
    """Batch inclusion on the free units: group rows by suffix, then one numba pass."""
    m, k = rows.shape
    if m == 0:
        return np.zeros(0)
    n_free = q.shape[0]
    if (k + 1) * np.log2(n_free + 1.0) < 62:
        gid, key = _k.group_codes(rows, n_free)
        order = np.argsort(key)
    else:  # sets too large to encode in an int64: group by lexicographic sort
        first = (rows < 0).sum(axis=1)
        keys = rows.copy()
        valid = first < k
        keys[np.flatnonzero(valid), first[valid]] = -1
        a = np.where(valid, rows[np.arange(m), np.minimum(first, k - 1)], -1)
        order = np.lexsort((-a, *[keys[:, c] for c in range(k - 1, -1, -1)]))
        _, gid = np.unique(keys, axis=0, return_inverse=True)
        gid = gid.reshape(-1).astype(np.int64)
    return _k.batch_inclusion(q, qc, alpha, pi, rows, gid, order.astype(np.int64))


def _joint_of(theta: np.ndarray, n: int) -> np.ndarray:
    """Full joint matrix (diagonal pi) of the free CPS with log-weights ``theta``."""
    q, qc = _k.draw_tables(np.exp(theta), n)
    alpha = _k.forward(q, qc)
    pi = _k.first_order(q, alpha)
    N = theta.size
    ii, jj = np.triu_indices(N, 1)
    vals = _free_inclusion(q, qc, alpha, pi, np.stack([ii, jj], axis=1).astype(np.int64))
    out = np.zeros((N, N))
    out[ii, jj] = vals
    out[jj, ii] = vals
    np.fill_diagonal(out, pi)
    return out


def _calibrate(target: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Log-weights ``theta`` with ``pi(exp(theta)) = target``.

    Cheap quasi-Newton iterations (:func:`_cps_kernels.fixed_point`) run while they converge
    fast; when they stall, one exact Newton step ``J d = target - pi`` with
    ``J = Pi - pi pi^T`` is taken, solved in the scaled variables ``D^{-1/2} J D^{-1/2}``,
    ``D = diag(pi (1 - pi))`` (unit diagonal, so units near 0 or 1 do not make the system
    numerically singular). ``J`` is singular along ``1`` (``w`` is defined up to scale), i.e.
    the scaled matrix along ``u ~ D^{1/2} 1``; the residual sums to zero, so adding ``u u^T``
    gives the minimum-norm step. Progress is measured in log-odds:
    ``max_k |target_k - pi_k| / (pi_k (1 - pi_k))``.
    """
    N = target.size
    theta = np.log(target) - np.log1p(-target)
    theta -= theta.mean()
    for _ in range(_MAX_NEWTON):
        theta, pi, comp, res, err = _k.fixed_point(theta, target, n, _CALIBRATION_TOL, 200)
        if err <= _CALIBRATION_TOL or err <= 1e-13:  # converged, or at round-off level
            break
        d = pi * comp
        s = 1.0 / np.sqrt(d)
        # the fixed point stalled: the exact step needs the N x N Jacobian (and a solve on it)
        check_table_size(
            f"ConditionalPoisson's calibration with N = {N} free units (a Newton step on an "
            f"N x N Jacobian)", N * N,
            "use fewer units, or the Bernoulli or dependent_rounding design (no calibration)",
        )
        jac = _joint_of(theta, n) - np.outer(pi, pi)
        np.fill_diagonal(jac, d)
        u = np.sqrt(d) / np.sqrt(d.sum())
        step = s * np.linalg.solve(s[:, None] * jac * s[None, :] + np.outer(u, u), s * res)
        improved = False
        for _ in range(40):  # backtracking: far from the solution a full step overshoots
            cand = _k.shifted(theta, step, 8.0)
            pi_c, comp_c, res_c, err_c = _k.calibration_state(cand, target, n)
            if err_c < err:
                theta, pi, comp, res, err, improved = cand, pi_c, comp_c, res_c, err_c, True
                break
            step = 0.5 * step
        if not improved:
            break
    worst = float(np.max(np.abs(res)))
    if not worst <= _CALIBRATION_REQUIRED:
        raise RuntimeError(
            f"ConditionalPoisson calibration reached max |pi(w) - pi| = {worst:.3g} only "
            f"(N = {N}, n = {n}); please report this input."
        )
    return theta, pi, worst
