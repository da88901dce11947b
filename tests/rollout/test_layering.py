"""Imports run one way (docs/architecture): core <- rollout <- vllm. The generation contract and
the vLLM backend import neither the TRL adapter nor TRL itself (checked on the source, with ast,
so an import hidden inside a function counts too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ADAPTERS = Path(__file__).resolve().parents[2] / "adapters"

#: Top-level packages each adapter package may import (besides the standard library).
ALLOWED = {
    "pairht_rollout": {"pairht", "pairht_rollout", "numpy", "torch", "transformers"},
    "pairht_vllm": {"pairht", "pairht_rollout", "pairht_vllm", "numpy", "torch", "transformers",
                    "vllm", "accelerate"},
}


def _imported_packages(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below_it(package):
    import sys

    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    files = sorted((ADAPTERS / package).glob("*.py"))
    assert files
    for path in files:
        extra = _imported_packages(path) - ALLOWED[package] - stdlib
        assert not extra, f"{path.name} imports {sorted(extra)}"
