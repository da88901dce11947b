r"""Allocation rules of the step, one small registered object each.

An allocator maps a batch's :class:`~pairht.step.StepInputs` to continuation probabilities
``pi`` of shape ``(B, G)`` over *all* candidates (finished ones exactly 1) and per-prompt
``info``: ``status`` (str), ``converged`` (bool), and where it applies ``kkt_residual``,
``fallback_used``, ``unspent_budget`` and ``design`` (the registry name of the design the
rule means, used when the caller names none). :data:`ALLOCATORS` is the only source of
allocator names; :func:`register_allocator` adds one.

Every built-in rule spends the budget on the unfinished candidates only (realised
accounting):

* ``"full"`` -- ``pi = 1`` (no generation saved; the budget is ignored);
* ``"uniform"`` -- ``pi_i = min(1, B / sum_u c_u)`` among unfinished, Bernoulli design;
* ``"srswor"`` -- the same ``pi``, fixed-size uniform design (SRSWOR of the unfinished, at a
  non-integer expected size the exact mixture of the two neighbouring sizes);
* ``"pointwise"`` -- Neyman-type ``pi_i ∝ sqrt(p_i (1 - p_i) / c_i)`` among unfinished
  (:func:`pairht.allocation.pointwise_allocation`);
* ``"pair"`` -- PAIR's convex program (:func:`pairht.allocation.allocate`) with the finished
  candidates fixed at 1: their edges to unfinished candidates stay in the objective.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pairht.allocation._checks import check_pi_min
from pairht.step.inputs import StepInputs

#: Cost the solver sees for a finished candidate, relative to the group's mean unfinished
#: cost: small enough that the optimum puts it at 1 (its objective gradient is negative
#: wherever it has an edge) and that the budget it absorbs (at most this fraction of a mean
#: suffix per finished candidate) is below the solver's own tolerance.
FINISHED_COST = 1e-9


@runtime_checkable
class Allocator(Protocol):
    """One allocation rule: ``pi(inputs, **options) -> (pi, info)`` (see module doc)."""

    name: str

    def pi(self, inputs: StepInputs, **options: Any) -> tuple[np.ndarray, dict[str, Any]]:
        """``(B, G)`` probabilities over all candidates (finished = 1) and per-prompt info."""
        ...


#: name -> allocator object; the only source of allocator names.
ALLOCATORS: dict[str, Allocator] = {}


def register_allocator(name: str) -> Callable[[Any], Any]:
    """Decorator registering an allocator class (instantiated without arguments) or object.

    Examples
    --------
    >>> import numpy as np
    >>> @register_allocator("half_doc_example")
    ... class Half:
    ...     name = "half_doc_example"
    ...     def pi(self, inputs, **options):
    ...         pi = np.where(inputs.finished, 1.0, 0.5)
    ...         return pi, {"status": np.full(pi.shape[0], "optimal")}
    >>> "half_doc_example" in ALLOCATORS
    True
    >>> del ALLOCATORS["half_doc_example"]
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str; got {name!r}")

    def add(obj: Any) -> Any:
        inst = obj() if isinstance(obj, type) else obj
        if getattr(inst, "name", name) != name:
            raise ValueError(f"allocator registered as {name!r} has name {inst.name!r}; they "
                             f"must agree")
        if not callable(getattr(inst, "pi", None)):
            raise TypeError(f"allocator {name!r} must have a method pi(inputs, **options)")
        if name in ALLOCATORS and ALLOCATORS[name] is not inst:
            raise ValueError(f"allocator name {name!r} is already registered "
                             f"({type(ALLOCATORS[name]).__name__})")
        ALLOCATORS[name] = inst
        return obj

    return add


def get_allocator(name: str) -> Allocator:
    """The allocator registered as ``name`` (the comparators are registered on first miss)."""
    if isinstance(name, str) and name not in ALLOCATORS:
        _load_comparators()
    if not isinstance(name, str) or name not in ALLOCATORS:
        raise ValueError(f"allocator must be one of {allocator_names()}; got {name!r}")
    return ALLOCATORS[name]


