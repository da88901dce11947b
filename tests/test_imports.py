"""Imports run one way (docs/architecture.md): the core needs no adapter, the verifiers need no
torch/transformers/TRL, the generation layers need no TRL adapter, the TRL adapter has no
circle. Static checks read the source with ``ast`` (an import inside a function counts);
runtime checks import in a fresh interpreter with the forbidden modules blocked."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ADAPTER_PACKAGES = {"pairht_rollout", "pairht_vllm", "pairht_trl", "pairht_verifiers",
                    "pairht_demo"}
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


def test_core_imports_no_adapter():
    for path in _files(ROOT / "src" / "pairht"):
        bad = {m for m in _imports(path) if m.split(".")[0] in ADAPTER_PACKAGES}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("package", ["pairht_rollout", "pairht_vllm"])
def test_generation_layers_import_nothing_from_the_trl_adapter(package):
    for path in _files(ROOT / "adapters" / package):
        bad = {m for m in _imports(path) if m.split(".")[0] in ("pairht_trl", "trl")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_trl_audit_mode_does_not_import_the_trainer():
    # trainer imports audit_mode (AuditCallback); the reverse edge would close a circle.
    bad = {m for m in _imports(ROOT / "adapters" / "pairht_trl" / "audit_mode.py")
           if m == "pairht_trl.trainer"}
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
        import pairht_verifiers
        for mod in pkgutil.iter_modules(pairht_verifiers.__path__):
            importlib.import_module(f"pairht_verifiers.{mod.name}")
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
    for path in _files(ROOT / "adapters" / "pairht_verifiers"):
        bad = {m for m in _imports(path) if m.split(".")[0] in ("pairht_trl", "pairht_rollout")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_comparators_never_import_the_step():
    # The step's registry reads pairht.comparators.COMPARATORS on first lookup; the reverse
    # edge (even inside a function) would make the two a circle.
    for path in _files(ROOT / "src" / "pairht" / "comparators"):
        bad = {m for m in _imports(path) if m == "pairht.step" or m.startswith("pairht.step.")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def _module_names() -> dict[str, Path]:
    names = {}
    for base in (ROOT / "src", ROOT / "adapters"):
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
    # run-time circle (the shared warm-start cache lives in pairht_demo.warm_cache instead).
    tree = ast.parse((ROOT / "adapters" / "pairht_demo" / "demo.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "pairht_demo":
            assert "experiment" not in {a.name for a in node.names}
        if isinstance(node, ast.ImportFrom):
            assert node.module != "pairht_demo.experiment"
        if isinstance(node, ast.Import):
            assert "pairht_demo.experiment" not in {a.name for a in node.names}
