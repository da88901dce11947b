"""The ``pairht`` command's entry point: the frozen-population estimator audit, its sweeps, a demo.

``pairht audit``           audit every design on a population, print the table, write
                           audit.csv, audit.json and PNG figures to ``--out``
``pairht audit sweep``     the audit across budget, pi_min, G or calibration
``pairht demo``            the main demo: PAIR vs GRPO training on a tiny task, on CPU
                           (minutes), delegated to ``pairht.demo.demo.main``
``pairht experiment``      the compute-matched comparison over seeds (``pairht.demo.experiment``)
``pairht audit-demo``      a short audit of a synthetic population (under a minute)
``pairht figures``         redraw the documentation's figures from their data tables
                           (:mod:`pairht.figures`)

The commands live in :mod:`pairht._cli_app`, which imports typer; this module imports nothing
optional, so that :func:`main` still runs on the core install (numpy, scipy, numba only) and
can say which extra a command needs instead of failing with a traceback. Its other names
(``app``, ``Predictions``, ...) are those of :mod:`pairht._cli_app`, loaded on first use.

Every user error prints one line on stderr and exits with status 2: ``Error: ...`` for a bad
path, a malformed population or a bad option value, and
``pairht: the 'demo' command needs torch; install it with pip install "pairht[trl]"`` for a
missing optional dependency.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

#: Top-level module of each optional dependency -> the extra of ``pyproject.toml`` that
#: installs it (``pip install "pairht[<extra>]"``). An ``ImportError`` of any other module is
#: a bug, and keeps its traceback.
OPTIONAL_DEPENDENCIES: dict[str, str] = {
    **dict.fromkeys(("typer", "click", "rich", "tqdm", "matplotlib"), "cli"),
    **dict.fromkeys(("torch", "transformers", "trl", "accelerate", "threadpoolctl", "datasets",
                     "tokenizers", "safetensors", "huggingface_hub"), "trl"),
    "math_verify": "verify",
    "gguf": "real",
    "vllm": "vllm",
}


def missing_dependency_message(exc: ImportError, argv: list[str]) -> str | None:
    """The one line for an ``ImportError`` of an optional dependency, else ``None``.

    Parameters
    ----------
    exc : ImportError
        The error; its ``name`` (set by Python's import system, e.g. ``"torch.nn"``) says
        which module is missing.
    argv : list of str
        The command's arguments: the first one that is not an option names the command.

    Returns
    -------
    str or None
        ``pairht: the 'demo' command needs torch; install it with pip install "pairht[trl]"``,
        or ``None`` when ``exc`` is not about a module of :data:`OPTIONAL_DEPENDENCIES`.

    Examples
    --------
    >>> err = ModuleNotFoundError("No module named 'typer'", name="typer")
    >>> print(missing_dependency_message(err, ["audit", "--budget", "0.5"]))
    pairht: the 'audit' command needs typer; install it with pip install "pairht[cli]"
    >>> missing_dependency_message(ImportError("cannot import name 'x'"), ["audit"]) is None
    True
    """
    module = (exc.name or "").split(".")[0]
    extra = OPTIONAL_DEPENDENCIES.get(module)
    if extra is None:
        return None
    command = next((a for a in argv if not a.startswith("-")), None)
    what = "the pairht command" if command is None else f"the {command!r} command"
    return f'pairht: {what} needs {module}; install it with pip install "pairht[{extra}]"'


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``pairht`` console script.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Raises
    ------
    SystemExit
        Status 2 with one line on stderr when the command needs an optional dependency that
        is not installed (:func:`missing_dependency_message`); otherwise the command's own.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # imported here, not at the top: typer is the 'cli' extra, absent on a core install
        app = importlib.import_module("pairht._cli_app").app
        app(args=args, prog_name="pairht")
    except ImportError as exc:
        line = missing_dependency_message(exc, args)
        if line is None:
            raise
        print(line, file=sys.stderr)
        raise SystemExit(2) from None


def run_command(command: str, argv: Sequence[str] | None = None) -> int:
    """Run ``pairht <command> <argv>`` (default ``sys.argv[1:]``) as a function: 0 when it
    succeeds; ``SystemExit`` with its status otherwise (a usage error: 2)."""
    try:
        main([command, *(sys.argv[1:] if argv is None else argv)])
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    return 0


def __getattr__(name: str) -> Any:
    """``pairht.cli.app`` and the other names of :mod:`pairht._cli_app` (imports typer)."""
    if name.startswith("__"):  # dunder probes (copy, pickle, doctest) are not commands
        raise AttributeError(f"module 'pairht.cli' has no attribute {name!r}")
    return getattr(importlib.import_module("pairht._cli_app"), name)


if __name__ == "__main__":  # pragma: no cover
    main()
