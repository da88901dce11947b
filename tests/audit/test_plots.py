"""The audit's figures stay readable: no legend of mse_tokens holds more than MAX_LEGEND lines,
and every row with data is drawn in exactly one panel."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from pairht.audit import plots
from pairht.audit.rows import ROWS


def test_mse_tokens_facets_every_row_into_small_legends(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    real_savefig = Figure.savefig

    def keep(self, *args, **kwargs):
        saved.append(self)
        return real_savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    # every registered row (34 and more) at three budgets, as budget_curve records them
    curve = [{"key": key, "label": row.label, "status": "ok", "budget": b,
              "tokens": b, "mse": (k + 1) * (1.5 - b)}
             for k, (key, row) in enumerate(ROWS.items()) for b in (0.25, 0.5, 0.75)]
    plots.mse_tokens(curve, tmp_path / "mse_tokens.png")
    (fig,) = saved
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    entries = [t.get_text() for lg in legends for t in lg.get_texts()]
    assert max(len(lg.get_texts()) for lg in legends) <= plots.MAX_LEGEND
    assert sorted(entries) == sorted(row.label for row in ROWS.values())  # each once
    assert (tmp_path / "mse_tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
