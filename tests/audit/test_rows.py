"""The row registry: one small registered object per row, keys validated."""

from __future__ import annotations

import pytest

from pairht.audit import (
    BASELINE_ROWS,
    PAPER_ROWS,
    ROWS,
    VertexRow,
    register_row,
    run_audit,
    synthetic_population,
)
from pairht.audit.rows import select_rows


def test_the_paper_rows_are_registered_in_table_order():
    assert PAPER_ROWS[:3] == ("full", "direct_edge_ht", "direct_edge_ht_edges")
    for key in ("direct_edge_ht", "adaptive_unweighted", "marginal_only", "pair"):
        assert key in PAPER_ROWS
    assert BASELINE_ROWS == ("uniform_ht", "srswor", "pointwise_ht", "grpo_small")
    for key in ("pair_cps", "pair_drr", "pair_clip10", "pair_clip20", "pair_clip50",
                "pair_hajek"):
        assert key in ROWS


def test_a_new_row_is_one_registered_class():
    @register_row
    class Clip5(VertexRow):
        key, label, group = "test_clip5", "PAIR, clipped w_max=5", "practical"
        weighting, w_max = "clipped", 5.0

    try:
        res = run_audit(synthetic_population(2, 5, rng=0), ["test_clip5"], n_draws=100)
        assert res.row("test_clip5").ok
        with pytest.raises(ValueError, match="already registered"):
            register_row(Clip5)
    finally:
        del ROWS["test_clip5"]


def test_unknown_rows_are_named():
    with pytest.raises(ValueError, match=r"unknown audit rows \['nope'\]"):
        select_rows(["pair", "nope"])


def test_a_row_whose_module_is_missing_is_reported_not_fatal():
    @register_row
    class Missing(VertexRow):
        key, label = "test_missing", "needs a design that does not exist"
        design = "no_such_design"

    try:
        res = run_audit(synthetic_population(2, 5, rng=0), ["test_missing", "pair"],
                        n_draws=0)
        assert res.row("test_missing").status.startswith("failed: kind must be one of")
        assert res.row("pair").ok
    finally:
        del ROWS["test_missing"]


def test_rows_are_data_of_a_few_families():
    import dataclasses

    families = {type(r).__name__ for r in ROWS.values()}
    assert families == {"VertexRow", "EdgeRow", "SmallGroupGRPO", "ChoiceRow", "TwoStageRow",
                        "ComparatorRow", "DPPORow"}
    row = ROWS["pair_cps"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.weighting = "hajek"  # type: ignore[misc]
    assert (row.allocation, row.design, row.estimator, row.weighting, row.size) == (
        "pair", "mixed_size:conditional_poisson", "conditional_ht", "exact", "auto")
    widths = {k: r.width for k, r in ROWS.items() if r.width != "all"}
    assert widths == {"grpo_small": "none", "pair_width": "auto", "default": "auto",
                      "pair_dr_narrow": "subset"}


def test_register_row_refuses_a_bad_group_and_a_non_row():
    with pytest.raises(ValueError, match="group must be one of"):
        register_row(VertexRow(key="test_bad_group", label="x", group="nope"))
    with pytest.raises(TypeError, match="takes an AuditRow"):
        register_row(object())  # type: ignore[arg-type]
    assert "test_bad_group" not in ROWS
