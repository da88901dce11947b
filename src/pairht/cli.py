"""The ``pairht`` command: the frozen-population estimator audit, its sweeps, and a demo.

``pairht audit``           audit every design on a population, print the table, write
                           audit.csv, audit.json and PNG figures to ``--out``
``pairht audit sweep``     the audit across budget, pi_min, G or calibration
``pairht demo``            the main demo: PAIR vs GRPO training on a tiny task, on CPU
                           (minutes), delegated to ``pairht_demo.demo.main``
``pairht audit-demo``      a short audit of a synthetic population (under a minute)

Heavy imports (numpy, the audit, matplotlib) happen inside the commands, so ``--help`` is
instant; torch is imported only by ``demo``, through the TRL adapter. Every user
error (bad path, malformed population, bad option value) prints one line ``Error: ...`` on
stderr and exits with status 2.
"""

from __future__ import annotations

import enum
import os
import sys
from typing import Any

import typer

app = typer.Typer(
    name="pairht",
    help="PAIR: pairwise-aware inclusion reweighting for RLVR. Estimator audits and demos.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
audit_app = typer.Typer(
    help="Frozen-population estimator audit (PAIR paper, Table audit-matrix).",
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(audit_app, name="audit")


class Reward(str, enum.Enum):
    binary = "binary"
    partial = "partial"


class Calibration(str, enum.Enum):
    oracle = "oracle"
    noisy = "noisy"
    miscalibrated = "miscalibrated"


class Axis(str, enum.Enum):
    budget = "budget"
    pi_min = "pi_min"
    G = "G"
    calibration = "calibration"


def _fail(exc: BaseException) -> typer.Exit:
    """Print ``Error: <one line>`` on stderr; the caller raises the returned Exit(2)."""
    msg = " ".join(str(exc).split()) or type(exc).__name__
    typer.echo(f"Error: {msg}", err=True)
    return typer.Exit(code=2)


# ---------------------------------------------------------------------- shared options
POPULATION = typer.Option(
    None, "--population", "-p",
    help="Population file (.npz, pairht population format v1; see docs/audit.md). "
         "Default: a synthetic population built from the --prompts/--group-size/... options.")
PROMPTS = typer.Option(64, "--prompts", min=1, help="Synthetic population: number of prompts P.")
GROUP = typer.Option(16, "--group-size", "-G", min=2,
                     help="Synthetic population: candidates per prompt G.")
REWARD = typer.Option(Reward.binary, "--reward",
                      help="Synthetic population: binary or partial-credit rewards.")
CALIB = typer.Option(Calibration.oracle, "--calibration",
                     help="Synthetic population: prefix predictions p_hat, c_hat are the true "
                          "conditional values (oracle), noisy, or overconfident and biased "
                          "(miscalibrated).")
NOISE = typer.Option(0.5, "--noise", min=0.0,
                     help="Synthetic population: prediction noise of noisy/miscalibrated.")
BUDGET = typer.Option(0.5, "--budget", min=0.0, max=1.0,
                      help="Expected suffix budget as a fraction of the full group's predicted "
                           "suffix tokens; every design spends it in expectation.")
PI_MIN = typer.Option(0.08, "--pi-min", min=0.0, max=1.0,
                      help="Probability floor of the adaptive allocations (positivity).")
SEED = typer.Option(0, "--seed", help="Seed of the synthetic population and of every draw.")
ROWS = typer.Option(None, "--rows",
                    help="Comma-separated row keys to audit (default: all; see --list-rows).")
ENUM = typer.Option(4096, "--enum-limit", min=1,
                    help="Exact metrics of ratio estimators (Hajek) enumerate the design "
                         "support when 2**G is at most this; otherwise they are n/a.")
AXIS = typer.Option(..., "--axis", help="What to vary: budget ratio, pi_min, group size G "
                                         "(synthetic only) or calibration (synthetic only).")
ALPHA = typer.Option(1e-4, "--alpha", min=0.0, max=1.0,
                     help="Level of the exact-vs-Monte-Carlo consistency tests (flags).")


def _population(population: str | None, prompts: int, group_size: int, reward: Reward,
                calibration: Calibration, noise: float, seed: int) -> Any:
    from pairht.audit import load_population, synthetic_population

    if population is not None:
        return load_population(population)
    return synthetic_population(prompts, group_size, reward=reward.value,
                                calibration=calibration.value, noise=noise, rng=seed)


def _row_keys(rows: str | None) -> list[str] | None:
    if rows is None:
        return None
    from pairht.audit.rows import select_rows

    keys = [k.strip() for k in rows.split(",") if k.strip()]
    select_rows(keys)  # validates
    return keys


def _print_table(result: Any, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from pairht.audit.report import COMPACT, compact_cells

    table = Table(title=title, title_justify="left")
    table.add_column("Design")
    for head, _, _ in COMPACT:
        table.add_column(head, justify="right")
    table.add_column("Check")
    for r in result.rows:
        check = "" if not r.ok else ("[green]ok[/]" if r.consistent else "[red]FLAG[/]")
        table.add_row(r.label, *compact_cells(r), check)
    console = Console(width=max(Console().width, 180))
    console.print(table)
    for r in result.rows:
        for f in r.flags:
            console.print(f"[red]flag[/] {r.key}: {f}")
        for n in r.notes:
            console.print(f"[yellow]note[/] {r.key}: {n}")


def _run_with_progress(pop: Any, keys: list[str] | None, cfg: Any, draws: int,
                       quiet: bool) -> Any:
    from pairht.audit import run_audit
    from pairht.audit.rows import select_rows

    n_rows = len(select_rows(keys))
    if quiet or draws == 0:
        return run_audit(pop, keys, cfg, n_draws=draws)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("Monte Carlo", total=n_rows * pop.n_prompts)

        def tick(key: str, done: int, total: int) -> None:
            bar.update(task, advance=1, description=f"Monte Carlo [{key}]")

        return run_audit(pop, keys, cfg, n_draws=draws, progress=tick)


# ---------------------------------------------------------------------- pairht audit
@audit_app.callback()
def audit(
    ctx: typer.Context,
    population: str | None = POPULATION,
    prompts: int = PROMPTS,
    group_size: int = GROUP,
    reward: Reward = REWARD,
    calibration: Calibration = CALIB,
    noise: float = NOISE,
    budget: float = BUDGET,
    pi_min: float = PI_MIN,
    draws: int = typer.Option(50_000, "--draws", min=0,
                              help="Monte Carlo design draws per prompt and row (0: exact "
                                   "metrics only)."),
    rows: str | None = ROWS,
    seed: int = SEED,
    out: str = typer.Option("audit-out", "--out", "-o",
                            help="Directory for audit.csv, audit.json and the PNG figures "
                                 "(created if missing)."),
    figures: bool = typer.Option(True, "--figures/--no-figures",
                                 help="Write the PNG figures (needs matplotlib)."),
    cost_budgets: str = typer.Option("0.25,0.5,0.75", "--cost-budgets",
                                     help="Budgets of the MSE-vs-suffix-tokens figure."),
    enum_limit: int = ENUM,
    alpha: float = ALPHA,
    list_rows: bool = typer.Option(False, "--list-rows", help="List the row keys and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Audit every design/estimator row at matched expected suffix cost.

    Prints the table (exact bias and MSE, Monte Carlo MSE with standard error, E[cos],
    vertices, edges, relative suffix tokens, ESS, max weight, design wall-clock, and whether
    exact and Monte Carlo agree) and writes audit.csv, audit.json, audit.md and the figures
    bias_mse.png, mse_tokens.png and mechanism.png to --out.
    """
    if ctx.invoked_subcommand is not None:
        return
    try:
        from pairht.audit import AuditConfig, to_csv, to_json, to_markdown
        from pairht.audit.rows import ROWS as REGISTRY

        if list_rows:
            for key, row in REGISTRY.items():
                typer.echo(f"{key:24s} {row.group:11s} {row.label}")
            return
        keys = _row_keys(rows)
        budgets = _floats("cost-budgets", cost_budgets)
        pop = _population(population, prompts, group_size, reward, calibration, noise, seed)
        cfg = AuditConfig(budget_ratio=budget, pi_min=pi_min, seed=seed, enum_limit=enum_limit,
                          alpha=alpha)
        _writable(out)
        result = _run_with_progress(pop, keys, cfg, draws, quiet)
        _print_table(result, f"PAIR audit: P={pop.n_prompts}, G={pop.group_size}, "
                             f"budget={budget}, {draws} draws")
        to_csv(result, os.path.join(out, "audit.csv"))
        to_json(result, os.path.join(out, "audit.json"))
        with open(os.path.join(out, "audit.md"), "w") as fh:
            fh.write(to_markdown(result) + "\n")
        written = ["audit.csv", "audit.json", "audit.md"]
        if figures:
            from pairht.audit import plots
            from pairht.audit.sweep import budget_curve

            curve = budget_curve(pop, keys, cfg, budgets, n_draws=min(draws, 5000),
                                 main=result)
            written += [os.path.basename(p) for p in (
                plots.bias_mse(result, os.path.join(out, "bias_mse.png")),
                plots.mse_tokens(curve, os.path.join(out, "mse_tokens.png")),
                plots.mechanism(pop, cfg, os.path.join(out, "mechanism.png")),
            )]
        typer.echo(f"wrote {', '.join(written)} to {out}")
    except (ValueError, OSError) as exc:
        raise _fail(exc) from None


def _floats(name: str, text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated numbers; got {text!r}") from None
    if not vals:
        raise ValueError(f"--{name} must list at least one value; got {text!r}")
    return vals


def _writable(out: str) -> None:
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out must be a directory; {out} is a file")
    os.makedirs(out, exist_ok=True)
    if not os.access(out, os.W_OK):
        raise ValueError(f"--out directory is not writable: {out}")


# ---------------------------------------------------------------------- pairht audit sweep
@audit_app.command("sweep")
def sweep(
    axis: Axis = AXIS,
    values: str | None = typer.Option(
        None, "--values",
        help="Comma-separated values of the axis (defaults: budget 0.25,0.375,0.5,0.625,0.75; "
             "pi_min 0.02,0.05,0.08,0.15; G 4,8,16,32; calibration "
             "oracle,noisy,miscalibrated)."),
    population: str | None = POPULATION,
    prompts: int = typer.Option(32, "--prompts", min=1,
                                help="Synthetic population: number of prompts P."),
    group_size: int = GROUP,
    reward: Reward = REWARD,
    calibration: Calibration = CALIB,
    noise: float = NOISE,
    budget: float = BUDGET,
    pi_min: float = PI_MIN,
    draws: int = typer.Option(5_000, "--draws", min=0,
                              help="Monte Carlo draws per prompt, row and sweep point."),
    rows: str | None = typer.Option(
        "uniform_ht,pointwise_ht,direct_edge_ht,adaptive_unweighted,pair,pair_cps",
        "--rows", help="Comma-separated row keys."),
    seed: int = SEED,
    out: str = typer.Option("audit-out", "--out", "-o",
                            help="Directory for sweep_<axis>.csv and sweep_<axis>.png."),
    enum_limit: int = ENUM,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
) -> None:
    """Run the audit across one axis; write one CSV and one figure."""
    try:
        from pairht.audit import AuditConfig, plots
        from pairht.audit.sweep import run_sweep, sweep_to_csv

        keys = _row_keys(rows)
        if population is not None and axis in (Axis.G, Axis.calibration):
            raise ValueError(f"--axis {axis.value} regenerates the synthetic population; it "
                             f"cannot be swept on --population {population}")
        vals: list[Any] | None = None
        if values is not None:
            vals = ([v.strip() for v in values.split(",") if v.strip()]
                    if axis == Axis.calibration else _floats("values", values))
        base = _population(population, prompts, group_size, reward, calibration, noise, seed)
        cfg = AuditConfig(budget_ratio=budget, pi_min=pi_min, seed=seed, enum_limit=enum_limit)
        _writable(out)

        def say(msg: str) -> None:
            if not quiet:
                typer.echo(msg, err=True)

        table = run_sweep(axis.value, base, keys, cfg, vals, n_draws=draws,
                          synthetic=None if population is not None else {
                              "n_prompts": prompts, "reward": reward.value,
                              "calibration": calibration.value, "noise": noise,
                              "rng": seed, "G": group_size},
                          log=say)
        csv_path = os.path.join(out, f"sweep_{axis.value}.csv")
        sweep_to_csv(table, csv_path)
        png = plots.sweep_figure(table, axis.value, os.path.join(out, f"sweep_{axis.value}.png"))
        typer.echo(f"wrote {os.path.basename(csv_path)}, {os.path.basename(png)} to {out}")
    except (ValueError, OSError) as exc:
        raise _fail(exc) from None


# ---------------------------------------------------------------------- pairht audit-demo
@app.command("audit-demo")
def audit_demo(
    prompts: int = typer.Option(16, "--prompts", min=1, help="Synthetic prompts P."),
    group_size: int = typer.Option(8, "--group-size", "-G", min=2, help="Candidates G."),
    draws: int = typer.Option(20_000, "--draws", min=0, help="Monte Carlo draws per prompt."),
    seed: int = SEED,
    out: str | None = typer.Option(None, "--out", "-o",
                                   help="Also write audit.csv/json/md here."),
) -> None:
    """A short audit of a synthetic population (oracle predictions, budget 0.5): the table."""
    try:
        from pairht.audit import AuditConfig, synthetic_population, to_csv, to_json, to_markdown

        pop = synthetic_population(prompts, group_size, rng=seed)
        keys = ["full", "uniform_ht", "pointwise_ht", "direct_edge_ht", "adaptive_unweighted",
                "marginal_only", "pair", "pair_score_norm", "pair_cps", "pair_drr", "pair_clip20",
                "pair_hajek"]
        result = _run_with_progress(pop, keys, AuditConfig(seed=seed), draws, False)
        _print_table(result, f"PAIR demo audit: synthetic P={prompts}, G={group_size}, "
                             f"budget 0.5, {draws} draws")
        if out is not None:
            _writable(out)
            to_csv(result, os.path.join(out, "audit.csv"))
            to_json(result, os.path.join(out, "audit.json"))
            with open(os.path.join(out, "audit.md"), "w") as fh:
                fh.write(to_markdown(result) + "\n")
            typer.echo(f"wrote audit.csv, audit.json, audit.md to {out}")
    except (ValueError, OSError) as exc:
        raise _fail(exc) from None


# ---------------------------------------------------------------------- pairht demo
@app.command(
    "demo",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                      "help_option_names": []},
    add_help_option=False,
)
def demo(ctx: typer.Context) -> None:
    """The main demo: PAIR vs GRPO training on a tiny task on CPU (needs the `trl` extra).

    Prints a table of held-out reward, generated tokens and wall-clock, and saves a plot of
    reward vs generated tokens; `pairht demo --help` lists the options, which pass through.

    Implemented by the TRL adapter as ``pairht_demo.demo.main(argv: list[str])``; imported
    only when this command runs, so no other command ever imports torch.
    """
    import importlib

    try:
        mod = importlib.import_module("pairht_demo.demo")
    except ImportError as exc:
        raise _fail(ValueError(f"demo needs the TRL adapter (pip install "
                               f"'pairht[trl]'); {exc}")) from None
    code = mod.main(list(ctx.args))
    if code:
        raise typer.Exit(code=int(code))


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``pairht`` console script."""
    app(args=argv if argv is not None else sys.argv[1:], prog_name="pairht")


if __name__ == "__main__":  # pragma: no cover
    main()
