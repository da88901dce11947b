r"""Generated-token accounting of one design draw, and its Horvitz-Thompson full-suffix cost.

In a PAIR step every candidate generates its prefix (``L_i`` tokens) and only the completed
ones (``J_i = 1``) generate their suffix (``C_i`` tokens), so the tokens actually generated are

.. math:: T = \sum_i L_i + \sum_i J_i C_i ,

and the suffix tokens a full group would have generated, ``sum_i C_i``, are estimated without
bias by the Horvitz-Thompson total ``sum_i J_i C_i / pi_i`` (``E[J_i] = pi_i``). This is the
one implementation of both counts: the trainer's ``pair/*_tokens`` metrics, the demo's token
meter and the audit's whole-group cost (every ``J_i = 1``, ``pi_i = 1``) call it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import as_real_array


@dataclass(frozen=True)
class TokenCounts:
    """Token counts of one draw (summed over every group of the batch).

    Attributes
    ----------
    prefix : float
        ``sum_i L_i``, prefix tokens of every candidate.
    suffix : float
        ``sum_i J_i C_i``, suffix tokens of the completed candidates.
    full_suffix_ht : float
        ``sum_i J_i C_i / pi_i``, the design-unbiased estimate of ``sum_i C_i``.
    """

    prefix: float
    suffix: float
    full_suffix_ht: float

    @property
    def generated(self) -> float:
        """``prefix + suffix``: every token generated in the step."""
        return self.prefix + self.suffix


def token_counts(
    prefix_len: ArrayLike, suffix_len: ArrayLike, mask: ArrayLike, pi: ArrayLike
) -> TokenCounts:
    r"""Prefix, suffix and HT full-suffix token counts of a design draw.

    ``prefix = sum_i L_i``, ``suffix = sum_i J_i C_i`` and ``full_suffix_ht = sum_i J_i C_i /
    pi_i`` over all entries (any common shape, e.g. ``(B, G)``).

    Parameters
    ----------
    prefix_len : array_like
        ``L_i``, prefix tokens of every candidate.
    suffix_len : array_like
        ``C_i``, suffix tokens (realised; a synthetic population may hold non-integer
        costs); read where ``mask`` only (the others were never generated).
    mask : array_like of bool
        ``J_i``, which candidates were completed.
    pi : array_like
        Inclusion probabilities, ``> 0`` where ``mask``.

    Returns
    -------
    TokenCounts

    Examples
    --------
    >>> from pairht.estimators import token_counts
    >>> t = token_counts([4, 4, 4], [10, 30, 20], [True, False, True], [0.5, 0.5, 1.0])
    >>> t.prefix, t.suffix, t.full_suffix_ht, t.generated  # 10 / 0.5 + 20 / 1
    (12.0, 30.0, 40.0, 42.0)
    """
    m = np.asarray(mask)
    if m.dtype != bool:
        raise ValueError(f"mask must be a bool array (J_i, which candidates were completed); "
                         f"got dtype {m.dtype}")
    pre = as_real_array("prefix_len", prefix_len)
    suf = as_real_array("suffix_len", suffix_len)
    p = as_real_array("pi", pi)
    for name, arr in (("suffix_len", suf), ("pi", p)):
        if arr.shape != m.shape:
            raise ValueError(f"{name} must have the shape of mask {m.shape}; got {arr.shape}")
    bad = m & ~(p > 0)
    if bad.any():
        k = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"pi must be > 0 for every completed candidate (its suffix is weighted "
                         f"by 1/pi); pi{list(k)} = {float(p[k])!r}")
    selected = suf[m]
    return TokenCounts(
        prefix=float(pre.sum()),
        suffix=float(selected.sum()),
        full_suffix_ht=float((selected / p[m]).sum()),
    )
