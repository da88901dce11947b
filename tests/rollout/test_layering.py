"""Imports run one way (docs/architecture): core <- rollout <- vllm. The generation contract and
the vLLM backend import neither the TRL adapter nor TRL itself (checked on the source, with ast,
so an import hidden inside a function counts too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "pairht"

#: Top-level packages each adapter package may import (besides the standard library).
ALLOWED = {
    "pairht.rollout": {"pairht", "pairht.torch", "pairht.rollout", "numpy", "torch",
                       "transformers"},
    "pairht.vllm": {"pairht", "pairht.torch", "pairht.rollout", "pairht.vllm", "numpy", "torch",
                    "transformers", "vllm", "accelerate"},
}


INTEGRATIONS = ("torch", "rollout", "vllm", "trl", "verl", "verifiers", "demo")


def _top(module: str) -> str:
    """``pairht.<sub>`` for pairht's integration subpackages (the layers), ``pairht`` for the
    core (numpy/scipy/numba only, importable by every layer), else the top-level name."""
    parts = module.split(".")
    if parts[0] == "pairht":
        return f"pairht.{parts[1]}" if len(parts) > 1 and parts[1] in INTEGRATIONS else "pairht"
    return parts[0]


def _imported_packages(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {_top(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(_top(node.module))
    return out


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below_it(package):
    import sys

    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    files = sorted((PKG / package.split(".")[1]).glob("*.py"))
    assert files
    for path in files:
        extra = _imported_packages(path) - ALLOWED[package] - stdlib
        assert not extra, f"{path.name} imports {sorted(extra)}"
