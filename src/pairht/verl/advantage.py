r"""PAIR's advantage step on a verl batch: a pure ``DataProto -> DataProto`` function.

verl's registered advantage estimators receive only the token rewards, the response mask and
the group index, not the plan, so the step lives here and the trainer mode
(:mod:`pairht.verl.trainer`) calls it from its ``_compute_advantage``. Per group ``b`` with
``G`` rows (verl's ``uid``):

.. math:: r_i = \sum_t \text{token\_level\_rewards}_{it}, \qquad
          A_i = \text{estimate}(\text{plan}_b, r)_i \quad (\text{zero where } J_i = 0),

written to every response token (``advantages = returns = A_i * response_mask``), and the
``response_mask`` of every row that was not continued is zeroed: those rows carry only a
prefix, contribute nothing to the loss and nothing to its token count, as in the TRL trainer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pairht.verl.config import PairVerlConfig
from pairht.verl.rows import FIELDS, estimate, group_rows

__all__ = ["pair_advantage", "plan_fields_from_extra"]


def plan_fields_from_extra(extra_fields: Any) -> dict[str, np.ndarray]:
    """The plan's per-row fields out of verl's per-row ``extra_fields`` dicts.

    Examples
    --------
    >>> f = plan_fields_from_extra([{"pair_index": 0, "pair_pi": 1.0, "other": 3}])
    >>> sorted(f), f["pair_pi"].tolist()
    (['pair_index', 'pair_pi'], [1.0])
    """
    rows = list(extra_fields)
    out: dict[str, np.ndarray] = {}
    for key in FIELDS:
        if rows and all(key in r for r in rows):
            values = [r[key] for r in rows]
            out[key] = (np.stack([np.asarray(v, dtype=np.float64) for v in values])
                        if key in ("pair_joint", "pair_inner_joint")
                        else np.asarray(values, dtype=object if isinstance(values[0], str)
                                        else None))
    return out


def pair_advantage(data: Any, config: PairVerlConfig | None = None) -> Any:
    """PAIR advantages of a ``DataProto`` batch (a new ``DataProto``; the input is unchanged).

    Parameters
    ----------
    data : verl.DataProto
        ``batch``: ``token_level_rewards`` and ``response_mask``, ``(N, T)``;
        ``non_tensor_batch``: ``uid`` and the plan fields (:data:`pairht.verl.rows.FIELDS`).
    config : PairVerlConfig, optional
        The ``weighting`` (defaults: exact pair-HT weights).

    Returns
    -------
    verl.DataProto
        ``data`` with ``advantages`` and ``returns`` (``(N, T)``, the rewards' dtype; computed
        in float64) and ``response_mask`` zeroed on the rows that were not continued.

    Raises
    ------
    ValueError
        Plan fields missing or inconsistent (:func:`pairht.verl.rows.group_rows`), or a
        non-finite reward on a continued row.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from verl import DataProto
    >>> from pairht.step import plan_step
    >>> from pairht.verl.rows import plan_rows
    >>> plan = plan_step([[0.5] * 2], [[10.0] * 2], [[False] * 2], budget_ratio=1.0, rng=0)
    >>> rows = plan_fields_from_extra(plan_rows(plan))
    >>> data = DataProto.from_dict(
    ...     tensors={"token_level_rewards": torch.tensor([[0.0, 1.0], [0.0, 0.0]]),
    ...              "response_mask": torch.ones(2, 2)},
    ...     non_tensors={"uid": np.array(["a", "a"], dtype=object), **rows})
    >>> pair_advantage(data).batch["advantages"].tolist()
    [[0.5, 0.5], [-0.5, -0.5]]
    """
    cfg = config or PairVerlConfig()
    rewards_t = data.batch["token_level_rewards"]
    mask_t = data.batch["response_mask"]
    groups = group_rows(data.non_tensor_batch["uid"], data.non_tensor_batch)
    per_row = rewards_t.detach().to(device="cpu", dtype=torch.float64).sum(-1).numpy()
    adv = estimate(groups, groups.take(per_row), weighting=cfg.weighting, w_max=cfg.w_max)
    per_row_adv = groups.scatter(adv.astype(np.float64))
    keep = groups.scatter(groups.plan.selected)
    keep_t = torch.as_tensor(keep, device=mask_t.device)
    response_mask = mask_t * keep_t[:, None].to(mask_t.dtype)
    a = torch.as_tensor(per_row_adv, device=rewards_t.device)[:, None]
    advantages = (a * response_mask.to(torch.float64)).to(rewards_t.dtype)
    # a new batch: DataProto.select() without keys returns the same TensorDict
    out = type(data)(batch=data.batch.clone(), non_tensor_batch=dict(data.non_tensor_batch),
                     meta_info=dict(data.meta_info))
    out.batch["advantages"] = advantages
    out.batch["returns"] = advantages.clone()
    out.batch["response_mask"] = response_mask
    return out