def allocator_names() -> list[str]:
    """Every registered allocator name, the paper's comparators included (sorted)."""
    _load_comparators()
    return sorted(ALLOCATORS)


def _load_comparators() -> None:
    try:
        from pairht.comparators.allocators import register_comparators
    except ImportError:  # pragma: no cover - the comparators are part of the core
        return
    register_comparators()


# ------------------------------------------------------------------------------ helpers
def _info(B: int, status: str | np.ndarray, unspent: np.ndarray, design: str,
          **extra: Any) -> dict[str, Any]:
    st = np.broadcast_to(np.asarray(status, dtype=object), (B,)).copy()
    return {"status": st, "converged": np.ones(B, dtype=bool), "kkt_residual": np.zeros(B),
            "fallback_used": np.zeros(B, dtype=bool), "unspent_budget": unspent,
            "design": design, **extra}


def check_floor(inputs: StepInputs, pi_min: float) -> float:
    r"""``pi_min`` checked, and every budget at least the floor's cost ``pi_min sum_u c_u``."""
    lo = check_pi_min(pi_min)
    floor = lo * inputs.full_cost
    bad = inputs.budget < floor * (1.0 - 1e-12)
    if bad.any():
        b = int(np.argmax(bad))
        raise ValueError(
            f"budget is infeasible: it must be at least the floor's cost pi_min * sum of the "
            f"unfinished candidates' c_hat = {float(floor[b])!r} (pi_min = {lo}); got "
            f"budget[{b}] = {float(inputs.budget[b])!r}")
    return lo


def expected_cost(inputs: StepInputs, pi: np.ndarray) -> np.ndarray:
    """``(B,)`` expected realised suffix cost ``sum_{i unfinished} c_i pi_i``."""
    return np.where(inputs.finished, 0.0, inputs.c_hat * pi).sum(axis=1)


def uniform_pi(inputs: StepInputs) -> np.ndarray:
    """``min(1, budget / sum_u c_u)`` on unfinished candidates, 1 on finished ones."""
    full = inputs.full_cost
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(full > 0, np.minimum(1.0, inputs.budget / np.where(full > 0, full, 1.0)),
                     1.0)
    return np.where(inputs.finished, 1.0, t[:, None])


#: Options ``plan_continuations`` passes to every allocator; a rule that does not use one
#: ignores it (they are the plan's defaults), any other option must be the rule's own.
COMMON_OPTIONS = frozenset({"proxy", "covariance_term"})


def _no_size(name: str, size: Any, common: dict[str, Any]) -> None:
    """Refuse a size and unknown options for a rule that has neither."""
    unknown = sorted(set(common) - COMMON_OPTIONS)
    if unknown:
        raise TypeError(f"allocator {name!r} got unexpected options {unknown}")
    if size is not None:
        raise ValueError(f"size must be None for allocator {name!r} (its size follows from the "
                         f"budget; use design='conditional_poisson' or allocator='srswor' for "
                         f"a fixed-size draw); got size={size!r}")


# ------------------------------------------------------------------------------ built-ins
@register_allocator("full")
class FullAllocator:
    """``pi = 1``: every candidate is completed (plain GRPO / RLOO)."""

    name = "full"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, size: Any = None,
           **common: Any) -> tuple[np.ndarray, dict[str, Any]]:
        _no_size(self.name, size, common)
        check_pi_min(pi_min)  # validated for every rule, though pi = 1 never meets the floor
        pi = np.ones(inputs.shape)
        B = inputs.shape[0]
        return pi, _info(B, "full", inputs.budget - expected_cost(inputs, pi), "bernoulli")


