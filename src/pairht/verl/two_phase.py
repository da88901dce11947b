"""Two-phase generation of one prompt's group through a verl server manager.

Phase 1 asks the server for ``G`` prefixes of ``tau`` tokens; the step plans which to continue
(:func:`pairht.step.plan_step`, before any reward); phase 2 continues the selected unfinished
prefixes with ``prompt + prefix`` as the prompt and the *same* ``request_id``, so that verl's
sticky routing sends it to the server holding that prefix in its cache. A candidate that is not
continued keeps its prefix as its response (the advantage step masks it out of the loss).

The server manager is anything with verl's ``await generate(request_id=, prompt_ids=,
sampling_params=) -> TokenOutput`` (``token_ids``, ``log_probs``); nothing else of verl is
needed here, so the tests drive it with a fake server backed by the project's transformers
two-phase backend.

No prefix heads run in verl: the plan is given flat predictions (``p_hat = 1/2``, ``c_hat`` =
the response tokens left), so the allocation spreads the budget evenly over the unfinished
candidates; finished prefixes are kept at ``pi = 1`` at no cost. The estimate stays exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairht.step import StepPlan, plan_step
from pairht.verl.config import PairVerlConfig
from pairht.verl.rows import plan_rows

__all__ = ["Candidate", "two_phase_group"]


@dataclass
class Candidate:
    """One candidate's response: its prefix, then (if continued) the continuation."""

    response_ids: list[int]
    log_probs: list[float] | None
    extra_fields: dict[str, Any]  # the plan's row (pairht.verl.rows.plan_rows)


async def two_phase_group(
    server: Any,
    prompt_ids: Sequence[int],
    *,
    request_ids: Sequence[str],
    sampling_params: dict[str, Any],
    response_length: int,
    eos_token_ids: Sequence[int],
    config: PairVerlConfig,
    rng: np.random.Generator,
) -> tuple[StepPlan, list[Candidate]]:
    """Generate one group of ``G = len(request_ids)`` candidates in two phases.

    Parameters
    ----------
    server
        verl's server manager (``AgentLoopWorker.llm_client``) or a stand-in.
    prompt_ids : sequence of int
    request_ids : sequence of str
        One per candidate; phase 2 reuses it (prefix cache).
    sampling_params : dict
        verl's sampling parameters; ``max_tokens`` is set per phase.
    response_length : int
        The most response tokens (prefix + continuation).
    eos_token_ids : sequence of int
        Tokens that end a response (a prefix ending in one is finished).
    config : PairVerlConfig
        ``tau``, ``rule``, ``budget_ratio``, ``pi_min``, ``design``.
    rng : numpy.random.Generator
        The design's randomness (independent of every reward).

    Returns
    -------
    plan : pairht.step.StepPlan
        The group's plan, ``(1, G)``.
    candidates : list of Candidate
        In request order, each with its plan row in ``extra_fields``.
    """
    g = len(request_ids)
    tau = min(config.tau, response_length)
    eos = {int(t) for t in eos_token_ids}

    async def ask(i: int, prompt: list[int], max_tokens: int) -> Any:
        return await server.generate(request_id=request_ids[i], prompt_ids=prompt,
                                     sampling_params={**sampling_params,
                                                      "max_tokens": max_tokens})

    prompt = list(prompt_ids)
    first = await asyncio.gather(*(ask(i, prompt, tau) for i in range(g)))
    prefixes = [list(out.token_ids) for out in first]
    finished = np.array([[len(p) < tau or len(p) >= response_length or (bool(p) and p[-1] in eos)
                          for p in prefixes]])
    left = np.array([[max(response_length - len(p), 1) for p in prefixes]], dtype=np.float64)
    plan = plan_step(np.full((1, g), 0.5), left, finished, budget_ratio=config.budget_ratio,
                     allocator=config.rule, design=config.design, pi_min=config.pi_min,
                     prefix_tokens=np.array([[len(p) for p in prefixes]]), rng=rng)
    go = [i for i in range(g) if plan.selected[0, i] and not finished[0, i]]
    second = await asyncio.gather(*(ask(i, prompt + prefixes[i], response_length -
                                        len(prefixes[i])) for i in go))
    rows = plan_rows(plan)
    candidates = [Candidate(list(p), None if out.log_probs is None else list(out.log_probs),
                            rows[i]) for i, (p, out) in enumerate(zip(prefixes, first))]
    for i, out in zip(go, second):
        c = candidates[i]
        c.response_ids += list(out.token_ids)
        if c.log_probs is not None:
            c.log_probs += list(out.log_probs or [])
    return plan, candidates
