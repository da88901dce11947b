"""``import verl`` registers pairht through the ``verl.plugins`` entry point, in a fresh
process and in a Ray worker (verl logs a plugin's load error only at debug level, so the
registration itself is checked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from verl_required import require_verl_for_tests

require_verl_for_tests()

pytestmark = pytest.mark.verl

PROBE = ("import verl; from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY; "
         "cls = TRAINER_REGISTRY.get('pair_sync'); "
         "print(cls.__module__ + '.' + cls.__qualname__ if cls else 'absent')")


def _probe(**env: str) -> str:
    run = subprocess.run([sys.executable, "-W", "ignore", "-c", PROBE], capture_output=True,
                         text=True, timeout=300, env={**os.environ, **env})
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.strip().splitlines()[-1]


def test_import_verl_registers_the_trainer_mode_in_a_fresh_process():
    assert _probe() == "pairht.verl.trainer.PairSyncTrainer"


def test_it_is_the_entry_point_that_registers():
    # with verl's plugin discovery off, nothing registers pair_sync: the check above is real
    assert _probe(VERL_USE_EXTERNAL_PLUGINS="none") == "absent"


def test_import_verl_registers_the_trainer_mode_in_a_ray_worker():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONWARNINGS": "ignore"}})
    try:
        @ray.remote(num_cpus=1)
        def registered() -> tuple[int, str]:
            import verl  # noqa: F401
            from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

            cls = TRAINER_REGISTRY.get("pair_sync")
            return os.getpid(), (cls.__module__ if cls else "absent")

        pid, module = ray.get(registered.remote(), timeout=240)
        assert pid != os.getpid()
        assert module == "pairht.verl.trainer"
    finally:
        ray.shutdown()
