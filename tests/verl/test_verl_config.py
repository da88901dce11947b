"""Config errors of the verl plugin: one line naming the key, the value and the rule."""

from __future__ import annotations

import pytest

from verl_required import require_verl_for_tests

require_verl_for_tests()

from omegaconf import OmegaConf  # noqa: E402

from pairht.verl.config import PairVerlConfig  # noqa: E402
from pairht.verl.trainer import check_algorithm  # noqa: E402

pytestmark = pytest.mark.verl


def _one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


def test_unknown_rule_names_the_key_and_the_known_rules():
    cfg = OmegaConf.create({"pair": {"rule": "pairr"}})
    with pytest.raises(ValueError) as e:
        PairVerlConfig.from_root(cfg)
    text = _one_line(e)
    assert text.startswith("pair.rule must be one of [") and "'pair_dr'" in text
    assert text.endswith("got 'pairr'")


@pytest.mark.parametrize("ratio", [0.0, -0.1, 1.5])
def test_budget_out_of_range_names_the_key(ratio):
    with pytest.raises(ValueError) as e:
        PairVerlConfig.from_root(OmegaConf.create({"pair": {"budget_ratio": ratio}}))
    assert _one_line(e) == ("pair.budget_ratio must be in (0, 1] (a fraction of the full suffix "
                            f"cost); got {ratio!r}")


def test_a_misspelt_key_is_refused_not_defaulted():
    with pytest.raises(ValueError) as e:
        PairVerlConfig.from_root(OmegaConf.create({"pair": {"budget": 0.5}}))
    assert _one_line(e).startswith("pair.budget is not an option of the pair section; known:")


@pytest.mark.parametrize(("key", "value", "start"), [
    ("tau", 0, "pair.tau must be an integer >= 1"),
    ("pi_min", 0.0, "pair.pi_min must be in (0, 1]"),
    ("weighting", "exakt", "pair.weighting must be one of ["),
])
def test_other_options_are_checked(key, value, start):
    with pytest.raises(ValueError) as e:
        PairVerlConfig.from_root(OmegaConf.create({"pair": {key: value}}))
    assert _one_line(e).startswith(start)


def test_no_pair_section_gives_the_defaults():
    assert PairVerlConfig.from_root(OmegaConf.create({"trainer": {}})) == PairVerlConfig()


@pytest.mark.parametrize(("algorithm", "key"), [
    ({"use_kl_in_reward": True}, "algorithm.use_kl_in_reward"),
    ({"use_kl_in_reward": False, "rollout_correction": {"rollout_is": "token"}},
     "algorithm.rollout_correction.rollout_is"),
    ({"use_kl_in_reward": False, "rollout_correction": {"rollout_rs": "seq"}},
     "algorithm.rollout_correction.rollout_rs"),
])
def test_options_that_change_the_estimate_are_refused(algorithm, key):
    with pytest.raises(ValueError) as e:
        check_algorithm(OmegaConf.create({"algorithm": algorithm}))
    assert _one_line(e).startswith(f"{key} must be")
    check_algorithm(OmegaConf.create({"algorithm": {"use_kl_in_reward": False}}))


def test_verls_default_algorithm_section_is_accepted():
    from pathlib import Path

    import verl

    # verl's own default rollout_correction group (rollout_is and rollout_rs null)
    group = Path(verl.__file__).parent / "trainer/config/algorithm/rollout_correction.yaml"
    default = OmegaConf.load(group)
    assert default.rollout_is is None and default.rollout_rs is None
    check_algorithm(OmegaConf.create({"algorithm": {"use_kl_in_reward": False,
                                                    "rollout_correction": default}}))
