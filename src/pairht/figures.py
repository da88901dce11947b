"""The documentation's figures, redrawn by one command (``pairht figures``, ``make figures``,
``python -m pairht.figures``).

Every image in ``docs/img`` is registered here with its data table and the function that draws
it from that table, so redrawing needs no training:

* a *computed* figure's table is computed here from the current code on cheap inputs and written
  beside the image (``docs/img/NAME.json``); ``tests/test_figures.py`` recomputes it;
* a *training* figure's table is the ``runs.json`` a training command wrote (every curve, every
  per-prompt final accuracy, the summary), committed under ``docs/data``; the command that
  wrote it is derived from its settings (:func:`experiment_command`). ``tests/test_figures.py``
  reruns the same command's short form (``PAIRHT_E2E_SHORT=1``) and compares it with the short
  table committed beside the long one, and checks that docs/experiment.md quotes the table's
  summary.

Needs the ``cli`` extra (matplotlib).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FIGURES", "Figure", "compute_table", "experiment_command", "load_table", "main",
           "redraw"]

#: Where the documentation's images live, relative to the repository root.
IMG_DIR = Path("docs") / "img"
#: Where the training figures' data tables live, relative to the repository root.
DATA_DIR = Path("docs") / "data"


@dataclass(frozen=True)
class Figure:
    """One documentation figure.

    Attributes
    ----------
    name : str
        File stem in ``docs/img`` (``NAME.png``).
    what : str
        One line on what it shows.
    draw : callable
        ``(table, path) -> str``: draws the data table to ``path``, returns the path.
    table : callable or None
        Computed figures: ``() -> dict``, the data table from the current code (written to
        ``docs/img/NAME.json``). ``None`` for a training figure.
    data : str
        Training figures: the committed data table, relative to the repository root.
    """

    name: str
    what: str
    draw: Callable[[dict[str, Any], str], str]
    table: Callable[[], dict[str, Any]] | None = None
    data: str = ""

    @property
    def data_path(self) -> Path:
        """The data table's path relative to the repository root."""
        return Path(self.data) if self.data else IMG_DIR / f"{self.name}.json"


def _mechanism_inputs() -> tuple[Any, Any]:
    """``pairht audit``'s default population and settings (synthetic, P = 64, G = 16, binary
    rewards, oracle predictions, tau = 256, budget 0.5, pi_min 0.08, seed 0)."""
    from pairht.audit import AuditConfig, synthetic_population

    pop = synthetic_population(64, 16, reward="binary", calibration="oracle", noise=0.5,
                               prefix_tokens=256, rng=0)
    return pop, AuditConfig(budget_ratio=0.5, pi_min=0.08, seed=0)


def _mechanism_table() -> dict[str, Any]:
    from pairht.audit.plots import mechanism_table

    return mechanism_table(*_mechanism_inputs())


def _mechanism_draw(table: dict[str, Any], path: str) -> str:
    from pairht.audit.plots import mechanism

    pop, cfg = _mechanism_inputs()
    return mechanism(pop, cfg, path, table=table)


def experiment_command(settings: dict[str, Any]) -> str:
    r"""The ``pairht experiment`` command line that wrote a ``runs.json`` with ``settings``.

    Steps, warm-up, prompts per step and the evaluation period are always written out (a short
    form differs from the long one only in them); budget ratio and epochs only where they are
    not the command's defaults.

    Examples
    --------
    >>> settings = {"task": "chain_long", "arms": ["grpo", "pair"], "seeds": [0, 1],
    ...             "steps": 40, "warmup_steps": 1500, "prompts_per_step": 16,
    ...             "eval_every": 8, "budget_ratio": 0.5, "epochs": 1}
    >>> print(experiment_command(settings).replace(" --", "\n  --"))
    pairht experiment
      --task chain_long
      --arms grpo,pair
      --seeds 0,1
      --steps 40
      --warmup-steps 1500
      --prompts-per-step 16
      --eval-every 8
    """
    s = settings
    words = ["pairht", "experiment", "--task", str(s["task"]), "--arms", ",".join(s["arms"]),
             "--seeds", ",".join(str(x) for x in s["seeds"]), "--steps", str(s["steps"]),
             "--warmup-steps", str(s["warmup_steps"]), "--prompts-per-step",
             str(s["prompts_per_step"]), "--eval-every", str(s["eval_every"])]
    if s.get("budget_ratio", 0.5) != 0.5:
        words += ["--budget-ratio", str(s["budget_ratio"])]
    if s.get("epochs", 1) != 1:
        words += ["--epochs", str(s["epochs"])]
    return " ".join(words)


