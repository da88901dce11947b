"""The private verl seams the plugin overrides: fail loudly when verl moves them.

``PPOTrainer._compute_advantage`` (trainer mode) and ``AgentLoopWorkerTQ._run_prompt``
(agent-loop worker) are private: verl is pinned exactly (pyproject's ``verl`` extra), and these
checks name what moved when a new verl is tried.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version

import numpy as np
import pytest

from verl_required import require_verl_for_tests

require_verl_for_tests()

pytestmark = pytest.mark.verl

PINNED = "0.9.1"


def _params(func) -> list[str]:
    """The parameters verl wrote (Ray's actor wrapper adds ``_ray_trace_ctx``)."""
    return [p for p in inspect.signature(func).parameters if p != "_ray_trace_ctx"]


def test_verl_is_the_pinned_release():
    assert version("verl") == PINNED, (
        f"pairht.verl is tested with verl {PINNED}; found {version('verl')}: rerun tests/verl "
        f"and update the pins (pyproject extra, constraints-verl.txt, docs/verl.md)")


def test_compute_advantage_seam_is_where_the_trainer_mode_overrides_it():
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from pairht.verl.trainer import READ_FIELDS, PairSyncTrainer

    params = list(inspect.signature(PPOTrainer._compute_advantage).parameters)
    assert params == ["self", "batch", "metrics"], f"_compute_advantage moved: {params}"
    assert list(inspect.signature(PairSyncTrainer._compute_advantage).parameters) == params
    step = inspect.getsource(PPOTrainer._step_once)
    assert "self._compute_advantage(batch, metrics=metrics)" in step, \
        "PPOTrainer._step_once no longer calls _compute_advantage(batch, metrics=...)"
    # the fields the step reads are the ones verl's own step reads (and extra_fields)
    base = inspect.getsource(PPOTrainer._compute_advantage)
    for field in READ_FIELDS:
        assert field == "extra_fields" or f'"{field}"' in base, field


def test_run_prompt_seam_is_where_the_agent_loop_worker_overrides_it():
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    cls = AgentLoopWorkerTQ.__ray_actor_class__
    params = _params(cls._run_prompt)
    assert params == ["self", "prompt", "sampling_params", "trajectory", "trace"], \
        f"AgentLoopWorkerTQ._run_prompt moved: {params}"
    assert inspect.iscoroutinefunction(cls._run_prompt)
    source = inspect.getsource(cls.generate_sequences)
    assert "self._run_prompt(prompt, sampling_params, trajectory=" in source
    post = _params(cls._agent_loop_postprocess)
    assert post == ["self", "output", "validate", "kwargs"], post


def test_the_worker_overrides_run_prompt_and_the_manager_uses_it():
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

    from pairht.verl.agent_loop import PairAgentLoopManager, PairAgentLoopWorker, group_rng

    worker = PairAgentLoopWorker.__ray_actor_class__
    assert issubclass(worker, AgentLoopWorkerTQ.__ray_actor_class__)
    assert "_run_prompt" in vars(worker)
    assert _params(worker._run_prompt) == _params(AgentLoopWorkerTQ.__ray_actor_class__._run_prompt)
    assert issubclass(PairAgentLoopManager, AgentLoopManagerTQ)
    # the manager's workers are set after verl's __init__ and before it starts any (create())
    init = inspect.getsource(AgentLoopManagerTQ.create)
    assert init.index("cls(*args, **kwargs)") < init.index("_init_agent_loop_workers")
    # the design's generator is a function of (seed, uid, step) only
    a, b = group_rng(0, "uid-1", 3).random(4), group_rng(0, "uid-1", 3).random(4)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, group_rng(0, "uid-2", 3).random(4))