@register_allocator("uniform")
class UniformAllocator:
    """Uniform among unfinished, Bernoulli: ``pi_u = min(1, budget / sum_u c_u)``."""

    name = "uniform"
    design = "bernoulli"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, size: Any = None,
           **common: Any) -> tuple[np.ndarray, dict[str, Any]]:
        _no_size(self.name, size, common)
        check_floor(inputs, pi_min)
        pi = uniform_pi(inputs)
        status = np.where(inputs.n_unfinished == 0, "all_finished", "optimal")
        return pi, _info(inputs.shape[0], status, inputs.budget - expected_cost(inputs, pi),
                         self.design)


@register_allocator("srswor")
class SRSWORAllocator(UniformAllocator):
    """Fixed-size uniform among unfinished (SRSWOR; mixed sizes at a non-integer size)."""

    name = "srswor"
    design = "conditional_poisson"


@register_allocator("pointwise")
class PointwiseAllocator:
    """Neyman-type ``pi_i ∝ sqrt(p_i (1 - p_i) / c_i)`` among unfinished, at the budget."""

    name = "pointwise"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, size: Any = None,
           **common: Any) -> tuple[np.ndarray, dict[str, Any]]:
        from pairht.allocation import pointwise_allocation

        _no_size(self.name, size, common)
        lo = check_floor(inputs, pi_min)
        pi = uniform_pi(inputs)  # groups with fewer than two unfinished: the only rule
        n_u = inputs.n_unfinished
        for k in np.unique(n_u[n_u >= 2]):  # one batched call per number of unfinished
            rows = np.flatnonzero(n_u == k)
            unf = inputs.unfinished[rows]
            p = inputs.p_hat[rows][unf].reshape(-1, k)
            c = inputs.c_hat[rows][unf].reshape(-1, k)
            sub = pointwise_allocation(p, c, inputs.budget[rows], lo)
            block = pi[rows]
            block[unf] = sub.reshape(-1)
            pi[rows] = block
        status = np.where(n_u == 0, "all_finished", "optimal")
        return pi, _info(inputs.shape[0], status, inputs.budget - expected_cost(inputs, pi),
                         "bernoulli")


