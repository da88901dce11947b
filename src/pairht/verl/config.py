"""The ``pair:`` section of a verl config, read and checked in one place.

verl configs are OmegaConf trees; PAIR's options live in a top-level ``pair`` section (added to
an existing GRPO config with Hydra's ``+pair.<key>=...``), read by the trainer mode and by the
agent-loop worker alike. A bad value raises one ``ValueError`` line naming the key
(``pair.budget_ratio``), the value and the rule. numpy and the step's registry only: no verl.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pairht.estimators import VARIANTS

__all__ = ["PairVerlConfig"]


@dataclass(frozen=True)
class PairVerlConfig:
    """PAIR's options for verl (the ``pair:`` section).

    Parameters
    ----------
    rule : str
        The allocation rule, a name in :data:`pairht.step.ALLOCATORS` (``"pair"``: PAIR's
        program; ``"pair_dr"``: Neyman's rule with the difference estimator).
    budget_ratio : float
        Phase 2's expected suffix tokens as a fraction of continuing every unfinished
        candidate, in ``(0, 1]`` (1 continues all: the estimate is RLOO's).
    tau : int
        Phase 1's prefix length in tokens, ``>= 1``.
    pi_min : float
        Floor of every unfinished candidate's inclusion probability, in ``(0, 1]``.
    design : str or None
        The sampling design's registry name; ``None``: the rule's own.
    weighting : str
        The pair-HT weighting (:data:`pairht.estimators.VARIANTS`); ``"exact"`` is unbiased.
    w_max : float or None
        Clip level for ``weighting="clipped"``.
    seed : int
        Seed of the design draws (independent of every reward).

    Examples
    --------
    >>> PairVerlConfig.from_mapping({"budget_ratio": 0.5}).budget_ratio
    0.5
    >>> PairVerlConfig.from_mapping({"budget_ratio": 1.5})
    Traceback (most recent call last):
    ...
    ValueError: pair.budget_ratio must be in (0, 1] (a fraction of the full suffix cost); got 1.5
    """

    rule: str = "pair"
    budget_ratio: float = 0.5
    tau: int = 32
    pi_min: float = 0.08
    design: str | None = None
    weighting: str = "exact"
    w_max: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        from pairht.step import ALLOCATORS

        if not isinstance(self.rule, str) or self.rule not in ALLOCATORS:
            raise ValueError(f"pair.rule must be one of {sorted(ALLOCATORS)}; got {self.rule!r}")
        if not 0.0 < float(self.budget_ratio) <= 1.0:
            raise ValueError("pair.budget_ratio must be in (0, 1] (a fraction of the full "
                             f"suffix cost); got {self.budget_ratio!r}")
        if isinstance(self.tau, bool) or not isinstance(self.tau, int) or self.tau < 1:
            raise ValueError(f"pair.tau must be an integer >= 1 (prefix tokens); got {self.tau!r}")
        if not 0.0 < float(self.pi_min) <= 1.0:
            raise ValueError(f"pair.pi_min must be in (0, 1]; got {self.pi_min!r}")
        if self.weighting not in VARIANTS:
            raise ValueError(f"pair.weighting must be one of {sorted(VARIANTS)}; "
                             f"got {self.weighting!r}")
        if self.weighting == "clipped" and (self.w_max is None or float(self.w_max) <= 0):
            raise ValueError(f"pair.w_max must be > 0 with pair.weighting='clipped'; "
                             f"got {self.w_max!r}")

    @classmethod
    def from_mapping(cls, section: Mapping[str, Any] | None) -> PairVerlConfig:
        """Read the ``pair`` section (a dict or an OmegaConf ``DictConfig``; ``None``: defaults).

        An unknown key raises naming it and the known ones (a typo must not fall back to a
        default silently).
        """
        values = dict(section or {})
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"pair.{unknown[0]} is not an option of the pair section; "
                             f"known: {known}")
        return cls(**values)

    @classmethod
    def from_root(cls, config: Any) -> PairVerlConfig:
        """Read ``config.pair`` from a whole verl config (absent: the defaults)."""
        section = config.get("pair") if hasattr(config, "get") else None
        return cls.from_mapping(section)