def load_table(name: str, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The committed data table of figure ``name`` (JSON) under the repository ``root``."""
    fig = _figure(name)
    return json.loads((Path(root) / fig.data_path).read_text())


def _mean_curves(table: dict[str, Any], xkey: str) -> dict[str, tuple[Any, Any, Any, Any]]:
    """Per arm: a grid up to where every seed's curve reaches, and the mean, min and max over
    seeds of the held-out accuracy on it (each curve linearly interpolated between its
    evaluations). ``xkey``: ``"tokens"`` or ``"wall"``."""
    out = {}
    for arm in table["settings"]["arms"]:
        curves = []
        for run in (r for r in table["runs"] if r["arm"] == arm):
            res = run["result"]
            ys = np.array([c[2] for c in res["curve"]], dtype=np.float64)
            xs = np.array([c[1] for c in res["curve"]] if xkey == "tokens" else res["wall"],
                          dtype=np.float64)
            curves.append((xs, ys))
        grid = np.linspace(0.0, min(float(x[-1]) for x, _ in curves), 60)
        ys = np.stack([np.interp(grid, x, y) for x, y in curves])
        out[arm] = (grid, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0))
    return out


#: Line styles of the training figures, one per arm (a colour, a dash and a marker each, so
#: arms whose curves overlap, as most do at equal tokens, stay distinguishable).
_DASHES = ("-", "--", "-.", ":")
_MARKERS = "osD^v<>ph*"


_XLABELS = {"tokens": "generated tokens (prefixes, suffixes and audits)",
             "wall": "training seconds (evaluation excluded)"}


def draw_training(table: dict[str, Any], path: str, xkey: str = "tokens") -> str:
    """Held-out accuracy against generated tokens (``xkey="tokens"``) or training seconds
    (``"wall"``) from a ``pairht experiment`` table (its ``runs.json``): each arm's mean over
    seeds (a colour, dash and marker of its own) and the seeds' range as a band; legend beside
    the axes in one or two columns. ``pairht experiment`` draws its report's figures with it
    too, so a committed table redraws to the figure its run wrote."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = table["settings"]
    curves = _mean_curves(table, xkey)
    fig, ax = plt.subplots(figsize=(8.5, 4.6), dpi=120)
    for i, (arm, (grid, mean, lo, hi)) in enumerate(curves.items()):
        color = f"C{i % 10}"
        ax.plot(grid, mean, color=color, lw=1.8, label=arm, linestyle=_DASHES[i % len(_DASHES)],
                marker=_MARKERS[i % len(_MARKERS)], markevery=(i % 6, 6), markersize=5,
                zorder=3 + i)
        if len(s["seeds"]) > 1:
            ax.fill_between(grid, lo, hi, color=color, alpha=0.10, lw=0)
    ax.set_title(f"{s['task']}: mean over seeds {s['seeds']} (bands: the seeds' range); "
                 f"{s['steps']} steps x {s['prompts_per_step']} prompts, "
                 f"G = {s['num_generations']}", fontsize=9)
    ax.set_xlabel(_XLABELS[xkey])
    ax.set_ylabel("held-out accuracy (sampled, T=1)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False,
              ncol=1 if len(curves) <= 6 else 2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


FIGURES: dict[str, Figure] = {f.name: f for f in (
    Figure("mechanism", "the contrast graph of one prompt and the exact MSE of uniform, "
           "pointwise and PAIR at equal cost (pairht audit's default population)",
           draw=_mechanism_draw, table=_mechanism_table),
    Figure("experiment_chain_long_accuracy_vs_tokens",
           "the compute-matched experiment on the long chains: held-out accuracy against "
           "generated tokens, each arm's mean over seeds",
           draw=draw_training, data=str(DATA_DIR / "experiment_chain_long.json")),
)}


def _figure(name: str) -> Figure:
    if name not in FIGURES:
        raise ValueError(f"name must be a registered figure, one of {sorted(FIGURES)}; got "
                         f"{name!r}")
    return FIGURES[name]


def compute_table(name: str) -> dict[str, Any]:
    """The data table of the computed figure ``name``, from the current code.

    Raises
    ------
    ValueError
        If ``name`` is not a registered computed figure.
    """
    fig = FIGURES.get(name)
    if fig is None or fig.table is None:
        computed = sorted(k for k, f in FIGURES.items() if f.table is not None)
        raise ValueError(f"name must be a computed figure, one of {computed}; got {name!r}")
    return fig.table()


def redraw(root: str | os.PathLike[str] = ".", names: list[str] | None = None,
           data_root: str | os.PathLike[str] | None = None) -> list[str]:
    """Redraw the figures ``names`` (default: all) under ``root/docs/img``; returns the paths
    written.

    A computed figure's table is recomputed and written beside its image; a training figure is
    drawn from its committed table under ``data_root`` (default ``root``), which is not
    rewritten.
    """
    names = list(FIGURES) if names is None else names
    for name in names:
        _figure(name)
    out = Path(root) / IMG_DIR
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        fig = FIGURES[name]
        png = os.fspath(out / f"{name}.png")
        if fig.table is not None:
            table = compute_table(name)
            data = out / f"{name}.json"
            data.write_text(json.dumps(table, indent=1, allow_nan=True) + "\n")
            written += [fig.draw(table, png), os.fspath(data)]
        else:
            written.append(fig.draw(load_table(name, root if data_root is None else data_root),
                                    png))
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m pairht.figures [OPTIONS]``: the ``pairht figures`` command (typer, in
    :mod:`pairht._cli_app`) with these arguments; 0 on success, ``SystemExit`` otherwise."""
    from pairht.cli import run_command

    return run_command("figures", argv)


if __name__ == "__main__":
    raise SystemExit(main())
