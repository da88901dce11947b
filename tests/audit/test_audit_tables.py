"""benchmarks/audit_tables.py ``--rows``: a row's cells do not depend on which other rows are
audited, so printing a few rows reproduces the whole table's cells for them exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pairht.audit import save_population, synthetic_population

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import audit_tables as at
import demo_population as dp

ASKED = ["default", "srswor", "pair", "default@hindsight", "pair@prompt_mean"]


@pytest.fixture(scope="module")
def pop():
    return synthetic_population(8, 6, prefix_tokens=8, rng=3)


def test_rows_reproduce_the_whole_tables_cells_exactly(pop):
    whole = at.audit_cells(pop, 0.5, seed=0, references=("all", "prefix"), n_boot=200)
    part = at.audit_cells(pop, 0.5, seed=0, references=("all", "prefix"), n_boot=200,
                          rows=ASKED)
    for ref in ("all", "prefix"):
        cells, best, best_mse = part[ref]
        full_cells, full_best, full_mse = whole[ref]
        # table order, only the rows asked
        assert list(cells) == [k for k in full_cells if k in ASKED]
        assert len(cells) == len(ASKED)
        assert {k: cells[k] for k in cells} == {k: full_cells[k] for k in cells}
        assert (best, best_mse) == (full_best, full_mse)


def test_parse_rows_splits_plain_and_prediction_rows_in_table_order():
    plain, modes = at.parse_rows(["pair@prompt_mean", "default@hindsight", "pair", "default"])
    assert plain == ("default", "pair")
    assert modes == {"hindsight": ("default",), "prompt_mean": ("pair",)}
    assert at.parse_rows(None) == (at.ROW_KEYS, dict(at.PREDICTION_ROWS))


@pytest.mark.parametrize("bad", ["pair@oracle", "uniform_ht@hindsight", "no_such_row"])
def test_a_name_outside_the_table_is_refused_with_the_known_rows(bad):
    with pytest.raises(ValueError, match=r"rows must be rows of the table; got \['"
                       + bad + r"'\], known: \[.*'default@hindsight'"):
        at.parse_rows(["default", bad])


def test_the_demo_script_audits_a_kept_population_for_the_rows_asked(pop, tmp_path, capsys):
    path = tmp_path / "pop.npz"
    save_population(path, pop)
    assert dp.main(["--population", str(path), "--rows", "default", "default@hindsight",
                    "--budgets", "0.5", "--n-boot", "200"]) == 0
    out = capsys.readouterr().out
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| `")]
    assert rows == ["`default`", "`default@hindsight`"]
    cells = at.audit_cell(pop, 0.5, seed=0, reference="all", n_boot=200,
                          rows=["default", "default@hindsight"])[0]
    r, lo, hi = cells["default"]
    assert f"| `default` | {r:.3f} [{lo:.3f}, {hi:.3f}] |" in out
