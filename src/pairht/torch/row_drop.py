r"""Drop the unselected rows from TRL's loss batch, leaving the loss exactly unchanged.

PAIR keeps every row of a generation batch through TRL's scoring (TRL's batch and reward
bookkeeping need all ``G`` rows), then masks the unselected rows out of the loss. Their forward
and backward passes are pure waste: :func:`drop_rows` removes them from the batch handed to the
update, trims the completion columns to the longest kept row, and returns the factor by which
the loss of the smaller batch must be multiplied to equal the masked loss of the full batch.

Which factor (TRL 1.16 ``GRPOTrainer._compute_loss``, ``m`` the loss mask, ``R`` the rows of the
micro-batch, ``l_rt`` the per-token loss, KL term included):

* row-mean losses (``grpo``, ``sapo``: ``(1/R) sum_r sum_t m l / max(1, sum_t m)``;
  ``dr_grpo``: ``(1/(R L)) sum m l``; ``luspo``: ``(1/R) sum_r sum_t m l``): a masked row adds
  0 to the sum but 1 to ``R``, so with ``R'`` rows kept of ``R`` the factor is ``R' / R``;
* token-normalised losses (``bnpo``: ``sum m l / sum m``; ``dapo``, ``cispo``, ``vespo``:
  ``sum m l / num_items_in_batch``): masked rows add 0 to both sums, factor 1.

Every per-token quantity TRL computes is per row (importance ratios, the sequence-level ratio,
VESPO's gamma weights, the off-policy mask) or a mean over unmasked tokens (the entropy mask's
quantile, the entropy bonus), so the kept rows' terms do not change. Trailing completion
columns that no kept row uses are dropped; positions before them are unaffected (causal
attention, right padding). Prompt columns are kept: left padding shifts positions.

Every process must run the same micro-steps and TRL's loss gathers per-row metrics across
processes (equal row counts): the trainer pads each process's batch with masked rows to the
largest kept count of any process (``min_rows``), which leaves the loss exact.

Not exact, hence refused by :func:`check_drop_rows`: ``steps_per_generation > 1`` (TRL shuffles
and splits the generation batch into micro-batches of equal row counts), and a row-mean loss
with an entropy bonus (the bonus is a token mean added to the loss, which the factor ``R'/R``
would rescale too). A model with a router auxiliary loss (MoE) is refused by the trainer.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "LOSS_SCALE_KEY",
    "ROW_MEAN_LOSSES",
    "TOKEN_NORMALISED_LOSSES",
    "check_drop_rows",
    "drop_rows",
    "drop_rows_reason",
    "loss_scale",
]

#: TRL loss types normalised per row (masked rows count in the row number).
ROW_MEAN_LOSSES = ("grpo", "sapo", "dr_grpo", "luspo")
#: TRL loss types normalised by a token count (masked rows count nowhere).
TOKEN_NORMALISED_LOSSES = ("bnpo", "dapo", "cispo", "vespo")

#: Key of the 0-dim factor in the batch dict (TRL's shuffle and split pass 0-dim tensors through).
LOSS_SCALE_KEY = "pair_loss_scale"

#: Per-row keys aligned with the prompt columns or not column-aligned at all.
_ROW_KEYS = ("prompt_ids", "prompt_mask", "advantages")
#: Per-row keys aligned with the completion columns (``importance_sampling_ratio`` may be
#: ``(R, 1)`` at sequence level: only sliced when it spans the completion columns).
_COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
)
#: Per-row keys spanning prompt then completion columns.
_PROMPT_COMPLETION_KEYS = ("token_type_ids", "mm_token_type_ids")
#: Batch-level entries, passed through unchanged (TRL's ``num_items_in_batch`` counts loss
#: tokens, which the masked rows did not contribute to).
_BATCH_KEYS = ("num_items_in_batch", LOSS_SCALE_KEY)


def drop_rows_reason(
    loss_type: str, steps_per_generation: int, entropy_bonus: bool
) -> str | None:
    """Why dropping rows would change the loss (``None``: it is exact).

    Parameters
    ----------
    loss_type : str
        TRL's ``loss_type``.
    steps_per_generation : int
        TRL's ``steps_per_generation`` (micro-batches per generation batch).
    entropy_bonus : bool
        Whether TRL adds an entropy bonus (``entropy_coef != 0`` or adaptive entropy).
    """
    if steps_per_generation != 1:
        return (
            f"steps_per_generation must be 1 (TRL shuffles the generation batch and splits it "
            f"into steps_per_generation micro-batches of equal row counts, so removing rows would "
            f"regroup them); got steps_per_generation={steps_per_generation}"
        )
    if loss_type not in ROW_MEAN_LOSSES + TOKEN_NORMALISED_LOSSES:
        return (
            f"loss_type must be one of {ROW_MEAN_LOSSES + TOKEN_NORMALISED_LOSSES} (the loss "
            f"normalisers worked out in pairht.torch.row_drop); got loss_type={loss_type!r}"
        )
    if loss_type in ROW_MEAN_LOSSES and entropy_bonus:
        return (
            f"a row-mean loss_type ({loss_type!r}) is rescaled by kept/total rows, which would "
            f"rescale the entropy bonus too; set entropy_coef=0 and use_adaptive_entropy=False, "
            f"or use a token-normalised loss_type {TOKEN_NORMALISED_LOSSES}"
        )
    return None


def check_drop_rows(loss_type: str, steps_per_generation: int, entropy_bonus: bool) -> None:
    """Raise ``ValueError`` naming the rule when :func:`drop_rows_reason` finds one."""
    reason = drop_rows_reason(loss_type, steps_per_generation, entropy_bonus)
    if reason is not None:
        raise ValueError(f"drop_unselected_rows=True would change the loss: {reason}")


def loss_scale(loss_type: str, kept_rows: int, rows: int) -> float:
    """Factor ``f`` with ``f * loss(kept rows) = loss(all rows, unselected masked)``.

    ``kept_rows / rows`` for :data:`ROW_MEAN_LOSSES`, 1 for :data:`TOKEN_NORMALISED_LOSSES`.
    """
    if not 1 <= kept_rows <= rows:
        raise ValueError(
            f"kept_rows must lie in [1, rows={rows}]; got kept_rows={kept_rows!r}"
        )
    if loss_type in ROW_MEAN_LOSSES:
        return kept_rows / rows
    if loss_type in TOKEN_NORMALISED_LOSSES:
        return 1.0
    raise ValueError(
        f"loss_type must be one of {ROW_MEAN_LOSSES + TOKEN_NORMALISED_LOSSES}; got "
        f"loss_type={loss_type!r}"
    )


def drop_rows(
    batch: dict[str, Any], keep: torch.Tensor, loss_type: str, *, min_rows: int = 1
) -> dict[str, Any]:
    """The batch restricted to the rows ``keep``, completion columns trimmed, loss factor set.

    Parameters
    ----------
    batch : dict
        This process's output of ``GRPOTrainer._generate_and_score_completions`` (unselected
        rows already masked: ``completion_mask`` zero).
    keep : (R,) bool tensor
        Rows to keep.
    loss_type : str
        TRL's ``loss_type``; sets the factor :func:`loss_scale`, stored at :data:`LOSS_SCALE_KEY`
        (multiplied into any factor already there).
    min_rows : int
        Fewest rows to return (at least 1: an empty batch has no forward pass): when fewer are
        kept, the first unkept (masked) rows fill up, in row order. A masked row adds nothing to
        the loss and counts in ``R'`` as in ``R``, so the factor stays exact. Distributed runs
        pass the largest kept count of any process: TRL's loss gathers per-row metrics
        (``clip_ratio/low_min``) across processes, a collective that needs equal row counts.

    Returns
    -------
    dict
        A new dict; ``batch`` is not modified.

    Raises
    ------
    ValueError
        A key this module does not know how to subset (a new TRL field, image inputs): refusing
        is safer than passing a tensor whose rows no longer match.
    """
    rows = int(batch["prompt_ids"].shape[0])
    keep = keep.to(device="cpu", dtype=torch.bool).reshape(-1)
    if keep.numel() != rows:
        raise ValueError(f"keep must have one entry per row ({rows}); got {keep.numel()}")
    unknown = sorted(
        set(batch) - set(_ROW_KEYS + _COMPLETION_KEYS + _PROMPT_COMPLETION_KEYS + _BATCH_KEYS)
    )
    if unknown:
        raise ValueError(
            f"drop_unselected_rows cannot subset the batch entries {unknown} (not in "
            f"pairht.torch.row_drop's list of TRL 1.16 fields); set drop_unselected_rows=False"
        )
    if not 1 <= min_rows <= rows:
        raise ValueError(f"min_rows must lie in [1, rows={rows}]; got min_rows={min_rows!r}")
    short = min_rows - int(keep.sum())
    if short > 0:
        keep = keep.clone()
        keep[(~keep).nonzero().reshape(-1)[:short]] = True
    idx = keep.nonzero().reshape(-1)
    completion_mask = batch["completion_mask"]
    idx_dev = idx.to(completion_mask.device)
    used = completion_mask[idx_dev].sum(0).nonzero()
    # at least one column: a zero-width completion has no logits to keep
    width = int(used[-1, 0]) + 1 if used.numel() else 1
    n_prompt = int(batch["prompt_ids"].shape[1])
    n_completion = int(completion_mask.shape[1])
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if key in _BATCH_KEYS or value is None:
            out[key] = value
            continue
        sub = value[idx_dev.to(value.device)]
        if key in _COMPLETION_KEYS and sub.ndim >= 2 and sub.shape[1] == n_completion:
            sub = sub[:, :width]
        elif key in _PROMPT_COMPLETION_KEYS and sub.shape[1] == n_prompt + n_completion:
            sub = sub[:, : n_prompt + width]
        out[key] = sub
    factor = loss_scale(loss_type, int(idx.numel()), rows)
    previous = batch.get(LOSS_SCALE_KEY)
    scale = torch.tensor(factor, dtype=torch.float64)
    out[LOSS_SCALE_KEY] = scale if previous is None else previous * scale
    return out
