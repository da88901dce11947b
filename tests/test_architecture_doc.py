"""docs/architecture.md is true to the tree: every ``pairht...`` path it names exists (a
module or package file, then a name that module defines), and its module table lists every
module of ``src/pairht``. Read from the source with ``ast``: nothing is imported, so the
integrations' extras are not needed."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PAGE = ROOT / "docs" / "architecture.md"
DOTTED = re.compile(r"(?<![\w.])pairht(?:\.[A-Za-z_]\w*)+")
TABLE_ROW = re.compile(r"^\| `(pairht(?:\.\w+)*)` \|", re.MULTILINE)


def _module_file(dotted: str) -> Path | None:
    base = SRC.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def _defined(path: Path) -> frozenset[str]:
    """Names a module binds at its top level (definitions, assignments, imports), and those
    of its lazy ``__getattr__`` table where it has one (any string key of a dict, and the
    strings of a dict's tuple or list values)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Dict):
            names.update(k.value for k in node.keys
                         if isinstance(k, ast.Constant) and isinstance(k.value, str))
            # a lazy table maps a defining module to the names exported from it
            names.update(e.value for v in node.values if isinstance(v, (ast.Tuple, ast.List))
                         for e in v.elts
                         if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return frozenset(names)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:cut]))
        if path is not None:
            # the first name after the module must be one it defines; what follows is an
            # attribute of that object (a method, a field), read no further
            return cut == len(parts) or parts[cut] in _defined(path)
    return False


def _named_paths() -> list[str]:
    return sorted(set(DOTTED.findall(PAGE.read_text(encoding="utf-8"))))


def _tree_modules() -> set[str]:
    out = set()
    for path in (SRC / "pairht").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.add(".".join(parts))
    return out


def test_the_page_names_paths():
    # guards the pattern: the page names every module of its table at least
    assert len(_named_paths()) >= len(_tree_modules())


@pytest.mark.parametrize("dotted", _named_paths())
def test_every_path_the_page_names_exists(dotted):
    assert _resolves(dotted), f"docs/architecture.md names {dotted}, which is not in src/"


def test_the_module_table_lists_every_module_of_the_tree():
    listed = set(TABLE_ROW.findall(PAGE.read_text(encoding="utf-8")))
    missing = sorted(_tree_modules() - listed)
    extra = sorted(listed - _tree_modules())
    assert not missing and not extra, f"not in the table: {missing}; not in the tree: {extra}"


def test_the_page_draws_the_import_arrows():
    text = PAGE.read_text(encoding="utf-8")
    for arrow in ("core  <-  pairht.torch  <-  pairht.rollout  <-  pairht.vllm",
                  "core, pairht.torch, pairht.rollout  <-  pairht.trl"):
        assert arrow in text, arrow
