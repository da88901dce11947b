r"""Do the prefixes pay on a population? PAIR's default against small-group GRPO, exactly.

The audit of :mod:`pairht.audit.width`'s two options on one population (a live policy's, from
the TRL adapter's ``AuditCallback``, or a stored one), as a verdict a training loop can log.
"""

from __future__ import annotations

from dataclasses import dataclass

from pairht.audit.base import AuditConfig
from pairht.audit.population import Population
from pairht.audit.runner import run_audit
from pairht.audit.summary import compare_to_baselines


@dataclass(frozen=True)
class WidthAdvice:
    """Whether the prefixes pay on a population, at one budget (:func:`width_advice`).

    Attributes
    ----------
    choice : str
        ```"pair"`` (generate every prefix, continue a subset) or ``"grpo_small"`` (``G'``
        whole completions): the option with the lower mean exact MSE on the population.
    ratio : float
        ``mean_q MSE_pair / mean_q MSE_grpo_small`` (< 1: the prefixes pay).
    low, high : float
        95% percentile bootstrap interval of ``ratio`` over prompts.
    group_size : float
        ``G'``: the whole completions per prompt that cost what PAIR generates.
    generated : float
        What both generate, over the tokens of generating every candidate whole.
    """

    choice: str
    ratio: float
    low: float
    high: float
    group_size: float
    generated: float

    def line(self) -> str:
        """One sentence for logs."""
        verdict = ("the prefixes pay" if self.choice == "pair" else
                   f"small-group GRPO with G' = {self.group_size:.2f} whole completions is better")
        return (f"PAIR's exact MSE is {self.ratio:.3f}x small-group GRPO's at the same "
                f"generated tokens ({self.generated:.3f} of generating every candidate whole; "
                f"95% interval over prompts [{self.low:.3f}, {self.high:.3f}]): {verdict}")


def width_advice(population: Population, budget_ratio: float = 0.5, *, pi_min: float = 0.08,
                 seed: int = 0) -> WidthAdvice:
    r"""Do the prefixes pay on ``population``? PAIR against small-group GRPO, exactly.

    Runs the audit's ``pair`` (PAIR's default) and ``grpo_small`` rows (``G'`` whole
    completions at PAIR's total generated tokens) at ``budget_ratio`` with exact metrics only,
    and reports their exact MSE ratio with a bootstrap interval over prompts. A population from
    the live policy (the TRL adapter's ``AuditCallback``) is the history a width choice reads.

    Examples
    --------
    >>> from pairht.audit import synthetic_population
    >>> adv = width_advice(synthetic_population(6, 8, prefix_tokens=8, rng=0), 0.5)
    >>> adv.choice in ("pair", "grpo_small"), adv.low <= adv.ratio <= adv.high
    (True, True)
    """
    cfg = AuditConfig(budget_ratio=budget_ratio, pi_min=pi_min, seed=seed)
    res = run_audit(population, rows=["grpo_small", "pair"], config=cfg, n_draws=0)
    cmp = compare_to_baselines(res, "pair", baselines=("grpo_small",), seed=seed)
    grpo = res.row("grpo_small")
    return WidthAdvice(choice="pair" if cmp.ratio < 1.0 else "grpo_small", ratio=cmp.ratio,
                       low=cmp.low, high=cmp.high,
                       group_size=float(grpo.metrics["budget_scale"]) * population.group_size,
                       generated=float(grpo.metrics["generated_exact"]))
