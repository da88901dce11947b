r"""Pair advantages in torch, from the core's edge weights.

The core (:func:`pairht.estimators.edge_weights`) owns every weighting formula: it turns the
logged design (``J``, ``rho``) into the per-edge multiplier ``W_ij`` (normaliser included).
This module does only the torch accumulation

.. math:: A_i = \tfrac12 \sum_j W_{ij} (r_i - r_j)
   \qquad\text{(PAIR paper, Eq. pair-advantage)},

so that ``sum_i A_i s_i`` is the core's ``sum_{i<j} W_ij h_ij`` (for ``weighting="exact"``
the pair Horvitz-Thompson gradient, Eq. pair-ht). ``A`` is automatically centred over the
observed endpoints (``sum_i A_i = 0`` because ``W`` is symmetric) and is zero for every
candidate that was not completed.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from pairht.estimators import edge_weights

__all__ = ["design_edge_weights", "pair_advantages_torch", "standardise_advantages"]


def design_edge_weights(
    mask: ArrayLike,
    joint: ArrayLike,
    *,
    weighting: str = "exact",
    w_max: float | None = None,
) -> np.ndarray:
    """``W`` of shape ``(B, G, G)`` from the logged design: a thin call of the core.

    Parameters
    ----------
    mask : (B, G) bool
        ``J_i``, which candidates were completed.
    joint : (B, G, G) float
        ``rho_ij``, logged before any reward existed.
    weighting : {"exact", "clipped", "hajek"}
    w_max : float or None
        Clip level for ``"clipped"``.

    Examples
    --------
    >>> import numpy as np
    >>> W = design_edge_weights([[True, True]], np.full((1, 2, 2), 0.25))
    >>> W.tolist()  # M = 1, rho = 1/4
    [[[0.0, 4.0], [4.0, 0.0]]]
    """
    return edge_weights(mask, joint, weighting=weighting, w_max=w_max)


def pair_advantages_torch(
    rewards: torch.Tensor,
    weights: ArrayLike | torch.Tensor,
    *,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    r"""``A_i = 1/2 sum_j W_ij (r_i - r_j)``, accumulated in ``dtype``.

    Parameters
    ----------
    rewards : (B, G) tensor
        Rewards; entries of candidates that were not completed may be NaN (their ``W`` rows
        and columns are zero, so they are read as 0).
    weights : (B, G, G) array or tensor
        Edge multipliers from :func:`design_edge_weights` (symmetric, zero diagonal).
    dtype : torch.dtype
        Accumulation precision: float32 (paper: "accumulated in FP32"), or float64.

    Returns
    -------
    (B, G) tensor of ``dtype`` on ``rewards.device``.

    Examples
    --------
    >>> import torch
    >>> W = [[[0.0, 4.0], [4.0, 0.0]]]
    >>> pair_advantages_torch(torch.tensor([[1.0, 0.0]]), W).tolist()
    [[2.0, -2.0]]
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must have shape (B, G); got {tuple(rewards.shape)}")
    w = torch.as_tensor(np.asarray(weights), dtype=dtype, device=rewards.device)
    if w.shape != (*rewards.shape, rewards.shape[-1]):
        raise ValueError(
            f"weights must have shape (B, G, G) = {(*rewards.shape, rewards.shape[-1])} to match "
            f"rewards; got {tuple(w.shape)}"
        )
    # Unselected candidates carry NaN rewards; 0 * NaN would poison the sum, so read them as 0
    # (their weights are exactly zero).
    r = torch.nan_to_num(rewards.to(dtype), nan=0.0)
    diff = r[:, :, None] - r[:, None, :]
    return 0.5 * (w * diff).sum(-1)


def standardise_advantages(
    advantages: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, scale: str
) -> torch.Tensor:
    """Practical-mode reward standardisation: divide by the std of the completed rewards.

    ``scale="group"``: per-group sample std over completed candidates; ``"batch"``: over all
    completed candidates; ``"none"``: unchanged. ``1e-4`` is added to the std as in TRL. This is
    a practical departure (paper, appendix "Reward standardization"): the ratio is biased.
    """
    if scale == "none":
        return advantages
    r = torch.where(mask, rewards.to(advantages.dtype), torch.nan)
    if scale == "group":
        n = mask.sum(-1, keepdim=True)
        mean = torch.nanmean(r, dim=-1, keepdim=True)
        var = torch.nansum((r - mean) ** 2, dim=-1, keepdim=True) / (n - 1).clamp(min=1)
        std = torch.where(n > 1, var.sqrt(), torch.zeros_like(var))
    elif scale == "batch":
        vals = r[mask]
        std = vals.std() if vals.numel() > 1 else torch.zeros((), dtype=advantages.dtype)
        std = std.to(advantages.device)
    else:
        raise ValueError(f"scale must be 'none', 'group' or 'batch'; got {scale!r}")
    return advantages / (std + 1e-4)
