"""Frozen-population estimator audit (PAIR paper, section "Frozen-policy estimator audit").

Replays sampling designs against a fixed, fully generated candidate population and measures
how well each design/estimator pair recovers the complete-pair gradient at matched expected
suffix cost: bias, trace MSE, cosine, completed vertices, observed edges, suffix tokens, ESS,
maximum weight and the design's own wall-clock, both exactly (from inclusion probabilities)
and by Monte Carlo (which must agree).

numpy/scipy/numba only; figures (:mod:`pairht.audit.plots`) import matplotlib lazily.

Examples
--------
>>> from pairht.audit import run_audit, synthetic_population
>>> pop = synthetic_population(4, 6, rng=0)
>>> res = run_audit(pop, rows=["uniform_ht", "pair"], n_draws=500)
>>> [r.key for r in res.rows]
['uniform_ht', 'pair']
"""

# Registers the comparator rows (vip, hora, duet, dppo, pair_joint, ...) with ROWS; imported
# here, after rows, so that rows never imports the comparators (imports run one way).
from pairht.audit import comparator_rows as _comparator_rows  # noqa: F401
from pairht.audit.advice import WidthAdvice, narrow_rule, width_advice
from pairht.audit.auto import AutoWidth, WidthDecision, decision_for
from pairht.audit.base import AuditConfig
from pairht.audit.population import (
    FORMAT_VERSION,
    Population,
    load_population,
    save_population,
    synthetic_population,
)
from pairht.audit.predictions import PREDICTIONS, with_predictions
from pairht.audit.report import to_csv, to_json, to_markdown
from pairht.audit.rows import (
    BASELINE_ROWS,
    PAPER_ROWS,
    ROWS,
    AuditRow,
    EdgeRow,
    VertexRow,
    register_row,
)
from pairht.audit.runner import DEFAULT_DRAWS, AuditResult, RowResult, run_audit
from pairht.audit.summary import Comparison, compare_to_baselines

__all__ = [
    "BASELINE_ROWS",
    "DEFAULT_DRAWS",
    "FORMAT_VERSION",
    "PAPER_ROWS",
    "PREDICTIONS",
    "ROWS",
    "AuditConfig",
    "AuditResult",
    "AuditRow",
    "AutoWidth",
    "Comparison",
    "EdgeRow",
    "Population",
    "RowResult",
    "VertexRow",
    "WidthAdvice",
    "WidthDecision",
    "compare_to_baselines",
    "decision_for",
    "load_population",
    "narrow_rule",
    "register_row",
    "run_audit",
    "save_population",
    "synthetic_population",
    "to_csv",
    "to_json",
    "to_markdown",
    "width_advice",
    "with_predictions",
]
