"""Groups spanning processes: every process holds the same design draw (accelerate, 2 CPUs).

Every run of this file goes through one launch of two processes (``dist_pair_run.py --jobs``):
starting them, not training the tiny model, is what takes the time (about 25 s a launch on two
cores, against about a second a run), and each run builds its own model and trainer, seeded
from its config, as it would in a launch of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

STEPS = 2 if os.environ.get("PAIRHT_E2E_SHORT") == "1" else 4
#: name -> (steps, mode, float64[, "subset"])
RUNS = {
    "masked": (STEPS, "mask", False),
    "dropped": (STEPS, "drop", False),
    # one step: TRL's row shuffle draws from the torch generator, so a second step's sampling
    # would differ between the float64 runs with and without dropping
    "mask-float64": (1, "mask", True),
    "drop-float64": (1, "drop", True),
    # width "subset", 2 rows per process: some steps leave a process no prefixed row
    "subset": (6, "drop", False, "subset"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Every run of :data:`RUNS` in one 2-process launch; its output folder by name."""
    root = tmp_path_factory.mktemp("distributed")
    jobs = []
    for name, (steps, mode, float64, *rest) in RUNS.items():
        (root / name).mkdir()
        jobs.append(f"{root / name},{steps},{mode}" + (",float64" if float64 else "")
                    + "".join(f",{r}" for r in rest))
    # `accelerate launch --cpu --num_processes 2` starts one process unless mpirun is set up
    # (accelerate 1.15's CPU launcher); torchrun is what accelerate's multi-process launcher
    # runs, and accelerate then detects a 2-process gloo (MULTI_CPU) run from its environment.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", "29533", str(HERE / "dist_pair_run.py"), "--jobs", *jobs],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {name: root / name for name in RUNS}


@pytest.mark.parametrize("drop", [False, True], ids=["masked", "dropped"])
def test_two_processes_share_the_design_of_a_spanning_group(runs, drop):
    out = runs["dropped" if drop else "masked"]
    ranks = [json.loads((out / f"draws-rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    a, b = ranks
    assert len(a["draws"]) == len(b["draws"]) == STEPS
    for da, db in zip(a["draws"], b["draws"]):
        assert np.array(da["mask"]).shape == (3, 4)  # 12 global rows = 3 groups of G = 4
        assert da["mask"] == db["mask"] and da["pi"] == db["pi"]
    assert a["rng"] == b["rng"] and a["heads_labels"] == b["heads_labels"]
    # Each process keeps exactly its slice of the shared mask in its loss: masked, all 6 rows
    # with the unselected ones zeroed; dropped, its selected rows, padded with masked rows to
    # the larger process's count (TRL gathers per-row loss metrics: equal row counts).
    for step, d in enumerate(a["draws"]):
        flat = np.array(d["mask"]).reshape(-1)
        n_rows = max(1, int(flat[:6].sum()), int(flat[6:].sum()))
        for rank, local in ((a, flat[:6]), (b, flat[6:])):
            if drop:
                assert rank["update_rows"][step] == n_rows
                assert sum(rank["local_loss_rows"][step]) == int(local.sum())
            else:
                assert rank["update_rows"][step] == 6
                assert rank["local_loss_rows"][step] == [bool(x) for x in local]


def test_two_processes_take_the_same_step_with_and_without_dropping(runs):
    """drop_unselected_rows across processes (unequal kept rows, padding to equal counts, the
    per-process loss factor, DDP's gradient average): one float64 SGD step is the masked
    run's to 1e-10 relative."""
    deltas = {}
    for mode in ("mask", "drop"):
        out = runs[f"{mode}-float64"]
        deltas[mode] = np.load(out / "delta-rank0.npy")
        # DDP keeps the replicas equal
        np.testing.assert_array_equal(np.load(out / "delta-rank1.npy"), deltas[mode])
        draws = json.loads((out / "draws-rank0.json").read_text())
        assert len(draws["draws"]) == 1
        if mode == "drop":  # the fixture exercises unequal kept counts
            masks = [np.array(d["mask"]).reshape(2, -1).sum(-1) for d in draws["draws"]]
            assert any(m[0] != m[1] for m in masks), masks
    scale = np.abs(deltas["mask"]).max()
    assert scale > 1e-6
    np.testing.assert_allclose(deltas["drop"], deltas["mask"], rtol=1e-10, atol=1e-10 * scale)


def test_two_processes_share_the_subsets_of_width_subset(runs):
    """width="subset" across processes: both hold the same subsets, designs and masks; a
    group's completed rows lie in its subset; a process holding no prefixed row (the subset
    is the other process's half) still takes its step (its throwaway prefix is never
    continued)."""
    a, b = (json.loads((runs["subset"] / f"draws-rank{r}.json").read_text()) for r in (0, 1))
    assert len(a["draws"]) == len(b["draws"]) == 6
    emptied = 0
    for da, db in zip(a["draws"], b["draws"]):
        assert da == db
        S, mask = np.array(da["subset"]), np.array(da["mask"])
        assert S.shape == (1, 2) and mask.shape == (1, 4)  # 4 global rows = 1 group of 4
        assert not mask[0, np.setdiff1d(np.arange(4), S[0])].any()
        emptied += S[0].tolist() in ([0, 1], [2, 3])  # rank 0 holds rows 0-1, rank 1 2-3
    assert emptied >= 1, "the fixture must leave a process without a prefixed row"
    assert a["rng"] == b["rng"] and a["heads_labels"] == b["heads_labels"] > 0
