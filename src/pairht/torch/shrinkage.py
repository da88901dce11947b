"""How far the step shrinks the heads' predictions toward the group mean, from the heads'
own held-out measures (:func:`pairht.step.shrink_predictions` applies it)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["shrinkage_weights"]


def shrinkage_weights(head_trainer: Any, shrink_to_skill: bool,
                      shrink_by: str) -> dict[str, float]:
    """``{"skill_success", "skill_cost"}`` for :func:`pairht.step.plan_continuations`.

    The heads' held-out measure named by ``shrink_by`` (``"<shrink_by>_success"``,
    ``"<shrink_by>_cost"`` of ``head_trainer.skill()``), clipped to ``[0, 1]``; 0 while
    unmeasured (an unknown predictor is treated as uninformative); 1 (no shrinkage) when
    ``shrink_to_skill`` is off or the heads measure nothing.

    Examples
    --------
    >>> class Heads:
    ...     def skill(self):
    ...         return {"reliability_success": 0.4, "reliability_cost": float("nan")}
    >>> shrinkage_weights(Heads(), True, "reliability")
    {'skill_success': 0.4, 'skill_cost': 0.0}
    """
    measured = getattr(head_trainer, "skill", None)
    if not shrink_to_skill or measured is None:
        return {"skill_success": 1.0, "skill_cost": 1.0}
    values = measured()
    return {
        f"skill_{what}": float(np.clip(np.nan_to_num(values.get(f"{shrink_by}_{what}", np.nan),
                                                     nan=0.0), 0.0, 1.0))
        for what in ("success", "cost")
    }