@register_allocator("pair")
class PairAllocator:
    r"""PAIR's convex continuation program with finished candidates fixed at ``pi = 1``.

    Minimises ``sum_{i<j} a_ij/(pi_i pi_j) + sum_i b_i/pi_i`` over the unfinished ``pi``
    with ``sum_u c_u pi_u <= budget`` and ``pi_min <= pi_u <= 1``; a finished ``i`` enters
    with ``pi_i = 1``, so its edges add ``a_ij / pi_j`` for each unfinished ``j``. Solved
    by :func:`pairht.allocation.allocate` (``fallback=True``) on the whole group, finished
    candidates given the cost :data:`FINISHED_COST` (relative) and the budget raised by
    what they cost at 1: the optimum puts them at 1, and their ``pi`` is then set to
    exactly 1.

    Closed form (status ``"symmetric"``, no solve): without a size, when every unfinished
    candidate has the same ``p_hat`` and ``c_hat`` (e.g. after shrinkage with skill 0) the
    program is invariant under permuting them and strictly convex, so its optimum is the
    uniform ``pi_u = min(1, budget / sum_u c_u)``.

    With a ``size`` (``"auto"``, or an int ``n`` of unfinished candidates to complete, clipped
    to their number and to the largest affordable size) the program ``sum_u pi_u = n`` is
    solved over the unfinished candidates alone (a size row over the whole group would pull
    cheap finished candidates below 1), so their edges to finished candidates are not in that
    objective. A group that affords no size gets the Bernoulli program.

    Options: ``pi_min``, ``proxy``, ``covariance_term``, ``size``, ``warm_start`` ``(B, G)``,
    ``score_norm`` ``(B, G)``, ``energy`` ``(B, G, G)``, ``tol``, ``max_iter``.
    """

    name = "pair"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, proxy: str = "disagreement",
           covariance_term: bool = True, size: int | str | None = None,
           warm_start: np.ndarray | None = None, **solver: Any,
           ) -> tuple[np.ndarray, dict[str, Any]]:
        unknown = sorted(set(solver) - {"score_norm", "energy", "tol", "max_iter"})
        if unknown:  # refused even when no group needs the solver (all closed form)
            raise TypeError(f"allocator 'pair' got unexpected options {unknown}")
        lo = check_floor(inputs, pi_min)
        B, G = inputs.shape
        unf, n_u = inputs.unfinished, inputs.n_unfinished
        pi = np.ones((B, G))
        info = _info(B, np.where(n_u == 0, "all_finished", "optimal"), inputs.budget.copy(),
                     "bernoulli", size=np.full(B, -1, dtype=np.int64),
                     size_clipped=np.zeros(B, dtype=bool))
        c = inputs.c_hat
        p = inputs.p_hat
        same = _constant_on(p, unf) & _constant_on(c, unf)
        closed = (n_u > 0) & same & (size is None)
        pi[closed] = uniform_pi(inputs)[closed]
        info["status"][closed] = "symmetric"
        rows = np.flatnonzero((n_u > 0) & ~closed)
        opts = dict(pi_min=lo, proxy=proxy, covariance_term=covariance_term, fallback=True,
                    **solver)
        if rows.size and size is None:
            self._solve_embedded(inputs, rows, pi, info, warm_start, opts)
        elif rows.size:
            self._solve_sized(inputs, rows, pi, info, warm_start, size, opts)
        info["unspent_budget"][closed] = (inputs.budget - expected_cost(inputs, pi))[closed]
        return pi, info

    @staticmethod
    def _solve_embedded(inputs: StepInputs, rows: np.ndarray, pi: np.ndarray,
                        info: dict[str, Any], warm_start: Any, opts: dict[str, Any]) -> None:
        """Bernoulli program on whole groups, finished candidates at a negligible cost."""
        from pairht.allocation import allocate

        G = inputs.shape[1]
        unf, n_u = inputs.unfinished[rows], inputs.n_unfinished[rows]
        cu = inputs.c_hat[rows]
        free = FINISHED_COST * cu.sum(axis=1) / n_u
        c_solve = np.where(unf, cu, free[:, None])
        # A budget covering every unfinished candidate covers the whole solve: pass the solve's
        # own total then, so that rounding in the sum cannot turn pi = 1 into 1 - 1e-16.
        covers_all = inputs.budget[rows] >= np.where(unf, cu, 0.0).sum(axis=1)
        budget = np.where(covers_all, c_solve.sum(axis=1), inputs.budget[rows] + free * (G - n_u))
        warm = None if warm_start is None else np.asarray(warm_start)[rows]
        opts = _rows_of(opts, rows, None)
        res = allocate(inputs.p_hat[rows], c_solve, budget, warm_start=warm, **opts)
        pi[rows] = np.where(unf, res.pi, 1.0)
        _copy_result(info, rows, res)
        # Realised accounting: the budget minus what the unfinished candidates cost at their
        # pi (finished ones cost nothing, whatever the solver charged them).
        info["unspent_budget"][rows] = inputs.budget[rows] - (
            np.where(unf, cu, 0.0) * pi[rows]).sum(axis=1)

    @staticmethod
    def _solve_sized(inputs: StepInputs, rows: np.ndarray, pi: np.ndarray,
                     info: dict[str, Any], warm_start: Any, size: Any,
                     opts: dict[str, Any]) -> None:
        """Fixed-size program over the unfinished candidates of each group, by their count.

        The size row ``sum_u pi_u = n`` would pull a cheap finished candidate below 1 if it
        were in the problem, so the program is solved on the unfinished candidates alone
        (their edges and shared-vertex terms among themselves). ``n`` is clipped to the
        unfinished count and to the largest affordable size (``info["size_clipped"]``); a
        group that affords no size ``>= max(2, k pi_min)`` gets the Bernoulli program (the
        plan then mixes the two neighbouring sizes, ``info["size"] = -1``).
        """
        from pairht.allocation import allocate

        B = inputs.shape[0]
        auto = isinstance(size, str) and size == "auto"
        if not auto:
            n = np.asarray(size)
            if isinstance(size, (bool, np.bool_)) or n.dtype.kind not in "iu" or n.ndim > 1:
                raise TypeError(f"size must be None, 'auto' or an int (unfinished candidates "
                                f"to complete); got {size!r}")
            n = np.broadcast_to(n, (B,))
        from pairht.allocation.sizes import largest_affordable_size

        n_u = inputs.n_unfinished
        single = rows[n_u[rows] == 1]  # one unfinished candidate: the uniform rule
        pi[single] = uniform_pi(inputs)[single]
        unsized: list[np.ndarray] = []
        for k in np.unique(n_u[rows][n_u[rows] >= 2]):
            sub = rows[n_u[rows] == k]
            unf = inputs.unfinished[sub]
            p = inputs.p_hat[sub][unf].reshape(-1, k)
            c = inputs.c_hat[sub][unf].reshape(-1, k)
            budget = inputs.budget[sub]
            # A size is affordable up to n_max; below max(2, k pi_min) no size is (the
            # allocation's own rule), and such groups take the Bernoulli program instead.
            n_max = largest_affordable_size(c, budget, opts["pi_min"])
            lower = max(2, int(np.ceil(k * opts["pi_min"] - 1e-12)))
            want = np.full(len(sub), k) if auto else np.minimum(n[sub], k)
            n_eff = np.minimum(want, n_max)
            ok = n_eff >= lower
            info["size_clipped"][sub] = (n_eff < want) & (not auto)
            unsized.append(sub[~ok])
            if not ok.any():
                continue
            sub, unf, p, c, budget = sub[ok], unf[ok], p[ok], c[ok], budget[ok]
            warm = None if warm_start is None else np.asarray(warm_start)[sub][unf].reshape(-1, k)
            res = allocate(p, c, budget, warm_start=warm,
                           size="auto" if auto else n_eff[ok], **_rows_of(opts, sub, unf))
            block = pi[sub]
            block[unf] = res.pi.reshape(-1)
            pi[sub] = block
            _copy_result(info, sub, res)
            info["size"][sub] = np.asarray(res.size)
            solver_unspent = getattr(res, "unspent_budget", None)
            if solver_unspent is None:
                solver_unspent = budget - np.asarray(res.expected_cost)
            info["unspent_budget"][sub] = np.asarray(solver_unspent)
        rest = np.concatenate(unsized) if unsized else np.zeros(0, dtype=np.int64)
        if rest.size:
            PairAllocator._solve_embedded(inputs, rest, pi, info, warm_start, opts)
        info["unspent_budget"][single] = (inputs.budget - expected_cost(inputs, pi))[single]


def _rows_of(opts: dict[str, Any], rows: np.ndarray, unf: np.ndarray | None) -> dict[str, Any]:
    """Solver options with the per-candidate proxy inputs cut to ``rows`` (and, for the
    sized route, to their unfinished candidates)."""
    out = dict(opts)
    if out.get("score_norm") is not None:
        m = np.asarray(out["score_norm"], dtype=np.float64)[rows]
        out["score_norm"] = m if unf is None else m[unf].reshape(len(rows), -1)
    if out.get("energy") is not None:
        e = np.asarray(out["energy"], dtype=np.float64)[rows]
        if unf is not None:
            e = np.stack([e[r][np.ix_(unf[r], unf[r])] for r in range(len(rows))])
        out["energy"] = e
    return out


def _copy_result(info: dict[str, Any], rows: np.ndarray, res: Any) -> None:
    for key in ("status", "converged", "kkt_residual", "fallback_used"):
        info[key][rows] = np.asarray(getattr(res, key))


def _constant_on(x: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``(B,)`` whether ``x`` takes one value on ``where`` (exact equality, as after shrink)."""
    hi = np.where(where, x, -np.inf).max(axis=1)
    lo = np.where(where, x, np.inf).min(axis=1)
    return hi == lo
