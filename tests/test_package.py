"""The estimator core is torch-free: ``pip install pairht`` users never pay for torch."""

from __future__ import annotations

import os
import subprocess
import sys

CORE_MODULES = (
    "pairht",
    "pairht.designs",
    "pairht.estimators",
    "pairht.allocation",
    "pairht.calibration",
    "pairht.audit",
    "pairht.testing",
)


def test_the_core_imports_and_runs_without_torch_or_transformers():
    # Import every core module and run one allocation -> design -> estimate round trip, then
    # check that nothing heavy came in (a fresh interpreter: this test process has torch).
    code = (
        "import importlib, sys\n"
        f"for m in {CORE_MODULES!r}: importlib.import_module(m)\n"
        "import numpy as np, pairht\n"
        "res = pairht.allocate([0.2, 0.5, 0.9], [10.0, 20.0, 30.0], budget=30.0)\n"
        "d = pairht.design_for(res.pi, 'bernoulli')\n"
        "a = pairht.pair_advantages([1.0, 0.0, 1.0], np.ones(3, bool), d.joint())\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'trl', 'accelerate') "
        "if m in sys.modules)\n"
        "print(heavy); sys.exit(1 if heavy else 0)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_top_level_names_resolve_to_their_single_implementation():
    import pairht
    from pairht import allocation, estimators, step

    for name in pairht.__all__:
        if name == "__version__":
            continue
        obj = getattr(pairht, name)
        home = allocation if name in {"allocate", "design_for"} else (
            step if name in {"plan_continuations", "StepInputs", "ContinuationPlan"}
            else estimators)
        assert obj is getattr(home, name), name
