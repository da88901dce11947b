r"""PAIR's continuation program over the unfinished candidates, finished candidates fixed at 1.

The whole group's program (PAIR paper, Eq. convex-objective) is

.. math:: \min_\pi \sum_{i<j} \frac{a_{ij}}{\pi_i \pi_j} + \sum_i \frac{b_i}{\pi_i}.

A finished candidate ``f`` is kept, ``pi_f = 1``: the terms among finished candidates are
constants and an edge ``(i, f)`` to an unfinished ``i`` adds ``a_if / pi_i``. So, exactly, the
program is one over the unfinished set ``U`` alone,

.. math::
    \min_{\pi_U} \sum_{i<j \in U} \frac{a_{ij}}{\pi_i \pi_j} + \sum_{i \in U} \frac{b'_i}{\pi_i},
    \qquad b'_i = b_i + \sum_{f \in F} a_{if},

subject to ``sum_U c_i pi_i <= budget`` and ``pi_min <= pi_i <= 1`` (realised accounting:
finished candidates cost nothing), optionally with ``sum_U pi_i = n`` (:func:`fold_finished`,
solved by :func:`pairht.allocation.solve_program`, which takes ``b`` as given).

**Fixed size at any budget** (``size="auto"``, :func:`solve_pair`): with ``k`` unfinished
candidates and ``t = min(1, budget / sum_U c_u)``, the expected size of uniform SRSWOR at the
same budget is ``S = k t``. With ``n = floor(S)`` and ``f = S - n`` the program is solved at
size ``n`` with budget ``(n / k) sum_U c_u`` and at size ``n + 1`` with ``((n + 1) / k)
sum_U c_u`` (the same budget per completion as uniform; each is affordable, since uniform
``n / k`` costs exactly that), giving ``pi_lo`` and ``pi_hi``; the draw is the exact mixture
``MixedSize.from_components(pi_lo, pi_hi, f)`` (size ``n`` with probability ``1 - f``), whose
marginals ``pi = (1 - f) pi_lo + f pi_hi`` spend the budget in expectation. A group whose
``S`` is below ``max(2, ceil(k pi_min))`` affords no fixed size of at least one pair: it gets
the Bernoulli program and a Bernoulli draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pairht.allocation.energy import NAME as LENGTH_ENERGY
from pairht.allocation.energy import length_energy
from pairht.allocation.inputs import StepInputs
from pairht.allocation.proxies import PROXY_KINDS, edge_proxy, shared_vertex_term
from pairht.allocation.sizes import largest_affordable_size
from pairht.allocation.solver import solve_program

#: Edge proxies of the ``pair`` allocator: the allocation module's, and the length energy
#: (:mod:`pairht.allocation.energy`, needs ``StepInputs.prefix_tokens``).
PROXIES: tuple[str, ...] = (*PROXY_KINDS, LENGTH_ENERGY)
#: A size within this of an integer is that integer (:class:`~pairht.designs.MixedSize`'s).
_INTEGER_TOL = 1e-9


def program_terms(inputs: StepInputs, proxy: str = "disagreement", covariance_term: bool = True,
                  score_norm: Any = None, energy: Any = None) -> tuple[np.ndarray, np.ndarray]:
    r"""Edge proxy ``a`` ``(B, G, G)`` and shared-vertex term ``b`` ``(B, G)`` of whole groups.

    ``"disagreement"``, ``"score_norm"``, ``"energy"``: ``a`` from
    :func:`pairht.allocation.edge_proxy`, ``b_i = (sum_{j != i} sqrt(a_ij))^2 - sum_{j != i}
    a_ij`` (:func:`pairht.allocation.covariance_term`). ``"length_energy"``:
    :func:`pairht.allocation.energy.length_energy` at the predicted total length
    ``max(prefix_tokens + c_hat, 1)`` (finished: the prefix alone), its ``b`` computed
    directly. ``covariance_term=False`` sets ``b = 0``.
    """
    if proxy not in PROXIES:
        raise ValueError(f"proxy must be one of {PROXIES}; got {proxy!r}")
    p = inputs.p_hat
    if proxy == LENGTH_ENERGY:
        if inputs.prefix_tokens is None:
            raise ValueError(f"proxy={LENGTH_ENERGY!r} needs StepInputs.prefix_tokens (score "
                             f"energy grows with the predicted total length prefix + c_hat); "
                             f"got prefix_tokens=None")
        a, b = length_energy(p, np.maximum(inputs.prefix_tokens + inputs.c_hat, 1.0))
    else:
        a = edge_proxy(p, kind=proxy, score_norm=score_norm, energy=energy)  # type: ignore[arg-type]
        b = shared_vertex_term(a)
    if not covariance_term:
        b = np.zeros_like(b)
    return a, b


def fold_finished(a: np.ndarray, b: np.ndarray, unf: np.ndarray, k: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    r"""``(a_U, b')`` of the program over the ``k`` unfinished candidates of each group.

    ``a_U`` ``(m, k, k)`` is ``a`` restricted to the unfinished candidates and ``b'_i = b_i +
    sum_{f finished} a_if`` ``(m, k)``: with ``pi_f = 1`` an edge to a finished candidate is
    observed whenever ``i`` is, so it weighs like ``i``'s own term (module doc).

    Examples
    --------
    >>> a = np.array([[[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]]])
    >>> a_u, b_u = fold_finished(a, np.zeros((1, 3)), np.array([[True, False, True]]), 2)
    >>> a_u.tolist(), b_u.tolist()  # candidate 1 finished: a_01 -> b_0, a_21 -> b_2
    ([[[0.0, 2.0], [2.0, 0.0]]], [[1.0, 3.0]])
    """
    cross = np.einsum("mij,mj->mi", a, (~unf).astype(np.float64))
    a_u = a[unf[:, :, None] & unf[:, None, :]].reshape(-1, k, k)
    b_u = (b + cross)[unf].reshape(-1, k)
    return a_u, b_u


@dataclass
class PairSolution:
    r"""PAIR's probabilities of a batch and, for fixed-size groups, their two components.

    ``pi`` ``(B, G)`` (finished: 1); ``pi_lo``, ``pi_hi`` ``(B, G)`` and ``weight_hi`` ``(B,)``
    with ``pi = (1 - weight_hi) pi_lo + weight_hi pi_hi`` where ``fixed_size`` ``(B,)`` holds
    (sizes ``size`` and ``size + 1`` over the unfinished candidates); ``size`` is -1 for a
    Bernoulli group. ``status``, ``converged``, ``kkt_residual``, ``fallback_used`` per group.
    """

    pi: np.ndarray
    pi_lo: np.ndarray
    pi_hi: np.ndarray
    weight_hi: np.ndarray
    fixed_size: np.ndarray
    size: np.ndarray
    size_clipped: np.ndarray
    status: np.ndarray
    converged: np.ndarray
    kkt_residual: np.ndarray
    fallback_used: np.ndarray


def _constant_on(x: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``(B,)`` whether ``x`` takes one value on ``where`` (exact equality, as after shrink)."""
    hi = np.where(where, x, -np.inf).max(axis=1)
    lo = np.where(where, x, np.inf).min(axis=1)
    return hi == lo


def symmetric_groups(inputs: StepInputs, proxy: str, score_norm: Any = None) -> np.ndarray:
    """``(B,)`` groups whose program is invariant under permuting the unfinished candidates.

    Equal ``p_hat`` and ``c_hat`` on them, and equal inputs of the proxy (``prefix_tokens``
    of the length energy, ``score_norm``); a user-given ``energy`` matrix never is. Then the
    folded program (strictly convex, symmetric) has the uniform optimum.
    """
    unf = inputs.unfinished
    same = _constant_on(inputs.p_hat, unf) & _constant_on(inputs.c_hat, unf)
    if proxy == LENGTH_ENERGY and inputs.prefix_tokens is not None:
        same &= _constant_on(inputs.prefix_tokens, unf)
    elif proxy == "score_norm":
        same &= _constant_on(np.asarray(score_norm, dtype=np.float64), unf)
    elif proxy == "energy":
        same[:] = False
    return same


def parse_size(size: Any, B: int) -> tuple[str, np.ndarray | None]:
    """``("bernoulli" | "auto" | "fixed", n)`` from ``None``, ``"auto"`` or an int size."""
    if size is None:
        return "bernoulli", None
    if isinstance(size, str):
        if size != "auto":
            raise ValueError(f"size must be None, 'auto' or an int (unfinished candidates to "
                             f"complete); got {size!r}")
        return "auto", None
    n = np.asarray(size)
    if isinstance(size, (bool, np.bool_)) or n.dtype.kind not in "iu" or n.ndim > 1:
        raise TypeError(f"size must be None, 'auto' or an int (unfinished candidates to "
                        f"complete); got {size!r}")
    return "fixed", np.broadcast_to(n, (B,)).astype(np.int64)


def solve_pair(inputs: StepInputs, *, pi_min: float, proxy: str = "disagreement",
               covariance_term: bool = True, size: Any = None, warm_start: Any = None,
               score_norm: Any = None, energy: Any = None, tol: float = 1e-8,
               max_iter: int = 100) -> PairSolution:
    r"""PAIR's program on every group of ``inputs`` (module doc), by its ``size`` rule.

    ``size=None``: Bernoulli program (no size row). ``"auto"``: the two neighbouring sizes of
    uniform SRSWOR's ``S = k min(1, budget / sum_U c_u)``, mixed. An int ``n``: the program
    with ``sum_U pi = n``, ``n`` clipped to the unfinished count ``k`` and to the largest size
    the budget affords (``size_clipped``). Groups that afford no size ``>= max(2, ceil(k
    pi_min))`` get the Bernoulli program (``fixed_size`` False). One unfinished candidate:
    ``min(1, budget / c)``. Groups whose program is symmetric (:func:`symmetric_groups`) get
    the uniform optimum in closed form (status ``"symmetric"``). ``pi_min`` is validated by
    the caller.
    """
    B, G = inputs.shape
    rule, n_req = parse_size(size, B)
    unf, n_u = inputs.unfinished, inputs.n_unfinished
    sol = PairSolution(
        pi=np.ones((B, G)), pi_lo=np.ones((B, G)), pi_hi=np.ones((B, G)), weight_hi=np.zeros(B),
        fixed_size=np.zeros(B, dtype=bool), size=np.full(B, -1, dtype=np.int64),
        size_clipped=np.zeros(B, dtype=bool),
        status=np.where(n_u == 0, "all_finished", "optimal").astype(object),
        converged=np.ones(B, dtype=bool), kkt_residual=np.zeros(B),
        fallback_used=np.zeros(B, dtype=bool))
    t = inputs.share  # the ratio as given: never budget / full again
    single = n_u == 1
    sol.pi[single] = np.where(unf[single], t[single, None], 1.0)
    if not (n_u >= 2).any():
        sol.pi_lo[:], sol.pi_hi[:] = sol.pi, sol.pi
        return sol
    a, b = program_terms(inputs, proxy, covariance_term, score_norm, energy)
    sym = symmetric_groups(inputs, proxy, score_norm)
    opts = {"tol": tol, "max_iter": max_iter}
    for k in (int(v) for v in np.unique(n_u[n_u >= 2])):
        rows = np.flatnonzero(n_u == k)
        msk = unf[rows]
        a_u, b_u = fold_finished(a[rows], b[rows], msk, k)
        p_u = inputs.p_hat[rows][msk].reshape(-1, k)
        c_u = inputs.c_hat[rows][msk].reshape(-1, k)
        w_u = None if warm_start is None else np.asarray(warm_start)[rows][msk].reshape(-1, k)
        prob = _Group(rows, msk, k, p_u, c_u, a_u, b_u, w_u, inputs.budget[rows], t[rows],
                      sym[rows], pi_min, opts)
        lower = max(2, int(np.ceil(k * pi_min - 1e-12)))
        bern = np.ones(rows.size, dtype=bool)
        if rule == "auto":
            S = k * t[rows]
            n = np.floor(S + _INTEGER_TOL).astype(np.int64)
            f = np.where(S - n > _INTEGER_TOL, S - n, 0.0)
            ok = (n >= lower) & (n < k)
            prob.fixed(sol, ok, n, f, c_u.sum(axis=1))
            bern = ~ok & (n < k)
            done = ~ok & ~bern  # S = k: every candidate, pi = 1
            sol.size[rows[done]] = k
            sol.status[rows[done]] = "full"
        elif rule == "fixed":
            assert n_req is not None
            want = np.minimum(n_req[rows], k)
            n = np.minimum(want, largest_affordable_size(c_u, inputs.budget[rows], pi_min))
            ok = n >= lower
            sol.size_clipped[rows] = n < want
            prob.fixed(sol, ok, n, np.zeros(rows.size), None)
            bern = ~ok
        prob.bernoulli(sol, bern)
    bern_rows = ~sol.fixed_size
    sol.pi_lo[bern_rows] = sol.pi[bern_rows]
    sol.pi_hi[bern_rows] = sol.pi[bern_rows]
    sol.weight_hi[bern_rows] = 0.0
    return sol


@dataclass
class _Group:
    """The folded programs of the groups with ``k`` unfinished candidates (rows ``rows``)."""

    rows: np.ndarray
    msk: np.ndarray
    k: int
    p: np.ndarray
    c: np.ndarray
    a: np.ndarray
    b: np.ndarray
    warm: np.ndarray | None
    budget: np.ndarray
    share: np.ndarray  # min(1, budget_ratio): the symmetric Bernoulli optimum
    sym: np.ndarray
    pi_min: float
    opts: dict[str, Any]

    def _put(self, out: np.ndarray, sel: np.ndarray, sub: np.ndarray) -> None:
        block = out[self.rows[sel]]
        block[self.msk[sel]] = sub.reshape(-1)
        out[self.rows[sel]] = block

    def _solve(self, sol: PairSolution, sel: np.ndarray, budget: np.ndarray,
               size: np.ndarray | None) -> np.ndarray:
        # size None: budget is the groups' own (self.budget[sel]), their share self.share[sel]
        """Solved ``(m, k)`` pi of the groups ``sel`` (closed form where symmetric)."""
        out = np.empty((int(sel.sum()), self.k))
        sym = self.sym[sel]
        if sym.any():
            if size is None:
                out[sym] = self.share[sel][sym][:, None]
            else:
                out[sym] = (size[sym] / self.k)[:, None]
        hard = ~sym
        idx = self.rows[sel]
        sol.status[idx[sym]] = "symmetric"
        if hard.any():
            s = np.flatnonzero(sel)[hard]
            res = solve_program(self.p[s], self.c[s], budget[hard], self.a[s], self.b[s],
                                self.pi_min, size=None if size is None else size[hard],
                                fallback=True,
                                warm_start=None if self.warm is None else self.warm[s],
                                **self.opts)
            out[hard] = res.pi
            rows = idx[hard]
            # Two solves per group (sizes n and n + 1): keep the worse outcome of each field.
            bad = ~np.asarray(res.converged) | np.asarray(res.fallback_used)
            keep = sol.converged[rows] & ~sol.fallback_used[rows]
            sol.status[rows] = np.where(keep | bad, np.asarray(res.status, dtype=object),
                                        sol.status[rows])
            sol.converged[rows] &= np.asarray(res.converged, dtype=bool)
            sol.fallback_used[rows] |= np.asarray(res.fallback_used, dtype=bool)
            sol.kkt_residual[rows] = np.maximum(sol.kkt_residual[rows],
                                                np.asarray(res.kkt_residual))
        return out

    def bernoulli(self, sol: PairSolution, sel: np.ndarray) -> None:
        if sel.any():
            self._put(sol.pi, sel, self._solve(sol, sel, self.budget[sel], None))

    def fixed(self, sol: PairSolution, sel: np.ndarray, n: np.ndarray, f: np.ndarray,
              full: np.ndarray | None) -> None:
        """Sizes ``n`` (and ``n + 1`` with weight ``f``); ``full``: the per-completion
        budget split of the ``"auto"`` rule, else the whole budget at size ``n``."""
        if not sel.any():
            return
        n, f = n[sel], f[sel]
        bud_lo = self.budget[sel] if full is None else full[sel] * n / self.k
        lo = self._solve(sol, sel, bud_lo, n)
        hi = lo.copy()
        up = f > 0
        if up.any():
            sub = np.flatnonzero(sel)[up]
            sel_hi = np.zeros_like(sel)
            sel_hi[sub] = True
            assert full is not None  # only the "auto" rule mixes two sizes
            hi[up] = self._solve(sol, sel_hi, full[sub] * (n[up] + 1) / self.k, n[up] + 1)
        self._put(sol.pi_lo, sel, lo)
        self._put(sol.pi_hi, sel, hi)
        self._put(sol.pi, sel, (1.0 - f)[:, None] * lo + f[:, None] * hi)
        sol.weight_hi[self.rows[sel]] = f
        sol.fixed_size[self.rows[sel]] = True
        sol.size[self.rows[sel]] = n
