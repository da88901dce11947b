"""Small fixed populations shared by the audit tests."""

from __future__ import annotations

import pytest

from pairht.audit import AuditConfig, synthetic_population
from pairht.audit.runner import run_audit


@pytest.fixture(scope="session")
def small_pop():
    """P = 3 prompts, G = 6 candidates (binary rewards, noisy predictions): 2**6 supports."""
    return synthetic_population(3, 6, calibration="noisy", rng=11)


@pytest.fixture(scope="session")
def small_cfg():
    return AuditConfig(budget_ratio=0.5, pi_min=0.1, seed=4, enum_limit=2**6)


@pytest.fixture(scope="session")
def small_audit(small_pop, small_cfg):
    """Every registered row, exact and 20,000 Monte Carlo draws per prompt."""
    return run_audit(small_pop, None, small_cfg, n_draws=20_000)


def rare_outcome_population(n_prompts: int = 40, G: int = 16, *, seed: int = 0,
                            overconfidence: float = 2.5, signal: float = 0.3,
                            noise: float = 0.5, prompt_noise: float = 0.5):
    """A frozen population in the RLVR regime where batch-level allocation is at risk.

    Prompt ``q`` has exactly ``k_q`` successes of ``G`` (placed at random): 15% of the
    prompts agree (``k = 0`` or ``G``), 40% have a *rare outcome* (1-3 successes, or 1-3
    failures, of ``G``), 45% are mixed (``4 <= k <= G - 4``). The success head sees the
    prompt's rate through an overconfident, noisy lens and the candidate's own outcome
    weakly: ``logit p_hat_qi = overconfidence * logit theta_q + signal * (r_qi - theta_q) +
    prompt_noise * n_q + noise * n_qi`` with ``theta_q = (k_q + 1/2) / (G + 1)``, so a
    prompt with one success of 16 is predicted near all-fail (``p_hat ~ 0.01``: an
    overconfident head, 2.5, that barely sees the rare success, 0.3). Answers are
    long (600-8000 tokens: ``c = 2000 exp(u_q + 0.5 v_qi)``, failures 1.3x longer, clipped),
    realised ``C = c exp(0.3 e - 0.045)``, ``c_hat = c exp(0.3 n)``; prefixes of 256 tokens
    (none finished); scores ``s = sqrt(C / 2000) (e / sqrt(32) + 0.5 (r - rbar) w_q)``.
    """
    import numpy as np

    from pairht.audit import Population

    gen = np.random.default_rng(seed)
    P = int(n_prompts)
    kind = np.array(["agree"] * round(0.15 * P) + ["rare"] * round(0.40 * P))
    kind = np.concatenate([kind, np.array(["mixed"] * (P - kind.size))])[:P]
    k = np.empty(P, dtype=np.int64)
    for q, kd in enumerate(kind):
        if kd == "agree":
            k[q] = gen.choice([0, G])
        elif kd == "rare":
            j = int(gen.integers(1, 4))
            k[q] = j if gen.random() < 0.5 else G - j
        else:
            k[q] = int(gen.integers(4, G - 3))
    r = np.zeros((P, G))
    for q in range(P):
        r[q, gen.permutation(G)[: k[q]]] = 1.0
    theta = ((k + 0.5) / (G + 1))[:, None]
    logit = (overconfidence * np.log(theta / (1 - theta)) + signal * (r - theta)
             + prompt_noise * gen.normal(size=(P, 1)) + noise * gen.normal(size=(P, G)))
    p_hat = 1.0 / (1.0 + np.exp(-logit))
    c = 2000.0 * np.exp(gen.normal(0.0, 0.5, (P, 1)) + 0.5 * gen.normal(size=(P, G)))
    c = np.clip(c * np.where(r > 0, 1.0, 1.3), 600.0, 8000.0)
    C = c * np.exp(0.3 * gen.normal(size=(P, G)) - 0.045)
    c_hat = c * np.exp(0.3 * gen.normal(size=(P, G)))
    d = 32
    w = gen.normal(size=(P, 1, d))
    w /= np.linalg.norm(w, axis=2, keepdims=True)
    e = gen.normal(size=(P, G, d)) / np.sqrt(d)
    contrast = (r - r.mean(axis=1, keepdims=True))[:, :, None]
    s = np.sqrt(C / 2000.0)[:, :, None] * (e + 0.5 * contrast * w)
    return Population(p_hat=p_hat, c_hat=c_hat, rewards=r, costs=C,
                      prefix_len=256 + gen.integers(0, 32, (P, G)), scores=s,
                      m_hat=np.sqrt(c_hat / 2000.0),
                      meta={"source": "tests/audit/conftest.py:rare_outcome_population",
                            "n_prompts": P, "G": G, "seed": seed})
