r"""The comparators as allocator objects of ``pairht.step``'s registry, and a standalone plan.

Each allocator is one small object with a ``name`` and
``pi(inputs, **options) -> (pi, info)``: ``pi`` is ``(B, G)`` over all candidates (finished
= 1) and ``info`` holds per-prompt ``status`` and ``converged`` plus what the method decided
(``k``: continuations per prompt, ``joint``: the exact ``rho`` of the design the comparator
means, ``design``). :data:`COMPARATORS` maps names to objects; ``pairht.step.ALLOCATORS``
reads this table on its first lookup (this module never imports ``pairht.step``).

What each estimator is unbiased for (``G``-candidate complete pair target ``g_pair`` of each
group; see ``docs/comparators.md``):

* ``vip``, ``hora``, ``duet`` - ``k_b`` of the ``U_b`` unfinished candidates continued:
  SRSWOR for ``k_b >= 2``, each with probability ``1 / U_b`` (Bernoulli) for
  ``k_b = 1 < U_b`` (:func:`~pairht.comparators._inputs.prompt_joint`). The step draws this
  design from ``info["design"] = "srswor"`` (its alias of conditional Poisson, which with
  equal ``pi`` *is* SRSWOR and below an expected size of two is drawn Bernoulli);
  :func:`comparator_plan` draws it directly. The pair-HT estimator is exactly unbiased for a
  group's ``g_pair`` iff every ``rho_ij > 0``, i.e. ``k_b >= 1`` wherever ``U_b >= 1``
  (``info["all_pairs_positive"]``). ``k_b = 0`` with ``U_b >= 1`` never observes a pair with
  an unfinished candidate, and that group's estimate would be biased.
  ``min_rollouts = m >= 1`` raises every prompt's minimum to ``min(m, U_b)``: every pair is
  then positive, or the rollout budget is refused (``ValueError``, "budget infeasible").
  ``min_rollouts=1`` by default in the step (every pair positive: exact); 0 is the rule as
  read from the paper, and the step refuses a plan it leaves with a prompt of no continuation
  (``ValueError`` from :func:`pairht.step.plan_continuations` and :func:`comparator_plan`,
  naming the allocator, the prompt ``b``, ``k_b``, ``U_b`` and the fix: ``min_rollouts >= 1``
  or the step's ``anchor_pair=True``). At ``min_rollouts=0`` the per-prompt minimum is 0 for
  HORA; for VIP and DUET ``min_group`` (2) counts the finished candidates, so the minimum is
  ``min(2, U_b)`` without finished candidates, 1 with one and 0 with two or more; a prompt at
  minimum 0 gets ``k_b = 0`` when the rollout budget goes elsewhere (a budget of 0 rollouts,
  the default conversion of a small token budget, or a prompt the rule ranks last). The
  published rules themselves (:func:`~pairht.comparators.vip.vip_group_sizes`,
  :func:`~pairht.comparators.hora.hora_extra_rollouts`,
  :func:`~pairht.comparators.duet.proportional_counts`) keep their own defaults; the
  allocator objects below call ``.pi()`` with ``min_rollouts=1`` unless told otherwise, and
  ``.pi()`` itself still returns a ``k_b = 0`` plan at ``min_rollouts=0`` (reported by
  ``info["all_pairs_positive"]``); the planners refuse it.
* ``dppo`` - ``pi = 1`` at plan time (this project reads DPPO as saving backward compute
  only, not generation); its pruning after rewards (:mod:`pairht.comparators.dppo`) is
  unbiased for the full-batch gradient.
* ``pair_joint`` - the two-level PAIR allocation (a robust batch split, then PAIR in each
  group), Bernoulli design or, at ``size="auto"``, PAIR's default fixed-size design: exactly
  unbiased for ``g_pair`` (``pi >= pi_min``, exact joints).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pairht._validation import RNGLike, as_generator, check_pairs_positive
from pairht.allocation.inputs import StepInputs, check_inputs
from pairht.comparators._inputs import (
    prompt_joint,
    prompt_sample,
    read_history,
    rollout_budget,
    srswor_pi,
)
from pairht.comparators.duet import informativeness, proportional_counts
from pairht.comparators.gp import gp_success_probability
from pairht.comparators.hora import hora_extra_rollouts
from pairht.comparators.joint import KAPPA, LINE_STEPS, RATE_PRIOR, pair_joint_allocate
from pairht.comparators.vip import vip_group_sizes

if TYPE_CHECKING:  # annotation only, like pairht.comparators.joint
    from pairht.allocation.proxies import ProxyKind


def _no_size(name: str, size: Any) -> None:
    if size is not None:
        raise ValueError(f"size must be None for allocator {name!r}: it decides the number of "
                         f"continuations per prompt itself; got size={size!r}")


def _unspent(inputs: StepInputs, pi: np.ndarray) -> np.ndarray:
    """Per-prompt ``budget_b - sum_u c_i pi_i``; a prompt-level comparator shares the batch's
    budget, so one prompt's entry can be negative while the batch's sum is not."""
    return inputs.budget - np.where(inputs.finished, 0.0, inputs.c_hat * pi).sum(axis=1)


def _prompt_info(inputs: StepInputs, k: np.ndarray, **extra: Any) -> dict[str, Any]:
    finished = inputs.finished
    U = inputs.n_unfinished
    B = k.shape[0]
    return {"status": np.where(U == 0, "all_finished", "optimal"),
            "converged": np.ones(B, dtype=bool), "k": k,
            "joint": prompt_joint(k, finished), "design": "srswor",
            "unspent_budget": _unspent(inputs, srswor_pi(k, finished)),
            "all_pairs_positive": k >= np.minimum(1, U), **extra}


class VIPAllocator:
    """VIP (arXiv 2602.01601): GP success prediction + exact variance-minimising group sizes
    (:mod:`pairht.comparators.vip`: what is the paper's and what is our reconstruction).

    Options: ``rollout_budget`` (int; default from the token budget), ``model``
    (``"rloo"``, the default, ``"dr_grpo"`` or ``"inverse"``), ``min_group`` (2, finished
    candidates counted), ``min_rollouts`` (1 by default in the step: every pair positive,
    exact; 0 is the rule as read from the paper, and the step refuses a plan it leaves with a
    prompt of no continuation; see the module doc), ``signal_var``, ``lengthscale``. Needs
    ``inputs.history`` (``successes``, ``trials``, optional ``features``).
    """

    name = "vip"

    def pi(self, inputs: StepInputs, *, rollout_budget: int | None = None,
           model: str = "rloo", min_group: int = 2, min_rollouts: int = 1,
           signal_var: float = 1.0,
           lengthscale: float | None = None, pi_min: float = 0.08, size: Any = None,
           proxy: str = "disagreement", covariance_term: bool = True,
           ) -> tuple[np.ndarray, dict[str, Any]]:
        _no_size(self.name, size)
        check_inputs(inputs)
        s, t, feats = read_history(inputs, inputs.p_hat.shape[0])  # type: ignore[misc]
        p, _var = gp_success_probability(s, t, feats, signal_var=signal_var,
                                         lengthscale=lengthscale)
        N = rollout_budget_of(inputs, rollout_budget)
        k = vip_group_sizes(p, inputs.n_finished, inputs.n_unfinished, N, model=model,  # type: ignore[arg-type]
                            min_group=min_group, min_rollouts=min_rollouts)
        return srswor_pi(k, inputs.finished), _prompt_info(inputs, k, p_pred=p, rollout_budget=N)


class HORAAllocator:
    """HORA (arXiv 2605.07114): exact maximiser of total posterior hit utility
    (:mod:`pairht.comparators.hora`).

    Options: ``rollout_budget``, ``min_rollouts`` (1 by default in the step: every pair
    positive, exact; 0 is the rule as read from the paper, no per-prompt minimum, our reading
    of its abstract, which allocates *additional* rollouts and states none, and the step
    refuses a plan it leaves with a prompt of no continuation; see the module doc). Needs
    ``inputs.history``.
    """

    name = "hora"

    def pi(self, inputs: StepInputs, *, rollout_budget: int | None = None,
           min_rollouts: int = 1, pi_min: float = 0.08, size: Any = None,
           proxy: str = "disagreement", covariance_term: bool = True,
           ) -> tuple[np.ndarray, dict[str, Any]]:
        _no_size(self.name, size)
        check_inputs(inputs)
        s, t, _f = read_history(inputs, inputs.p_hat.shape[0])  # type: ignore[misc]
        N = rollout_budget_of(inputs, rollout_budget)
        if isinstance(min_rollouts, bool) or not isinstance(min_rollouts, (int, np.integer)) \
                or min_rollouts < 0:
            raise ValueError(f"min_rollouts must be an int >= 0; got {min_rollouts!r}")
        lower = np.minimum(inputs.n_unfinished, int(min_rollouts))
        k = hora_extra_rollouts(s, t, inputs.n_unfinished, N, lower=lower)
        return srswor_pi(k, inputs.finished), _prompt_info(inputs, k, rollout_budget=N)


class DUETAllocator:
    """DUET (arXiv 2605.08441), phase 1 only: rollouts proportional to the surrogate
    ``pbar(1-pbar)`` (:mod:`pairht.comparators.duet`; the surrogate and the proportional rule
    are our reconstruction).

    Options: ``rollout_budget``, ``min_group`` (2: each group, finished candidates included,
    has at least two members where it can), ``min_rollouts`` (1 by default in the step: every
    pair positive, exact; 0 is the rule as read from the paper, and the step refuses a plan it
    leaves with a prompt of no continuation; see the module doc). Uses ``inputs.history`` when
    present, else the mean ``p_hat`` of each group. DUET's second lever, the marker-gated
    abort, is not part of this allocator (nor of the step, the trainer or the audit): apply
    :func:`~pairht.comparators.duet.abort_design` and
    :func:`~pairht.comparators.duet.abort_sample` to a realised plan.
    """

    name = "duet"

    def pi(self, inputs: StepInputs, *, rollout_budget: int | None = None,
           min_group: int = 2, min_rollouts: int = 1, pi_min: float = 0.08, size: Any = None,
           proxy: str = "disagreement", covariance_term: bool = True,
           ) -> tuple[np.ndarray, dict[str, Any]]:
        _no_size(self.name, size)
        check_inputs(inputs)
        hist = read_history(inputs, inputs.p_hat.shape[0], required=False)
        s, t = (hist[0], hist[1]) if hist is not None else (None, None)
        u = informativeness(s, t, inputs.p_hat)
        N = rollout_budget_of(inputs, rollout_budget)
        if isinstance(min_group, bool) or not isinstance(min_group, (int, np.integer)) \
                or min_group < 0:
            raise ValueError(f"min_group must be an int >= 0; got {min_group!r}")
        if isinstance(min_rollouts, bool) or not isinstance(min_rollouts, (int, np.integer)) \
                or min_rollouts < 0:
            raise ValueError(f"min_rollouts must be an int >= 0; got {min_rollouts!r}")
        U = inputs.n_unfinished
        lower = np.maximum(np.minimum(U, np.maximum(0, min_group - inputs.n_finished)),
                           np.minimum(U, int(min_rollouts)))
        k = proportional_counts(u, inputs.n_unfinished, N, lower=lower)
        return srswor_pi(k, inputs.finished), _prompt_info(inputs, k, surrogate=u,
                                                          rollout_budget=N)


class DPPOAllocator:
    """DPPO (arXiv 2603.04135): every candidate is completed (``pi = 1``); pruning happens
    after rewards, with :func:`~pairht.comparators.dppo.dppo_keep_probabilities`. That DPPO
    generates every completion is this project's reading of the paper's abstract (it prunes
    with rescaling to speed up training; the pruning rule uses the rewards' advantages)."""

    name = "dppo"

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, size: Any = None,
           proxy: str = "disagreement", covariance_term: bool = True,
           ) -> tuple[np.ndarray, dict[str, Any]]:
        _no_size(self.name, size)
        check_inputs(inputs)
        B, G = inputs.p_hat.shape
        pi = np.ones((B, G))
        return pi, {"status": np.full(B, "full"), "converged": np.ones(B, dtype=bool),
                    "joint": np.ones((B, G, G)), "design": "full",
                    "unspent_budget": _unspent(inputs, pi),
                    "all_pairs_positive": np.ones(B, dtype=bool)}


class PairJointAllocator:
    """``pair_joint``: the batch budget ``sum(inputs.budget)`` split across prompts by their
    PAIR value curves (predictions read through a prior on the rate), moved from the
    per-prompt split ``inputs.budget`` only as far as a factor-``kappa`` error in every
    prompt's predicted variance change keeps it no worse
    (:func:`~pairht.comparators.joint.robust_split`), then PAIR within each group.

    The group level follows ``size``. ``None`` (called directly): the Bernoulli program and
    draw of :func:`~pairht.comparators.pair_joint_allocate`. A size (``"auto"``, what
    :func:`pairht.step.plan_continuations` passes, a rule of PAIR's program): the step's
    ``"pair"`` rule at the split's budgets, PAIR's default fixed-size design, with its
    ``info`` (``pi_lo``, ``pi_hi``, ``weight_hi``, ``fixed_size``; the step builds the
    designs and exact joints). The step registers it as a rule of PAIR's program
    (``takes_size``) and lends it that rule (:meth:`bind_group_rule`,
    :mod:`pairht.step.comparator_rules`): this module never imports the step.

    Options: ``pi_min`` (0.08), ``grid`` (64), ``proxy``, ``covariance_term``, ``size``,
    ``kappa`` (2), ``rate_prior`` (1/2), ``line_steps`` (16), ``warm_start`` (at a size).
    """

    name = "pair_joint"

    def __init__(self) -> None:
        self.group_rule: Any = None

    def bind_group_rule(self, rule: Any) -> None:
        """The step's ``"pair"`` allocator, run at the split's budgets when a size is asked."""
        self.group_rule = rule

    def pi(self, inputs: StepInputs, *, pi_min: float = 0.08, grid: int = 64,
           proxy: ProxyKind = "disagreement", covariance_term: bool = True, size: Any = None,
           kappa: float = KAPPA, rate_prior: float = RATE_PRIOR,
           line_steps: int = LINE_STEPS, warm_start: np.ndarray | None = None,
           ) -> tuple[np.ndarray, dict[str, Any]]:
        if size is not None and self.group_rule is None:
            raise ValueError("pair_joint at a size runs the step's 'pair' rule in each group; "
                             "call it through pairht.step (ALLOCATORS or plan_continuations), "
                             "which binds that rule, or with size=None (Bernoulli)")
        check_inputs(inputs)
        res = pair_joint_allocate(inputs.p_hat, inputs.c_hat, inputs.finished,
                                  float(inputs.budget.sum()), pi_min=pi_min, grid=grid,
                                  proxy=proxy, covariance_term=covariance_term,
                                  prompt_budget=inputs.budget, kappa=kappa,
                                  rate_prior=rate_prior, line_steps=line_steps)
        B, G = res.pi.shape
        split = {"prompt_budget": res.budgets, "base_budget": res.base,
                 "split_budget": res.target, "split_move": res.move, "grid_step": res.delta,
                 "all_pairs_positive": np.ones(B, dtype=bool)}
        if size is None:
            joint = res.pi[:, :, None] * res.pi[:, None, :]
            joint[:, np.arange(G), np.arange(G)] = res.pi
            return res.pi, {"status": res.status, "converged": res.converged, "joint": joint,
                            "design": "bernoulli", "unspent_budget": _unspent(inputs, res.pi),
                            "objective": res.objective, **split}
        floor = pi_min * inputs.full_cost
        # the same batch at the split's budgets, for the step's rule
        share = inputs.with_budget(np.maximum(res.budgets, floor))
        pi, info = self.group_rule.pi(share, pi_min=pi_min, proxy=proxy,
                                      covariance_term=covariance_term, size=size,
                                      warm_start=warm_start)
        info.update(split, unspent_budget=_unspent(inputs, pi))
        return pi, info


def rollout_budget_of(inputs: StepInputs, value: int | None) -> int:
    """The batch's rollout budget (see :func:`pairht.comparators._inputs.rollout_budget`)."""
    return rollout_budget(inputs, value)


#: name -> allocator object, the comparators of the paper's main table and ``pair_joint``.
COMPARATORS: dict[str, Any] = {a.name: a for a in (
    VIPAllocator(), HORAAllocator(), DUETAllocator(), DPPOAllocator(), PairJointAllocator())}


@dataclass
class ComparatorPlan:
    """A realised plan: exact ``pi``/``joint`` of the comparator's design and the draw."""

    pi: np.ndarray
    selected: np.ndarray
    joint: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)
    allocator: str = ""


