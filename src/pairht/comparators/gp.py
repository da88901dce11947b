r"""A small Gaussian-process predictor of per-prompt success probability (VIP's predictor).

VIP (Nguyen et al., 2026, arXiv 2602.01601) predicts each prompt's success probability from
recent rollouts with a lightweight GP. The paper's exact kernel and features are not in the
material available to us; this module makes the following choices (documented in
``docs/comparators.md``):

* **Target.** The logit of the Beta(1,1)-smoothed success rate,
  ``y_b = log((s_b + 1) / (t_b - s_b + 1))`` for prompts with ``t_b > 0`` trials.
* **Noise.** Heteroscedastic, the delta-method variance of that logit,
  ``sigma_b^2 = (t_b + 2) / ((s_b + 1)(t_b - s_b + 1))`` (``= 1 / (n p (1-p))`` at
  ``p = (s+1)/(t+2)``, ``n = t + 2``).
* **Prior.** Constant mean ``m`` = logit of the pooled smoothed rate
  ``(sum s + 1) / (sum t + 2)``; kernel ``k(x, x') = v exp(-|x - x'|^2 / (2 l^2))`` on prompt
  features, or ``k = v * 1[b = b']`` (independent prompts) without features.
* **Prediction.** The posterior mean of the latent logit, mapped by the logistic function.

With the delta kernel the posterior mean is the closed-form shrinkage
``mu_b = m + v / (v + sigma_b^2) (y_b - m)``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import cho_factor, cho_solve
from scipy.special import expit

from pairht._validation import check_finite


def smoothed_logit(successes: np.ndarray, trials: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(y, sigma^2)``: logit of the Beta(1,1)-smoothed rate and its delta-method variance."""
    a = successes + 1.0
    b = trials - successes + 1.0
    return np.log(a / b), (trials + 2.0) / (a * b)


def gp_success_probability(
    successes: ArrayLike,
    trials: ArrayLike,
    features: ArrayLike | None = None,
    *,
    signal_var: float = 1.0,
    lengthscale: float | None = None,
    prior_mean: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""GP posterior of each prompt's success probability from its rollout history.

    .. math:: \mu = m + K_{\cdot o} (K_{oo} + \mathrm{diag}\,\sigma^2_o)^{-1} (y_o - m),\qquad
              \hat p = \operatorname{expit}(\mu),

    over the observed prompts ``o = {b : t_b > 0}`` (a prompt never tried gets the prior
    mean, moved by its neighbours in feature space).

    Parameters
    ----------
    successes, trials : (B,) array_like
        Correct rollouts and rollouts so far per prompt, ``0 <= s <= t``.
    features : (B, d) array_like, optional
        Prompt features (e.g. an embedding); without them prompts are independent.
    signal_var : float
        Kernel variance ``v > 0`` (prior variance of a prompt's logit around ``m``).
    lengthscale : float, optional
        RBF lengthscale ``l > 0``; default the median pairwise feature distance (1 if all
        features coincide).
    prior_mean : float, optional
        Prior mean ``m`` of the logit; default the pooled smoothed logit.

    Returns
    -------
    p : (B,) ndarray
        Predicted success probabilities ``expit(mu)``.
    var : (B,) ndarray
        Posterior variance of the latent logit.

    Examples
    --------
    >>> p, var = gp_success_probability([3, 0, 0], [4, 4, 0])
    >>> p.round(4).tolist()   # the untried prompt gets the pooled rate 4/10
    [0.5554, 0.2783, 0.4]
    """
    s = check_finite("successes", successes)
    t = check_finite("trials", trials)
    if s.ndim != 1 or s.shape != t.shape:
        raise ValueError(f"successes and trials must be 1-d of equal length; got {s.shape} "
                         f"and {t.shape}")
    if np.any(s < 0) or np.any(s > t):
        raise ValueError("successes and trials must satisfy 0 <= successes <= trials")
    if not (np.isfinite(signal_var) and signal_var > 0):
        raise ValueError(f"signal_var must be a positive float; got {signal_var!r}")
    B = s.shape[0]
    y, noise = smoothed_logit(s, t)
    m = (float(np.log((s.sum() + 1.0) / (t.sum() - s.sum() + 1.0)))
         if prior_mean is None else float(prior_mean))
    if features is None:
        K = signal_var * np.eye(B)
    else:
        X = check_finite("features", features)
        if X.ndim != 2 or X.shape[0] != B:
            raise ValueError(f"features must have shape ({B}, d); got {X.shape}")
        d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
        if lengthscale is None:
            off = np.sqrt(d2[np.triu_indices(B, 1)])
            off = off[off > 0]
            lengthscale = float(np.median(off)) if off.size else 1.0
        if not (np.isfinite(lengthscale) and lengthscale > 0):
            raise ValueError(f"lengthscale must be a positive float; got {lengthscale!r}")
        K = signal_var * np.exp(-d2 / (2.0 * lengthscale**2))
    obs = t > 0
    mu = np.full(B, m)
    var = np.full(B, signal_var)
    if obs.any():
        Koo = K[np.ix_(obs, obs)] + np.diag(noise[obs])
        fac = cho_factor(Koo, lower=True)
        Kbo = K[:, obs]
        mu = m + Kbo @ cho_solve(fac, y[obs] - m)
        var = np.diag(K) - np.einsum("bo,ob->b", Kbo, cho_solve(fac, Kbo.T))
    return expit(mu), var
