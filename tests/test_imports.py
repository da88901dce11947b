"""Imports run one way (docs/architecture.md): the core needs no integration, the torch layer
needs no TRL, the verifiers need no torch/transformers/TRL, the generation layers need no TRL
adapter, nothing has a circle. Static checks read the source with ``ast`` (an import inside a
function counts); runtime checks import in a fresh interpreter with the forbidden modules
blocked."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "pairht"
# The integrations: subpackages of pairht behind their extras. Everything else under
# src/pairht is the core, except the command line (cli, _cli_app, __main__), which is the
# application over all of it and loads an integration only inside the command that needs it.
INTEGRATIONS = ("torch", "rollout", "vllm", "trl", "verl", "verifiers", "demo")
CLI_MODULES = ("cli.py", "_cli_app.py", "__main__.py")
HEAVY = ("torch", "transformers", "trl", "accelerate")


def _imports(path: Path) -> set[str]:
    """Dotted modules a file imports (absolute imports; relative ones resolved to nothing)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def _files(folder: Path) -> list[Path]:
    files = sorted(folder.rglob("*.py"))
    assert files, folder
    return files


def _integration(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "pairht" and parts[1] in INTEGRATIONS:
        return parts[1]
    return None


def _core_files() -> list[Path]:
    out = []
    for path in _files(PKG):
        rel = path.relative_to(PKG).parts
        if rel[0] in INTEGRATIONS or (len(rel) == 1 and rel[0] in CLI_MODULES):
            continue
        out.append(path)
    return out


def test_core_imports_no_integration():
    files = _core_files()
    assert len(files) > 40 and any(p.name == "plan.py" for p in files)  # the core was read
    for path in files:
        bad = {m for m in _imports(path) if _integration(m)}
        bad |= {m for m in _imports(path) if m.split(".")[0] in HEAVY}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_torch_layer_imports_no_trl():
    for path in _files(PKG / "torch"):
        bad = {m for m in _imports(path)
               if m.split(".")[0] in ("trl", "verl") or _integration(m) not in (None, "torch")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_torch_layer_loads_with_trl_blocked():
    done = _run_blocked("""
        import importlib, pkgutil
        import pairht.torch
        for mod in pkgutil.iter_modules(pairht.torch.__path__):
            importlib.import_module(f"pairht.torch.{mod.name}")
        print("ok")
    """, ("trl", "verl", "vllm"))
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("package", ["pairht.rollout", "pairht.vllm"])
def test_generation_layers_import_nothing_from_the_trl_adapter(package):
    for path in _files(PKG / package.split(".")[1]):
        bad = {m for m in _imports(path)
               if m.split(".")[0] == "trl" or _integration(m) in ("trl", "verl")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_trl_audit_mode_does_not_import_the_trainer():
    # trainer imports audit_mode (AuditCallback); the reverse edge would close a circle.
    bad = {m for m in _imports(PKG / "trl" / "audit_mode.py")
           if m == "pairht.trl.trainer"}
    assert not bad


_BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = {blocked!r}
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked import of {{name}}")
            return None
    sys.meta_path.insert(0, Block())
""")


def _run_blocked(code: str, blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    script = _BLOCKER.format(blocked=set(blocked)) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_verifiers_import_without_torch_transformers_or_trl():
    done = _run_blocked("""
        import importlib, pkgutil
        import pairht.verifiers
        for mod in pkgutil.iter_modules(pairht.verifiers.__path__):
            importlib.import_module(f"pairht.verifiers.{mod.name}")
        print("ok")
    """, HEAVY)
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout + done.stderr


def test_the_blocker_does_block():
    # The finder above must make a heavy import fail, or the test before proves nothing.
    done = _run_blocked("import torch", ("torch",))
    assert done.returncode != 0 and "blocked import of torch" in done.stderr


def test_the_step_plans_without_torch():
    done = _run_blocked("""
        import numpy as np
        from pairht.step import StepInputs, plan_continuations
        inputs = StepInputs.from_ratio([[0.2, 0.7, 0.5]], [[10.0, 20.0, 0.0]],
                                       [[False, False, True]], budget_ratio=0.5)
        plan = plan_continuations(inputs, rng=0)
        print("ok", plan.pi.shape)
    """, HEAVY)
    assert done.returncode == 0 and "ok (1, 3)" in done.stdout, done.stdout + done.stderr


def test_verifiers_import_nothing_from_the_trl_adapter():
    for path in _files(PKG / "verifiers"):
        bad = {m for m in _imports(path) if _integration(m) not in (None, "verifiers")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_comparators_never_import_the_step():
    # The step's registry reads pairht.comparators.COMPARATORS on first lookup; the reverse
    # edge (even inside a function) would make the two a circle.
    for path in _files(ROOT / "src" / "pairht" / "comparators"):
        bad = {m for m in _imports(path) if m == "pairht.step" or m.startswith("pairht.step.")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def _module_names() -> dict[str, Path]:
    names = {}
    for base in (ROOT / "src",):
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names[".".join(parts)] = path
    return names


def _import_time_edges(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Modules of this tree that ``path`` imports when it is imported (module level, outside
    ``if TYPE_CHECKING:``), ``from a import b`` counting ``a.b`` when that is a module. Edges
    to the module's own enclosing packages are left out (Python imports them first anyway)."""
    out: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module)
                out.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return {m for m in out if m in modules and m != name and m not in parents}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan): the import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            connect(v)
    return circles


def test_no_import_time_circles_in_the_core_or_the_adapters():
    modules = _module_names()
    graph = {name: _import_time_edges(path, name, modules) for name, path in modules.items()}
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # the graph was read
    assert "pairht.estimators" in graph["pairht.step.plan"]
    assert not _circles(graph), f"import circles: {_circles(graph)}"
    # ... and the check would see one: the step imports the estimators, add the reverse edge.
    graph["pairht.estimators"] = graph["pairht.estimators"] | {"pairht.step.plan"}
    assert ["pairht.estimators", "pairht.step.plan"] in _circles(graph)


def test_the_demo_never_imports_the_experiment():
    # experiment imports demo at load time; the reverse edge, even inside a function, closes a
    # run-time circle (the shared warm-start cache lives in pairht.demo.warm_cache instead).
    tree = ast.parse((PKG / "demo" / "demo.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "pairht.demo":
            assert "experiment" not in {a.name for a in node.names}
        if isinstance(node, ast.ImportFrom):
            assert node.module != "pairht.demo.experiment"
        if isinstance(node, ast.Import):
            assert "pairht.demo.experiment" not in {a.name for a in node.names}


TRAINER = PKG / "trl" / "trainer.py"


def test_the_trl_trainer_is_under_500_lines():
    n = len(TRAINER.read_text().splitlines())
    assert n < 500, f"src/pairht/trl/trainer.py has {n} lines; move what is not a TRL seam out"


def _algorithm_names() -> set[str]:
    """Names whose comparison would be PAIR's algorithm in the adapter: widths, estimators,
    allocation rules (their registries), and the config's "auto" width."""
    from pairht.step import ALLOCATORS, ESTIMATORS, WIDTHS

    return {*WIDTHS, "auto", *ESTIMATORS, *ALLOCATORS}


def test_the_trl_trainer_holds_no_estimator_or_width_logic():
    # The step owns the width, the allocator and the estimator: the adapter never compares
    # one of their names to a string literal (==, !=, in, match/case).
    names = _algorithm_names()
    assert {"prefixes", "subset", "whole", "ht", "difference", "dppo", "pair"} <= names
    tree = ast.parse(TRAINER.read_text())
    found = []
    for node in ast.walk(tree):
        operands = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        for op in operands:
            for const in ast.walk(op):
                if isinstance(const, ast.Constant) and const.value in names:
                    found.append((node.lineno, const.value))
    assert not found, f"src/pairht/trl/trainer.py compares algorithm names: {found}"


def test_the_trl_trainer_makes_the_steps_two_calls_and_imports_nothing_private():
    tree = ast.parse(TRAINER.read_text())
    step_names = {alias.name for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.module == "pairht.step"
                  for alias in node.names}
    assert {"plan_step", "estimate"} <= step_names
    private = [
        f"{node.module}.{alias.name}" for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        and node.module.split(".")[0] == "pairht"
        for alias in node.names
        if alias.name.startswith("_") or any(p.startswith("_") for p in node.module.split("."))
    ]
    assert not private, f"src/pairht/trl/trainer.py imports private names {private}"
