r"""Per-prompt success history for the prompt-level allocators (VIP, HORA, DUET) in training.

VIP predicts a prompt's success probability from its recent rollouts and HORA from a Beta
posterior of its past successes and trials; both need, for each prompt of the batch, the
counts ``(s_b, t_b)`` that ``pairht.step.StepInputs(history=...)`` carries. This store keeps
them across steps, keyed by the prompt's token ids, and is updated only with rewards that were
actually observed (the completed candidates, finished prefixes included).

Update, for a prompt visited with observed set ``O`` (``n = |O|``), rewards clipped to [0, 1]
(a success is ``r = 1``; partial credit counts as that fraction of a success, as for the
success head) and design probabilities ``pi``:

.. math::
    \hat p = \frac{\sum_{i \in O} r_i / \pi_i}{\sum_{i \in O} 1 / \pi_i}\ (\text{Hajek}),
    \qquad s \leftarrow \gamma s + n \hat p, \qquad t \leftarrow \gamma t + n .

Why Hajek and not raw counts: the papers sample a prompt's rollouts uniformly, so their raw
counts estimate its success rate. In PAIR's trainer the observed candidates are not a uniform
sample (a finished prefix is always in, and PAIR's own design prefers some candidates), so
the raw mean would lean towards whichever candidates the design favours. The Hajek ratio
re-weights each observation by ``1 / pi`` and is consistent for the group's success rate under
any design with ``pi > 0`` on the candidates it can observe; with a uniform design it *is* the
raw mean. The trial count stays ``n``, the number of rewards actually seen, so a posterior
built from ``(s, t)`` is never more certain than the observations allow. ``weighting="raw"``
gives the papers' plain counts. ``decay = gamma`` in (0, 1] forgets old visits geometrically
("recent rollouts", VIP); 1 (default) keeps every visit, as HORA's counts do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

WEIGHTINGS = ("hajek", "raw")
KEY_BYTES = 16


def prompt_key(prompt_ids: Sequence[int]) -> np.ndarray:
    """``(16,)`` uint8 digest (BLAKE2b) of a prompt's token ids: a fixed-size key that can be
    gathered across processes like any array, whatever the prompt's length."""
    data = np.asarray([int(t) for t in prompt_ids], dtype=np.int64).tobytes()
    return np.frombuffer(hashlib.blake2b(data, digest_size=KEY_BYTES).digest(), dtype=np.uint8)


def group_keys(row_keys: np.ndarray, num_generations: int) -> list[bytes]:
    """One key per group from the ``(B * G, 16)`` row keys (the ``G`` rows of a group repeat one
    prompt; a group that does not is refused, since its history would be meaningless)."""
    keys = np.asarray(row_keys, dtype=np.uint8)
    g = int(num_generations)
    if keys.ndim != 2 or keys.shape[1] != KEY_BYTES or keys.shape[0] % g:
        raise ValueError(f"row_keys must have shape (B * {g}, {KEY_BYTES}); got {keys.shape}")
    grouped = keys.reshape(-1, g, KEY_BYTES)
    mixed = np.any(grouped != grouped[:, :1], axis=(1, 2))
    if mixed.any():
        raise ValueError(f"every group of {g} rows must repeat one prompt; group "
                         f"{int(np.argmax(mixed))} holds different prompts")
    return [bytes(k) for k in grouped[:, 0]]


