"""Groups spanning processes: every process holds the same design draw (accelerate, 2 CPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent


@pytest.mark.slow
@pytest.mark.distributed
def test_two_processes_share_the_design_of_a_spanning_group(tmp_path):
    steps = 2 if os.environ.get("PAIRHT_E2E_SHORT") == "1" else 4
    # `accelerate launch --cpu --num_processes 2` starts one process unless mpirun is set up
    # (accelerate 1.15's CPU launcher); torchrun is what accelerate's multi-process launcher
    # runs, and accelerate then detects a 2-process gloo (MULTI_CPU) run from its environment.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", "29533", str(HERE / "dist_pair_run.py"), str(tmp_path), str(steps)],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"draws-rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    a, b = ranks
    assert len(a["draws"]) == len(b["draws"]) == steps
    for da, db in zip(a["draws"], b["draws"]):
        assert np.array(da["mask"]).shape == (3, 4)  # 12 global rows = 3 groups of G = 4
        assert da["mask"] == db["mask"] and da["pi"] == db["pi"]
    assert a["rng"] == b["rng"] and a["heads_labels"] == b["heads_labels"]
    # Each process keeps exactly its slice of the shared mask in its loss.
    for step, d in enumerate(a["draws"]):
        flat = np.array(d["mask"]).reshape(-1)
        assert a["local_loss_rows"][step] == [bool(x) for x in flat[:6]]
        assert b["local_loss_rows"][step] == [bool(x) for x in flat[6:]]
