"""The documentation's figures are current and complete.

* Every image in docs/img is registered in pairht.figures with a data table and a drawing
  function (tests/test_docs.py checks that a page shows it).
* A computed figure's table, as committed beside its image, is what the current code computes.
* A training figure's table (a ``pairht experiment`` runs.json under docs/data) holds the
  summary the experiment code computes from its runs, docs/experiment.md quotes that summary
  and the command, and the same command's short form, committed beside it, is what the current
  code trains (tests/test_figures_training.py).
* ``pairht figures`` redraws every figure from the tables.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from typer.testing import CliRunner

from pairht.cli import app
from pairht.figures import DATA_DIR, FIGURES, compute_table, load_table, redraw

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
COMPUTED = [k for k, f in FIGURES.items() if f.table is not None]
TRAINING = [k for k, f in FIGURES.items() if f.table is None]
PNG = b"\x89PNG\r\n\x1a\n"


def _numbers(x, path="") -> list[tuple[str, object]]:
    """Leaves of a JSON table with their paths, in order."""
    if isinstance(x, dict):
        return [leaf for k in x for leaf in _numbers(x[k], f"{path}.{k}")]
    if isinstance(x, list):
        return [leaf for i, v in enumerate(x) for leaf in _numbers(v, f"{path}[{i}]")]
    return [(path, x)]


@pytest.mark.parametrize("name", COMPUTED)
def test_committed_figure_table_is_what_the_code_computes(name):
    # The numbers are exact MSEs and allocations in float64 from sums of a few hundred terms:
    # another BLAS or CPU may move the last bits (about 1e-14 relative), never 1e-10.
    committed = json.loads((IMG / f"{name}.json").read_text())
    fresh = json.loads(json.dumps(compute_table(name)))  # the same JSON round trip as written
    want, got = _numbers(committed), _numbers(fresh)
    assert [p for p, _ in got] == [p for p, _ in want], "the table's shape changed"
    for (path, w), (_, g) in zip(want, got):
        if isinstance(w, float) and isinstance(g, float):
            assert (math.isnan(w) and math.isnan(g)) or g == pytest.approx(w, rel=1e-10,
                                                                           abs=1e-300), path
        else:
            assert g == w, path


def test_every_image_in_docs_img_is_registered_with_a_table_and_a_drawing():
    names = {p.stem for p in IMG.glob("*.png")}
    assert names == set(FIGURES), (
        f"unregistered images: {sorted(names - set(FIGURES))}; registered but missing: "
        f"{sorted(set(FIGURES) - names)}")
    for fig in FIGURES.values():
        assert callable(fig.draw), fig.name
        assert (ROOT / fig.data_path).is_file(), f"{fig.name}: no data table {fig.data_path}"


def test_every_data_table_belongs_to_a_figure():
    # a training figure's table NAME.json and the short form of its command, NAME_short.json
    owned = {Path(f.data).name for f in FIGURES.values() if f.data}
    owned |= {n.replace(".json", "_short.json") for n in owned}
    have = {p.name for p in (ROOT / DATA_DIR).glob("*")}
    assert have == owned, f"unowned: {sorted(have - owned)}; missing: {sorted(owned - have)}"


def test_redraw_writes_every_figure_and_each_computed_table(tmp_path):
    written = redraw(tmp_path, data_root=ROOT)
    for name in FIGURES:
        png = tmp_path / "docs" / "img" / f"{name}.png"
        assert str(png) in written and png.read_bytes()[:8] == PNG
    for name in COMPUTED:
        data = tmp_path / "docs" / "img" / f"{name}.json"
        assert json.loads(data.read_text()) == json.loads(json.dumps(compute_table(name)))
    # a training figure's committed table is read, never rewritten
    assert not (tmp_path / DATA_DIR).exists()


def test_pairht_figures_redraws_from_the_tables_under_its_root(tmp_path):
    shutil.copytree(ROOT / DATA_DIR, tmp_path / DATA_DIR)
    runner = CliRunner()
    res = runner.invoke(app, ["figures", "--root", str(tmp_path), "--name", TRAINING[0]],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    png = tmp_path / "docs" / "img" / f"{TRAINING[0]}.png"
    assert res.output.strip() == f"wrote {png}" and png.read_bytes()[:8] == PNG
    listed = runner.invoke(app, ["figures", "--list"], catch_exceptions=False).output
    assert [ln.split()[0] for ln in listed.splitlines()] == [f"{n}.png" for n in FIGURES]
    bad = runner.invoke(app, ["figures", "--name", "nope"])
    assert bad.exit_code == 2
    assert "name must be a registered figure, one of" in bad.output and "'nope'" in bad.output
    helped = runner.invoke(app, ["figures", "--help"]).output
    assert "--root" in helped and "--name" in helped and "--list" in helped


def test_training_figure_draws_every_arm_with_its_own_style(tmp_path, monkeypatch):
    # every line visible: each arm gets a colour and a marker no other arm has (and a dash)
    import matplotlib.pyplot as plt

    seen = []
    monkeypatch.setattr(plt, "close", lambda fig: seen.append(fig))
    for name in TRAINING:
        FIGURES[name].draw(load_table(name, ROOT), str(tmp_path / f"{name}.png"))
        lines = [ln for ln in seen[-1].axes[0].get_lines() if not ln.get_label().startswith("_")]
        arms = load_table(name, ROOT)["settings"]["arms"]
        assert [ln.get_label() for ln in lines] == arms
        styles = [(ln.get_color(), ln.get_marker()) for ln in lines]
        for k in range(2):
            assert len({s[k] for s in styles}) == len(styles), (name, k, styles)


def test_mechanism_table_rows_are_the_three_designs_at_the_prompt_with_most_spread():
    t = compute_table("mechanism")
    assert [r["key"] for r in t["rows"]] == ["uniform_ht", "pointwise_ht", "pair"]
    p = np.asarray(t["p_hat"])
    assert len(t["pi"]) == len(p) == 16 and np.all(np.asarray(t["pi"]) >= 0.08 - 1e-12)
    a = np.asarray(t["a"])
    np.testing.assert_array_equal(a, a.T)  # the edge proxy is symmetric


def test_compute_table_names_the_computed_figures_on_a_bad_name():
    with pytest.raises(ValueError, match=r"name must be a computed figure, one of \['mechanism'\]"):
        compute_table(TRAINING[0])
