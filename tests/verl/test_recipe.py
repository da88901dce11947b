"""The recipe's PAIR lines (examples/verl/run_pair_grpo.sh) compose with verl's own default
config (Hydra, ``ppo_trainer``) and select pairht's trainer mode, manager and options; the
example YAML says the same. No GPU: what runs on one is in docs/verl.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verl_required import require_verl_for_tests

require_verl_for_tests()

from omegaconf import OmegaConf  # noqa: E402

from pairht.verl.config import PairVerlConfig  # noqa: E402

pytestmark = pytest.mark.verl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "verl"


def _pair_lines() -> list[str]:
    text = (EXAMPLES / "run_pair_grpo.sh").read_text()
    tail = text.split("# --- PAIR: the lines below ---", 1)[1]
    return re.findall(r"^\s+([+\w][^\s]*=[^\s]+) \\$", tail, re.M)


def test_the_recipe_adds_pair_in_under_ten_lines():
    lines = _pair_lines()
    assert 5 <= len(lines) < 10, lines


def test_the_pair_lines_compose_with_verls_default_config():
    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
    from verl.utils.import_utils import load_class_from_fqn

    from pairht.verl.agent_loop import PairAgentLoopManager
    from pairht.verl.trainer import PairSyncTrainer, check_algorithm

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=_pair_lines())
    assert get_trainer_cls(cfg.trainer.v1.trainer_mode) is PairSyncTrainer
    fqn = cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class
    assert load_class_from_fqn(fqn, "AgentLoopManager") is PairAgentLoopManager
    check_algorithm(cfg)
    assert PairVerlConfig.from_root(cfg) == PairVerlConfig(rule="pair", budget_ratio=0.5, tau=128)


def test_the_example_yaml_says_the_same():
    cfg = OmegaConf.load(EXAMPLES / "pair_grpo.yaml")
    assert cfg.trainer.v1.trainer_mode == "pair_sync"
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class == \
        "pairht.verl.agent_loop.PairAgentLoopManager"
    assert PairVerlConfig.from_root(cfg).tau == 128
