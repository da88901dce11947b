"""The committed SmolLM2 population (small form) is valid and ``pairht audit`` runs on it.

Runs in CI without the model: it reads only ``benchmarks/data/smollm2_arith_tau*_small.npz``,
written by ``python benchmarks/real_population.py`` (docs/real_model.md).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from pairht.audit.population import load_population

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "data")
SMALL = [os.path.join(DATA, f"smollm2_arith_tau{tau}_small.npz") for tau in (8, 32)]


@pytest.mark.parametrize("path", SMALL, ids=["tau8", "tau32"])
def test_committed_population_is_a_real_model_population_with_finished_flags(path):
    pop = load_population(path)
    meta = pop.meta
    assert meta["source"] == "benchmarks/real_population.py"
    assert meta["config"]["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert pop.group_size == meta["config"]["G"] == 16
    assert pop.finished is not None and pop.m_hat is not None and pop.gram is not None
    # Finished prefixes have no suffix (stored as the format's 1-token floor); unfinished ones
    # stopped at the checkpoint: prefix length = tau exactly (no snapping).
    assert np.all(pop.costs[pop.finished] == 1.0)
    assert np.all(pop.prefix_len[~pop.finished] == meta["tau"])
    assert np.all(pop.prefix_len[pop.finished] <= meta["tau"])
    # Binary last-number rewards, earned sometimes: the audit has contrasts to estimate.
    assert set(np.unique(pop.rewards)) <= {0.0, 1.0}
    assert 0.0 < pop.rewards.mean() < 1.0
    # m_hat is the length proxy of the predictions stored alongside.
    np.testing.assert_allclose(
        pop.m_hat, np.sqrt(pop.prefix_len + np.where(pop.finished, 0.0, pop.c_hat)), rtol=1e-12
    )


@pytest.mark.parametrize("path", SMALL, ids=["tau8", "tau32"])
def test_pairht_audit_runs_on_the_committed_population(path, tmp_path):
    out = tmp_path / "report"
    res = subprocess.run(
        [sys.executable, "-m", "pairht.cli", "audit", "--population", path, "--budget", "0.5",
         "--draws", "0", "--out", str(out), "--no-figures", "--quiet"],
        capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (out / "audit.csv").exists() and (out / "audit.json").exists()
