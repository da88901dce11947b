"""The documentation's figures, redrawn by one command (``make figures``,
``python -m pairht.figures``).

Each figure in ``docs/img`` is registered here with what draws it. A *computed* figure is drawn
from a data table this module computes from the current code on cheap inputs, and the table is
written beside the image (``docs/img/NAME.json``), so a test (``tests/test_figures.py``) can
recompute it and compare: a figure whose numbers the code no longer gives fails CI. A *training*
figure is a plot of training runs (minutes to an hour of CPU); this command prints the command
that redraws it rather than running it.

Needs the ``cli`` extra (matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FIGURES", "Figure", "compute_table", "main", "redraw"]

#: Where the documentation's images live, relative to the repository root.
IMG_DIR = Path("docs") / "img"


@dataclass(frozen=True)
class Figure:
    """One documentation figure.

    Attributes
    ----------
    name : str
        File stem in ``docs/img`` (``NAME.png``; computed figures also ``NAME.json``).
    what : str
        One line on what it shows.
    table : callable or None
        ``() -> dict``: the figure's data table, from the current code (computed figures).
    draw : callable or None
        ``(table, path) -> str``: draws the table to ``path`` (computed figures).
    command : str
        For a training figure: the command that redraws it (not run here).
    """

    name: str
    what: str
    table: Callable[[], dict[str, Any]] | None = None
    draw: Callable[[dict[str, Any], str], str] | None = None
    command: str = ""


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


def _training(name: str, what: str, arms: str) -> Figure:
    """A figure of ``pairht experiment``: its command, and the copy into docs/img."""
    return Figure(name, what, command=f"pairht experiment {arms} --out-dir experiment-out && "
                                      f"cp experiment-out/accuracy_vs_tokens.png "
                                      f"docs/img/{name}.png")


FIGURES: dict[str, Figure] = {f.name: f for f in (
    Figure("mechanism", "the contrast graph of one prompt and the exact MSE of uniform, "
           "pointwise and PAIR at equal cost (pairht audit's default population)",
           table=_mechanism_table, draw=_mechanism_draw),
    Figure("demo_chain_long_seed0", "make demo, seed 0: held-out reward against tokens, "
           "wall-clock and steps", command="pairht demo --seed 0 && cp "
           "demo-out/reward_vs_tokens.png docs/img/demo_chain_long_seed0.png"),
    _training("experiment_default_accuracy_vs_tokens", "PAIR's default in training",
              "--task chain_long --arms grpo,grpo_small,default,pair_dr_narrow "
              "--seeds 1,2,3,4,5"),
    _training("experiment_chain_long_accuracy_vs_tokens", "the compute-matched experiment",
              "--arms grpo,grpo_small,pair,uniform,pointwise,adaptive_unweighted,"
              "pair_skill_shrink --seeds 0,1,2"),
    _training("experiment_strata_accuracy_vs_tokens", "pair_strata in training",
              "--arms grpo,grpo_small,pair,pair_strata --seeds 0,1,2"),
    _training("experiment_dr_accuracy_vs_tokens", "pair_dr in training",
              "--arms grpo,grpo_small,pair,pair_dr --seeds 0,1,2"),
    _training("experiment_narrow_accuracy_vs_tokens", "pair_dr_narrow in training",
              "--arms grpo,grpo_small,pair,pair_dr,pair_dr_narrow --seeds 0,1,2"),
    _training("experiment_accuracy_vs_tokens", "the short chains in training",
              "--task chain --arms grpo,grpo_small,pair,uniform --seeds 0,1,2 --steps 40"),
)}


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


def redraw(root: str | os.PathLike[str] = ".", names: list[str] | None = None) -> list[str]:
    """Recompute and redraw the computed figures (``names``: all of them) under
    ``root/docs/img``; returns the paths written (each figure's PNG and JSON table)."""
    out = Path(root) / IMG_DIR
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or [k for k, f in FIGURES.items() if f.table is not None]:
        table = compute_table(name)
        fig = FIGURES[name]
        assert fig.draw is not None  # every computed figure registers both
        data = out / f"{name}.json"
        data.write_text(json.dumps(table, indent=1, allow_nan=True) + "\n")
        written += [fig.draw(table, os.fspath(out / f"{name}.png")), os.fspath(data)]
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m pairht.figures [--root DIR]``: redraw the computed figures, list the
    commands of the training ones."""
    parser = argparse.ArgumentParser(prog="python -m pairht.figures", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=".", help="repository root (default: .)")
    args = parser.parse_args(argv)
    for path in redraw(args.root):
        print(f"wrote {path}")
    print("Training figures (not rerun here; each command redraws its figure):")
    for fig in FIGURES.values():
        if fig.table is None:
            print(f"  {fig.name}.png ({fig.what}):\n    {fig.command}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