def comparator_plan(inputs: StepInputs, name: str, rng: RNGLike = None,
                    **options: Any) -> ComparatorPlan:
    """Run comparator ``name`` and draw from its own design, the one ``pairht.step`` draws
    for it: for ``vip``, ``hora`` and ``duet`` ``k_b`` unfinished candidates by SRSWOR, or
    each with probability ``1 / U_b`` where ``k_b = 1 < U_b`` (module doc); Bernoulli at ``pi``
    for ``pair_joint``; every candidate for ``dppo``. ``joint`` is that design's exact
    ``rho`` (``info["joint"]``). A plan with a zero joint (``k_b = 0 < U_b``, possible only
    with ``min_rollouts=0``) is refused with the step's ``ValueError`` (one check,
    :func:`pairht._validation.check_pairs_positive`): every plan returned has every
    ``rho_ij > 0`` and an exactly unbiased pair-HT estimate.

    Examples
    --------
    >>> import numpy as np
    >>> from pairht.step import StepInputs
    >>> inp = StepInputs(np.full((2, 4), 0.5), np.full((2, 4), 10.0), np.zeros((2, 4), bool),
    ...                  budget=[20.0, 20.0],
    ...                  history={"successes": np.array([1, 7]), "trials": np.array([8, 8])})
    >>> plan = comparator_plan(inp, "hora", rng=0)
    >>> plan.info["k"].tolist(), plan.selected.sum(axis=1).tolist()
    ([2, 2], [2, 2])
    """
    if name not in COMPARATORS:
        raise ValueError(f"name must be one of {sorted(COMPARATORS)}; got {name!r}")
    alloc = COMPARATORS[name]
    pi, info = alloc.pi(check_inputs(inputs), **options)
    if "joint" not in info:
        raise ValueError(f"comparator_plan draws the comparators' own designs; {name!r} at a "
                         f"size runs PAIR's default design: use pairht.step.plan_continuations")
    fin = inputs.finished
    check_pairs_positive(name, info["joint"], fin, info.get("k"), anchor=False)
    gen = as_generator(rng)
    if info["design"] == "srswor":
        selected = prompt_sample(info["k"], fin, gen)
    elif info["design"] == "bernoulli":
        selected = fin | (gen.random(pi.shape) < pi)
    else:
        selected = np.ones(pi.shape, dtype=bool)
    return ComparatorPlan(pi=pi, selected=selected, joint=info["joint"], info=info,
                          allocator=name)
