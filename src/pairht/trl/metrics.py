"""TRL's own ``reward``, ``reward_std``, ``rewards/*`` and ``completions/*`` metrics for PAIR.

TRL computes them over every row of the batch. Under PAIR an unselected row holds only its
prefix (no reward, a short "completion"), so TRL's numbers would describe the prefixes, not the
policy. :func:`grpo_equivalent_metrics` recomputes each over the completed rows, weighted by
``1 / pi`` (pairs by ``1 / rho``) so that it estimates what GRPO's would have logged on the same
prompts (:mod:`pairht.estimators.batch_stats`):

==================================  ===========================================================
``reward``, ``rewards/<f>/mean``    HT mean (unbiased for the full batch's mean)
``reward_std``, ``rewards/<f>/std`` square root of the unbiased HT variance (pair form)
``completions/mean_length``         HT mean of completion lengths
``completions/clipped_ratio``       HT mean of the truncation indicator
``completions/mean_terminated_``    Hajek mean over completions that ended (a ratio: its
``length``                          denominator, the number that ended, is itself estimated)
``completions/min_*``, ``max_*``    over the completed rows (an extreme is not estimable)
==================================  ===========================================================

:func:`replace_logged` overwrites the values TRL appended for the batch with these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pairht.estimators.batch_stats import hajek_mean, ht_mean, ht_variance

__all__ = ["grpo_equivalent_metrics", "replace_logged"]


def grpo_equivalent_metrics(
    rewards_per_func: np.ndarray | None,
    reward_weights: Sequence[float],
    func_names: Sequence[str],
    lengths: np.ndarray,
    truncated: np.ndarray,
    mask: np.ndarray,
    pi: np.ndarray,
    joint: np.ndarray,
) -> dict[str, float]:
    r"""TRL's reward and completion metrics of one batch, estimated from its completed rows.

    Parameters
    ----------
    rewards_per_func : (B, G, F) array or None
        Each reward function's value (NaN where it gave none); read where ``mask``.
    reward_weights : (F,) sequence    TRL's ``reward_weights``
    func_names : (F,) sequence of str TRL's ``reward_func_names``
    lengths : (B, G) array            completion tokens of each completed row
    truncated : (B, G) bool           the completion did not end with EOS (or pad)
    mask : (B, G) bool                ``J``, the completed rows
    pi : (B, G) array                 first-order inclusion probabilities
    joint : (B, G, G) array           ``rho`` within each group

    Returns
    -------
    dict
        ``reward = (1/N) sum_i J_i r_i / pi_i`` with ``r_i = sum_f w_f r_if`` (NaN terms
        counted 0, as TRL's ``nansum``), ``reward_std = sqrt(ht_variance(r))``, and the keys
        of the module table. A function that gave no value on some completed row has no
        ``rewards/<f>/*`` entry (its mean over the rows it scored is not a batch mean).

    Examples
    --------
    >>> import numpy as np
    >>> mask = np.array([[True, False, True, True]])
    >>> pi = np.array([[0.5, 0.5, 1.0, 1.0]])
    >>> joint = np.outer(pi[0], pi[0])[None]; joint[0, 0, 1] = joint[0, 1, 0] = 0.0
    >>> np.fill_diagonal(joint[0], pi[0])
    >>> m = grpo_equivalent_metrics(np.array([[[1.0], [np.nan], [0.0], [1.0]]]), [1.0],
    ...                             ["acc"], np.array([[10, 3, 20, 30]]),
    ...                             np.zeros((1, 4), bool), mask, pi, joint)
    >>> m["reward"], m["completions/mean_length"], m["completions/max_length"]
    (0.75, 17.5, 30.0)
    """
    out: dict[str, float] = {}
    if rewards_per_func is not None:
        r = np.asarray(rewards_per_func, dtype=np.float64)
        weights = np.asarray(reward_weights, dtype=np.float64)
        total = np.nansum(r * weights, axis=-1)
        out["reward"] = ht_mean(total, mask, pi)
        out["reward_std"] = float(np.sqrt(ht_variance(total, mask, pi, joint)))
        for f, name in enumerate(func_names):
            col = r[..., f]
            if np.all(np.isfinite(col[mask])):
                out[f"rewards/{name}/mean"] = ht_mean(col, mask, pi)
                out[f"rewards/{name}/std"] = float(np.sqrt(ht_variance(col, mask, pi, joint)))
    length = np.asarray(lengths, dtype=np.float64)
    cut = np.asarray(truncated, dtype=bool)
    out["completions/mean_length"] = ht_mean(length, mask, pi)
    out["completions/clipped_ratio"] = ht_mean(cut.astype(np.float64), mask, pi)
    seen = length[mask]
    if seen.size:
        out["completions/min_length"] = float(seen.min())
        out["completions/max_length"] = float(seen.max())
    ended = mask & ~cut
    # TRL logs 0 when no completion ended; so do we
    out["completions/mean_terminated_length"] = (
        hajek_mean(length, ended, pi) if ended.any() else 0.0)
    term = length[ended]
    out["completions/min_terminated_length"] = float(term.min()) if term.size else 0.0
    out["completions/max_terminated_length"] = float(term.max()) if term.size else 0.0
    return out


def replace_logged(metrics: Any, values: dict[str, float]) -> None:
    """Overwrite the value TRL appended for this batch under each key of ``values``.

    ``metrics`` is the trainer's ``_metrics["train"]`` (``key -> list``, averaged at logging
    time); a key TRL did not log this batch is appended.
    """
    for key, value in values.items():
        logged = metrics[key]
        if logged:
            logged[-1] = float(value)
        else:
            logged.append(float(value))


def log_grpo_equivalent(trainer: Any, draw: Any, completion_ids: Any) -> dict[str, float]:
    """Replace TRL's reward and completion metrics of a PAIR training batch (the one call of
    :class:`~pairht.trl.PairGRPOTrainer`'s advantage seam); returns the values logged.

    ``draw`` is the batch's :class:`~pairht.trl.trainer.DesignDraw` (global over processes;
    called before any pruning, so its design is the one that generated), ``completion_ids``
    this process's padded ``(rows, T)`` completion tensor from TRL. A completed row's length is
    ``prefix_len + suffix_len`` (what it generated); it is truncated when its last token is
    neither EOS nor pad, TRL's own rule.
    """
    import torch

    mask, pi, joint = draw.mask, draw.pi, draw.joint  # before any pruning: as generated
    lengths = (draw.prefix_len + draw.suffix_len).astype(np.int64)
    local_len = torch.as_tensor(lengths.reshape(-1)[draw.rows], device=completion_ids.device)
    local_mask = torch.as_tensor(mask.reshape(-1)[draw.rows], device=completion_ids.device)
    last = completion_ids.gather(1, (local_len - 1).clamp(min=0)[:, None])[:, 0]
    stop = torch.as_tensor([*trainer.eos_token_ids, trainer._tokenizer.pad_token_id],
                           device=completion_ids.device)
    cut_local = local_mask & ~torch.isin(last, stop)
    cut = trainer.accelerator.gather(cut_local).cpu().numpy().reshape(mask.shape)
    per_func = draw.rewards_per_func
    values = grpo_equivalent_metrics(
        None if per_func is None else per_func.reshape(*mask.shape, -1),
        trainer.reward_weights.tolist(), trainer.reward_func_names, lengths, cut, mask, pi,
        joint)
    replace_logged(trainer._metrics["train"], values)
    return values
