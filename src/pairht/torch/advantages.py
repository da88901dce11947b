r"""Pair advantages in torch, from the core's edge weights.

The core (:func:`pairht.estimators.edge_weights`) owns every weighting formula: it turns the
logged design (``J``, ``rho``) into the per-edge multiplier ``W_ij`` (normaliser included).
This module hands the result to torch:

.. math:: A_i = \tfrac12 \sum_j W_{ij} (r_i - r_j)
   \qquad\text{(PAIR paper, Eq. pair-advantage)},

so that ``sum_i A_i s_i`` is the core's ``sum_{i<j} W_ij h_ij`` (for ``weighting="exact"``
the pair Horvitz-Thompson gradient, Eq. pair-ht). ``A`` is automatically centred over the
observed endpoints (``sum_i A_i = 0`` because ``W`` is symmetric) and is zero for every
candidate that was not completed.

One implementation of the formula: :func:`pair_advantages_torch` calls the core's
:func:`pairht.estimators.pair_advantages_from_weights` (its checks, its kernel); only the
conversion to and from torch lives here. The arrays are ``(B, G, G)`` with ``G`` a group
size, so the round trip through host memory costs nothing next to a policy update.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from pairht.estimators import edge_weights, pair_advantages_from_weights

__all__ = ["design_edge_weights", "pair_advantages_torch"]

#: torch accumulation dtypes and the numpy dtype the core accumulates in for each.
_ACCUMULATION = {torch.float32: np.float32, torch.float64: np.float64}


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
    weighting : {"exact", "clipped", "hajek", ...}
        A name in :data:`pairht.estimators.VARIANTS` that needs no ``pi``.
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


def _host_array(name: str, x: ArrayLike | torch.Tensor) -> np.ndarray:
    """``x`` as a float64 numpy array (exact for every real torch dtype, half and int included).

    Complex and non-numeric inputs are refused: a cast would drop the imaginary part or read a
    string as a number, a silent wrong answer.
    """
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise TypeError(f"{name} must be a real (float or int) tensor; got dtype {x.dtype}")
        # float64 holds every value of float16/bfloat16/float32 and ints below 2**53 exactly,
        # so the checks and the accumulation see the caller's numbers, not a rounded copy.
        return x.detach().to(device="cpu", dtype=torch.float64).numpy()
    arr = np.asarray(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_
    ) or np.issubdtype(arr.dtype, np.complexfloating):
        raise TypeError(
            f"{name} must be a real numeric array or tensor; got dtype {arr.dtype}"
        )
    return arr.astype(np.float64)


def pair_advantages_torch(
    rewards: ArrayLike | torch.Tensor,
    weights: ArrayLike | torch.Tensor,
    *,
    mask: ArrayLike | torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    r"""``A_i = 1/2 sum_j W_ij (r_i - r_j)``, accumulated in ``dtype``, as a torch tensor.

    The contract of :func:`pairht.pair_advantages`: rewards at completed candidates must be
    finite (a NaN there raises, it is never read as 0); rewards at candidates that were not
    completed are ignored and may be NaN. Inputs of any real dtype (integer, bool, float16,
    bfloat16) are read exactly in float64 and accumulated in ``dtype``, never in the input's
    dtype (integer arithmetic would truncate the weights, float16 would overflow).

    Parameters
    ----------
    rewards : (B, G) tensor or array_like
        Rewards ``r_i``.
    weights : (B, G, G) tensor or array_like
        Edge multipliers from :func:`design_edge_weights`: finite, nonnegative, symmetric,
        zero diagonal, zero on every edge that was not observed.
    mask : (B, G) bool, optional
        ``J_i``, which candidates were completed. ``None``: the candidates with at least one
        nonzero weight (the only ones whose reward enters ``A``). When given, ``weights`` must
        vanish off the observed edges ``J_i J_j = 1``.
    dtype : torch.float32 or torch.float64
        Accumulation precision and dtype of the result: float32 (paper: "accumulated in
        FP32", the default) or float64 (the reference; equal to :func:`pairht.pair_advantages`
        to rounding).

    Returns
    -------
    (B, G) tensor of ``dtype``, on ``rewards.device`` (or ``weights.device``, or the CPU).

    Raises
    ------
    TypeError
        ``rewards``/``weights`` complex or not numeric, or ``dtype`` not a float dtype.
    ValueError
        Shapes, non-finite or asymmetric weights, NaN/inf rewards at completed candidates,
        weights on unobserved edges, or a result that overflows ``dtype``.

    Examples
    --------
    >>> import torch
    >>> W = [[[0.0, 4.0], [4.0, 0.0]]]
    >>> pair_advantages_torch(torch.tensor([[1.0, 0.0]]), W).tolist()
    [[2.0, -2.0]]
    >>> pair_advantages_torch([[1, 0]], W, dtype=torch.float64).dtype  # ints read exactly
    torch.float64
    """
    if dtype not in _ACCUMULATION:
        raise TypeError(
            f"dtype must be torch.float32 or torch.float64 (the accumulation precision; an "
            f"integer or half dtype would truncate or overflow the weights); got dtype={dtype!r}"
        )
    acc = _ACCUMULATION[dtype]
    device = next(
        (x.device for x in (rewards, weights) if isinstance(x, torch.Tensor)),
        torch.device("cpu"),
    )
    r = _host_array("rewards", rewards)
    if r.ndim != 2:
        raise ValueError(f"rewards must have shape (B, G); got shape {r.shape}")
    m = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else mask
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported just below
        adv = pair_advantages_from_weights(r, _host_array("weights", weights), mask=m,
                                           dtype=acc)
    if not np.all(np.isfinite(adv)):
        raise ValueError(
            f"the advantages overflow {dtype} (largest |W_ij (r_i - r_j)| exceeds its range); "
            f"pass dtype=torch.float64 or rescale the rewards"
        )
    return torch.from_numpy(np.ascontiguousarray(adv)).to(device)