class PromptHistory:
    r"""Successes and trials per prompt, updated with observed rewards only (see module doc).

    Parameters
    ----------
    weighting : {"hajek", "raw"}
        ``"hajek"`` (default): the visit's success rate is the ``1/pi``-weighted mean of the
        observed rewards; ``"raw"``: their plain mean (the papers' counts).
    decay : float in (0, 1]
        Factor ``gamma`` applied to a prompt's counts before each new visit is added.

    Examples
    --------
    >>> h = PromptHistory()
    >>> k = [b"a"]
    >>> h.update(k, np.array([[1.0, 0.0, np.nan]]), np.array([[True, True, False]]),
    ...          np.array([[1.0, 0.5, 0.5]]))
    >>> {name: v.tolist() for name, v in h.lookup(k + [b"new"]).items()}
    {'successes': [0.6666666666666666, 0.0], 'trials': [2.0, 0.0]}
    """

    def __init__(self, weighting: str = "hajek", decay: float = 1.0) -> None:
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}; got {weighting!r}")
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) \
                or not 0.0 < float(decay) <= 1.0:
            raise ValueError(f"decay must be a float in (0, 1] (the weight of older visits); "
                             f"got {decay!r}")
        self.weighting = weighting
        self.decay = float(decay)
        self._counts: dict[bytes, tuple[float, float]] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def keys(self) -> list[bytes]:
        """The prompts with a history, in the order they were first seen."""
        return list(self._counts)

    def lookup(self, keys: Sequence[bytes]) -> dict[str, np.ndarray]:
        """``{"successes": (B,), "trials": (B,)}`` for the batch's prompts (0, 0 if unseen)."""
        st = np.array([self._counts.get(k, (0.0, 0.0)) for k in keys], dtype=np.float64)
        st = st.reshape(len(keys), 2)
        return {"successes": st[:, 0].copy(), "trials": st[:, 1].copy()}

    def update(self, keys: Sequence[bytes], rewards: np.ndarray, mask: np.ndarray,
               pi: np.ndarray) -> None:
        """Add one visit per prompt: the observed (``mask``) rewards, weighted by ``1 / pi``.

        Parameters
        ----------
        keys : B prompt keys (a key may repeat: its visits are added in order)
        rewards : (B, G) array, NaN where unobserved
        mask : (B, G) bool, the candidates whose reward was observed
        pi : (B, G) array, the design's inclusion probabilities (``> 0`` where observed)
        """
        r = np.asarray(rewards, dtype=np.float64)
        m = np.asarray(mask, dtype=bool)
        p = np.asarray(pi, dtype=np.float64)
        if r.shape != m.shape or p.shape != m.shape or m.ndim != 2 or m.shape[0] != len(keys):
            raise ValueError(f"rewards, mask and pi must share shape (B, G) with B = "
                             f"{len(keys)} keys; got {r.shape}, {m.shape}, {p.shape}")
        if np.any(m & ~(np.isfinite(r))):
            raise ValueError("rewards must be finite wherever mask is True (observed)")
        if np.any(m & ~(p > 0)):
            raise ValueError("pi must be > 0 wherever mask is True: an observed candidate had a "
                             "positive chance of being observed")
        w = np.where(m, 1.0 / np.where(m, p, 1.0), 0.0) if self.weighting == "hajek" \
            else m.astype(np.float64)
        y = np.clip(np.where(m, r, 0.0), 0.0, 1.0)
        n = m.sum(axis=1).astype(np.float64)
        wsum = w.sum(axis=1)
        rate = np.divide((w * y).sum(axis=1), wsum, out=np.zeros_like(wsum), where=wsum > 0)
        for b, key in enumerate(keys):
            if n[b] == 0:
                continue  # nothing observed: the prompt's history is unchanged
            s, t = self._counts.get(key, (0.0, 0.0))
            # min(): n * rate <= n up to rounding; keep 0 <= s <= t exact for the allocators
            t_new = self.decay * t + n[b]
            self._counts[key] = (min(self.decay * s + n[b] * rate[b], t_new), t_new)

    def state_dict(self) -> dict[str, Any]:
        """Settings and counts (keys as hex strings), for checkpoints."""
        return {"weighting": self.weighting, "decay": self.decay,
                "counts": {k.hex(): list(v) for k, v in self._counts.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.__init__(state["weighting"], state["decay"])  # type: ignore[misc]
        self._counts = {bytes.fromhex(k): (float(v[0]), float(v[1]))
                        for k, v in state["counts"].items()}
