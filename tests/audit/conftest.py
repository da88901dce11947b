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
