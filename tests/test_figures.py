"""The documentation's figures are current: each computed figure's data table, as committed
beside its image in docs/img, is what the current code computes, and every image in docs/img
is registered in pairht.figures (computed, or a training figure with its command)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from pairht.figures import FIGURES, compute_table, redraw

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
COMPUTED = [k for k, f in FIGURES.items() if f.table is not None]


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


def test_every_image_in_docs_img_is_a_registered_figure():
    names = {p.stem for p in IMG.glob("*.png")}
    assert names == set(FIGURES), (
        f"unregistered images: {sorted(names - set(FIGURES))}; registered but missing: "
        f"{sorted(set(FIGURES) - names)}")
    for fig in FIGURES.values():
        assert (fig.table is None) == (fig.draw is None)
        assert fig.table is not None or fig.command, f"{fig.name}: no way to redraw it"


def test_redraw_writes_each_computed_figure_and_its_table(tmp_path):
    written = redraw(tmp_path)
    for name in COMPUTED:
        png = tmp_path / "docs" / "img" / f"{name}.png"
        data = png.with_suffix(".json")
        assert str(png) in written and str(data) in written
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert json.loads(data.read_text()) == json.loads(json.dumps(compute_table(name)))


def test_mechanism_table_rows_are_the_three_designs_at_the_prompt_with_most_spread():
    t = compute_table("mechanism")
    assert [r["key"] for r in t["rows"]] == ["uniform_ht", "pointwise_ht", "pair"]
    p = np.asarray(t["p_hat"])
    assert len(t["pi"]) == len(p) == 16 and np.all(np.asarray(t["pi"]) >= 0.08 - 1e-12)
    a = np.asarray(t["a"])
    np.testing.assert_array_equal(a, a.T)  # the edge proxy is symmetric


def test_compute_table_names_the_computed_figures_on_a_bad_name():
    with pytest.raises(ValueError, match=r"name must be a computed figure, one of \['mechanism'\]"):
        compute_table("demo_chain_long_seed0")
