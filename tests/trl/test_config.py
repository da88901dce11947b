"""PairGRPOConfig: paper defaults, mode resolution, and every invalid combination refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pairht.trl import PairGRPOConfig

BASE = dict(output_dir="unused", report_to=[], use_cpu=True, num_generations=4,
            per_device_train_batch_size=4, max_completion_length=512)


def make(**kw):
    return PairGRPOConfig(**{**BASE, **kw})


def test_a_raising_reward_function_stops_training_unless_zero_is_chosen():
    assert make().reward_failure == "raise"
    assert make(reward_failure="zero").reward_failure == "zero"


def test_paper_defaults():
    cfg = make(max_completion_length=1024)  # long enough for the paper's tau and snap window
    assert (cfg.mode, cfg.tau, cfg.snap_window, cfg.budget_ratio, cfg.pi_min) == (
        "exact", 256, 32, 0.5, 0.08)
    # PAIR's default design is fixed size (issue 14: the audit at equal realised cost)
    assert (cfg.design, cfg.design_size, cfg.edge_proxy, cfg.covariance_term, cfg.weighting) == (
        "conditional_poisson", None, "disagreement", True, "exact")
    assert (cfg.head_width, cfg.head_feature_window, cfg.head_replay) == (256, 16, 2048)
    assert cfg.head_temperature_fraction == 0.25
    # exact mode resolves TRL's knobs to the estimator's: one epoch, no standardisation,
    # constant normaliser
    assert (cfg.num_iterations, cfg.scale_rewards, cfg.loss_type) == (1, "none", "dr_grpo")


def test_practical_mode_defaults_to_two_clipped_epochs():
    cfg = make(mode="practical")
    assert (cfg.num_iterations, cfg.scale_rewards, cfg.epsilon) == (2, "group", 0.2)


@pytest.mark.parametrize(
    "kw,fields",
    [
        (dict(num_iterations=2), ["num_iterations"]),
        (dict(scale_rewards="group"), ["scale_rewards"]),
        (dict(loss_type="dapo"), ["loss_type"]),
        (dict(beta=0.04), ["beta"]),
        (dict(weighting="hajek"), ["weighting"]),
        (dict(mask_truncated_completions=True), ["mask_truncated_completions"]),
        (dict(num_iterations=2, scale_rewards="batch"), ["num_iterations", "scale_rewards"]),
        (dict(steps_per_generation=2), ["steps_per_generation"]),
    ],
)
def test_exact_mode_refuses_practical_departures(kw, fields):
    with pytest.raises(ValueError, match="mode='exact'") as info:
        make(**kw)
    for name in fields:
        assert name in str(info.value)
    make(mode="practical", **kw)  # the same settings are fine in practical mode


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(mode="fast"), "mode must be one of"),
        (dict(budget_ratio=0.0), "budget_ratio must lie in"),
        (dict(budget_ratio=1.5), "budget_ratio must lie in"),
        (dict(pi_min=0.0), "pi_min must lie in"),
        (dict(pi_min=1.2), "pi_min must lie in"),
        (dict(pi_min=0.3, budget_ratio=0.2), "budget_ratio must be at least pi_min"),
        (dict(tau=0), "tau must be an int >= 1"),
        (dict(tau=512), "tau \\+ snap_window must be smaller than max_completion_length"),
        (dict(snap_window=-1), "snap_window must be an int >= 0"),
        (dict(design="poisson"), "design must be one of"),
        (dict(edge_proxy="energy"), "edge_proxy='energy' needs"),
        (dict(mode="practical", weighting="clipped"), "weighting='clipped' needs w_max"),
        (dict(mode="practical", weighting="clipped", w_max=-1.0),
         "w_max must be a positive finite number"),
        (dict(w_max=10.0), "w_max is only used by clipping variants"),
        (dict(design="conditional_poisson", anchor_pair=True), "anchor_pair=True"),
        (dict(design="bernoulli", design_size=2), "design_size applies only to fixed-size"),
        (dict(design="conditional_poisson", design_size=5), r"design_size must lie in \[2"),
        (dict(design="conditional_poisson", design_size=1), r"design_size must lie in \[2"),
        (dict(delta=0.5), "delta must be None"),
        (dict(top_p=0.9), "top_p must be 1.0"),
        (dict(top_k=20), "top_k must be 0 or None"),
        (dict(repetition_penalty=1.1), "repetition_penalty must be 1.0"),
        (dict(use_vllm=True, vllm_importance_sampling_correction=False,
              vllm_enable_sleep_mode=True), "vllm_enable_sleep_mode"),
        (dict(use_vllm=True, vllm_importance_sampling_correction=False,
              vllm_tensor_parallel_size=2), "vllm_tensor_parallel_size"),
        (dict(head_temperature_fraction=0.0), "head_temperature_fraction"),
        (dict(head_lr=0.0), "head_lr must be a finite number > 0"),
        (dict(multi_objective_aggregation="normalize_then_sum"), "multi_objective_aggregation"),
        (dict(use_vllm=True, vllm_importance_sampling_correction=True), "use_vllm=True"),
    ],
)
def test_invalid_combinations_fail_at_construction(kw, match):
    with pytest.raises(ValueError, match=match):
        make(**kw)


def test_valid_variants_construct():
    make(mode="practical", weighting="clipped", w_max=20.0)
    make(mode="practical", weighting="hajek")
    make(design="conditional_poisson", design_size=2)
    make(design="dependent_rounding")
    make(anchor_pair=True, lagged_heads=True, covariance_term=False, budget_ratio=1.0)
    # size "auto" at any budget: groups that afford no size of two are drawn Bernoulli
    make(design="conditional_poisson", budget_ratio=0.1, pi_min=0.05)


def test_default_design_is_fixed_size_and_bernoulli_with_an_anchor_pair():
    assert make().design == "conditional_poisson"
    assert make(anchor_pair=True).design == "bernoulli"
    assert make(allocator="uniform").design is None  # the allocator's own
    assert make(design="bernoulli").design == "bernoulli"


def test_import_is_lazy():
    # `import pairht.trl` (and its light submodules) must not pull in torch, transformers or trl.
    code = (
        "import sys, pairht.trl; "
        "heavy = [m for m in ('torch', 'transformers', 'trl') if m in sys.modules]; "
        "assert not heavy, heavy; "
        "assert sorted(dir(pairht.trl)) == sorted(pairht.trl.__all__)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    import pairht.trl  # in this process trl is loaded already: the lazy names resolve

    assert pairht.trl.PairGRPOTrainer.__module__ == "pairht.trl.trainer"
    assert pairht.trl.AuditCallback.__module__ == "pairht.trl.audit_mode"


# ---------------------------------------------------------------- issue 11, item 6
# Values that used to be accepted and then failed later or meant something else.
@pytest.mark.parametrize(
    "kw,exc,match",
    [
        (dict(design="conditional_poisson", design_size=3.5), TypeError,
         r"design_size must be an int or None; got design_size=3\.5"),
        (dict(anchor_pair="no"), TypeError,
         "anchor_pair must be True or False; got anchor_pair='no'"),
        (dict(covariance_term="no"), TypeError, "covariance_term must be True or False"),
        (dict(lagged_heads=1), TypeError, "lagged_heads must be True or False; got lagged_heads=1"),
        (dict(design_seed="abc"), TypeError,
         "design_seed must be an int or None; got design_seed='abc'"),
        (dict(design_seed=-1), ValueError, "design_seed must be an int >= 0"),
        (dict(head_steps_per_update=2.5), TypeError, "head_steps_per_update must be an int"),
        (dict(head_batch_size=64.0), TypeError,
         "head_batch_size must be an int; got head_batch_size=64.0"),
        (dict(head_width="256"), TypeError, "head_width must be an int"),
        (dict(mode="practical", weighting="clipped", w_max=float("inf")), ValueError,
         "w_max must be a positive finite number; got inf"),
        (dict(head_lr=float("inf")), ValueError,
         "head_lr must be a finite number > 0; got head_lr=inf"),
        (dict(head_lr=float("nan")), ValueError, "head_lr must be a finite number > 0"),
        (dict(budget_ratio="0.5"), TypeError,
         "budget_ratio must be a real number; got budget_ratio='0.5'"),
        (dict(pi_min=float("nan")), ValueError, r"pi_min must lie in \(0, 1\]; got pi_min=nan"),
        (dict(tau=256, max_completion_length=280), ValueError,
         "tau \\+ snap_window must be smaller than max_completion_length .*got tau=256, "
         "snap_window=32, max_completion_length=280"),
        (dict(design=3), ValueError, r"design must be one of .* pairht\.designs\.DESIGNS"),
        (dict(mode="practical", weighting="marginal_only"), ValueError, "weighting must be one of"),
        # TRL's own bool fields too: "no" would switch vLLM on
        (dict(use_vllm="no"), TypeError, "use_vllm must be True or False"),
        (dict(mask_truncated_completions="False"), TypeError, "mask_truncated_completions must be"),
        # a misspelt policy must not fall back to either behaviour
        (dict(reward_failure="ignore"), ValueError,
         r"reward_failure must be one of \('raise', 'zero'\) \(from "
         r"pairht.trl\.config\.REWARD_FAILURES\); got reward_failure='ignore'"),
        (dict(reward_failure=None), ValueError, "reward_failure must be one of"),
    ],
)
def test_every_field_is_checked_at_construction_with_its_name(kw, exc, match):
    with pytest.raises(exc, match=match):
        make(**kw)


def test_bool_fields_of_pair_and_trl_are_all_checked():
    import dataclasses
    import typing

    from pairht.trl.config import _bool_fields

    hints = typing.get_type_hints(PairGRPOConfig)
    annotated = {f.name for f in dataclasses.fields(PairGRPOConfig) if hints[f.name] is bool}
    assert {"anchor_pair", "covariance_term", "lagged_heads", "use_vllm"} <= annotated
    assert set(_bool_fields(PairGRPOConfig)) == annotated
    for name in sorted(annotated):
        with pytest.raises(TypeError, match=f"{name} must be True or False"):
            make(**{name: "yes"})


def test_integral_and_real_values_are_normalised():
    import numpy as np

    cfg = make(design="conditional_poisson", design_size=np.int64(2), budget_ratio=np.float32(0.5),
               head_batch_size=np.int32(64), design_seed=np.uint8(3))
    assert type(cfg.design_size) is int and type(cfg.head_batch_size) is int
    assert type(cfg.design_seed) is int and type(cfg.budget_ratio) is float


@pytest.mark.parametrize("g,ratio,largest", [(8, 0.5, 4), (8, 0.6, 4), (5, 0.7, 3), (6, 1.0, 6),
                                             (10, 0.3, 3)])
def test_explicit_design_size_must_be_affordable_at_equal_costs(g, ratio, largest):
    """n <= floor(budget_ratio * G): exactly the sizes the allocator affords at equal costs."""
    import numpy as np

    from pairht.allocation import allocate

    base = dict(num_generations=g, per_device_train_batch_size=g, design="conditional_poisson",
                budget_ratio=ratio, pi_min=0.05)
    make(**base, design_size=largest)
    if largest < g:
        with pytest.raises(ValueError, match=rf"design_size={largest + 1} is not affordable .*"
                                             rf"floor\(num_generations \* budget_ratio\) = .* = "
                                             rf"{largest}\."):
            make(**base, design_size=largest + 1)
    # the rule is the allocator's: at equal costs (an untrained cost head) the budget
    # ratio * sum(c) affords `largest` and not one more
    c = np.full(g, 7.0)
    allocate(np.linspace(0.1, 0.9, g), c, ratio * c.sum(), pi_min=0.05, size=largest)
    if largest < g:
        with pytest.raises(ValueError, match="infeasible"):
            allocate(np.linspace(0.1, 0.9, g), c, ratio * c.sum(), pi_min=0.05, size=largest + 1)


def test_issue_example_six_of_eight_at_half_budget_is_refused():
    with pytest.raises(ValueError, match="design_size=6 is not affordable"):
        make(num_generations=8, per_device_train_batch_size=8, design="conditional_poisson",
             design_size=6)


def test_names_come_from_the_core_registries():
    from pairht.designs import DESIGNS
    from pairht.estimators import VARIANTS
    from pairht.trl import config

    assert set(config.design_kinds()) == set(DESIGNS)
    assert set(config.fixed_size_designs()) == {k for k, c in DESIGNS.items() if c.fixed_size}
    from pairht.step.pair_program import PROXIES

    assert config.edge_proxies() == tuple(PROXIES)
    assert set(config.weightings()) == {k for k, v in VARIANTS.items() if not v.needs_pi}
    assert config.DESIGN_KINDS == config.design_kinds()  # the import-time view is current
    for kind in DESIGNS:
        if not DESIGNS[kind].fixed_size:
            make(design=kind)
        else:
            make(design=kind, design_size=2)
    make(mode="practical", weighting="unweighted")


# ---------------------------------------------------------------- issue 11, item 9
@pytest.mark.parametrize(
    "length,tau,snap",
    [(64, 16, 8), (128, 32, 16), (256, 64, 32), (512, 128, 32), (1024, 256, 32), (4096, 256, 32),
     (8, 2, 1), (4, 1, 0)],
)
def test_default_tau_and_snap_window_scale_with_the_completion_length(length, tau, snap):
    cfg = make(max_completion_length=length)
    assert (cfg.tau, cfg.snap_window) == (tau, snap)
    assert cfg.tau + cfg.snap_window < length


def test_trl_default_lengths_need_no_pair_argument():
    # the old default tau=256 was refused at every max_completion_length <= 256
    for length in (128, 256):
        make(max_completion_length=length)
    trl_default = PairGRPOConfig(output_dir="unused", report_to=[], use_cpu=True,
                                 num_generations=4, per_device_train_batch_size=4)
    assert trl_default.tau + trl_default.snap_window < trl_default.max_completion_length


def test_changed_trl_defaults_are_announced_at_warning(caplog, monkeypatch):
    import logging

    from pairht.trl import defaults

    monkeypatch.setattr(defaults, "_ANNOUNCED", set())  # once per process: start afresh
    with caplog.at_level(logging.WARNING, logger="pairht.trl"):
        make()
    lines = [r.getMessage() for r in caplog.records if r.name == "pairht.trl"]
    assert len(lines) == 1 and caplog.records[0].levelno == logging.WARNING
    assert "loss_type='dapo' -> 'dr_grpo'" in lines[0]
    assert "scale_rewards='group' -> 'none'" in lines[0]
    assert "num_iterations" not in lines[0]  # exact mode keeps TRL's 1

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pairht.trl"):
        make(mode="practical")
    (line,) = [r.getMessage() for r in caplog.records if r.name == "pairht.trl"]
    assert "num_iterations=1 -> 2" in line and "loss_type='dapo' -> 'dr_grpo'" in line
    assert "scale_rewards" not in line  # practical mode keeps TRL's 'group'

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pairht.trl"):
        make(loss_type="dr_grpo", scale_rewards="none")  # chosen explicitly: nothing to report
    assert not [r for r in caplog.records if r.name == "pairht.trl"]


def test_exact_mode_error_shows_the_value_the_user_passed():
    with pytest.raises(ValueError, match=r"Got scale_rewards=True\.") as info:
        make(scale_rewards=True)
    assert "'group'" not in str(info.value).split("Got")[1]
