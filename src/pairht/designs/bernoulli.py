"""Independent Bernoulli (Poisson) sampling: each unit enters independently with prob. pi_i."""

from __future__ import annotations

import numpy as np

from pairht.designs.base import Design, all_masks


class Bernoulli(Design):
    r"""Independent Bernoulli (Poisson) sampling design with random sample size.

    Each unit is included independently: ``J_i ~ Bernoulli(pi_i)``, so every inclusion
    probability factorises,

    .. math:: \pi_S = \prod_{k \in S} \pi_k, \qquad \pi_{ij} = \pi_i \pi_j \ (i \ne j).

    The sample size is random with mean ``sum(pi)``. Pair positivity holds iff every
    ``pi_i > 0``.

    Parameters
    ----------
    pi : (N,) array_like
        Inclusion probabilities in [0, 1].

    References
    ----------
    Hajek, J. (1964). Asymptotic theory of rejective sampling with varying probabilities
    from a finite population. Ann. Math. Statist. 35(4), 1491-1523.

    Examples
    --------
    >>> from pairht.designs import Bernoulli
    >>> d = Bernoulli([0.5, 0.25, 1.0])
    >>> float(d.joint()[0, 1])
    0.125
    >>> d.sample(rng=0).shape
    (3,)
    """

    name = "bernoulli"
    fixed_size = False
    max_inclusion_order = 64

    def _joint(self) -> np.ndarray:
        return np.outer(self.pi, self.pi)

    def _exchangeable_inclusion(self, k: int) -> float | None:
        """``pi_0 ** k`` when every unit has the same ``pi``."""
        pi = self.pi
        return float(pi[0] ** k) if bool(np.all(pi == pi[0])) else None

    def _inclusion_rows(self, rows: np.ndarray) -> np.ndarray:
        return np.prod(self.pi[rows], axis=1)

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.random((size, self.n_units)) < self.pi

    def _support(self) -> tuple[np.ndarray, np.ndarray]:
        masks = all_masks(self.n_units)
        probs = np.prod(np.where(masks, self.pi, 1.0 - self.pi), axis=1)
        return masks, probs
