"""run_audit reports both phases: a call per row before its exact moments, a call per prompt
of the Monte Carlo replay (what the CLI's progress bars show)."""

from __future__ import annotations

from pairht.audit import AuditConfig, run_audit, synthetic_population


def test_run_audit_reports_every_row_and_every_prompt():
    pop = synthetic_population(3, 5, rng=0)
    rows, ticks = [], []
    run_audit(pop, ["uniform_ht", "pair"], AuditConfig(seed=0), n_draws=20,
              progress=lambda key, done, total: ticks.append((key, done, total)),
              on_row=lambda key, i, n: rows.append((key, i, n)))
    assert rows == [("uniform_ht", 0, 2), ("pair", 1, 2)]
    assert ticks == [(k, q, 3) for k in ("uniform_ht", "pair") for q in (1, 2, 3)]


def test_the_exact_phase_is_reported_without_monte_carlo():
    pop = synthetic_population(2, 4, rng=1)
    rows = []
    run_audit(pop, ["full", "pair"], AuditConfig(seed=0), n_draws=0,
              on_row=lambda key, i, n: rows.append(key))
    assert rows == ["full", "pair"]
