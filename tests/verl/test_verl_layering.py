"""pairht.verl imports one way (docs/architecture.md): the core, pairht.torch and pairht.rollout
and verl itself; never TRL, vLLM, pairht.trl, pairht.vllm or the demo. Read from the source
(no import), so it runs in every environment."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "src" / "pairht" / "verl"
FORBIDDEN_TOP = ("trl", "vllm")
FORBIDDEN_PAIRHT = ("trl", "vllm", "demo", "verifiers")


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def test_pairht_verl_imports_only_the_core_the_torch_layer_rollout_and_verl():
    files = sorted(PKG.glob("*.py"))
    assert len(files) >= 6
    for path in files:
        bad = {m for m in _imports(path)
               if m.split(".")[0] in FORBIDDEN_TOP
               or (m.startswith("pairht.") and m.split(".")[1] in FORBIDDEN_PAIRHT)}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_adapter_holds_no_formula_of_its_own():
    # the estimate is pairht.step.estimate, the plan pairht.step.plan_step: no estimator or
    # design name is imported into the adapter
    for path in sorted(PKG.glob("*.py")):
        mods = _imports(path)
        assert not {m for m in mods if m.startswith(("pairht.estimators.", "pairht.designs"))}, \
            path.name
