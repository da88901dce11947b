"""PairGRPOConfig: paper defaults, mode resolution, and every invalid combination refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pairht_trl import PairGRPOConfig

BASE = dict(output_dir="unused", report_to=[], use_cpu=True, num_generations=4,
            per_device_train_batch_size=4, max_completion_length=512)


def make(**kw):
    return PairGRPOConfig(**{**BASE, **kw})


def test_paper_defaults():
    cfg = make()
    assert (cfg.mode, cfg.tau, cfg.snap_window, cfg.budget_ratio, cfg.pi_min) == (
        "exact", 256, 32, 0.5, 0.08)
    assert (cfg.design, cfg.edge_proxy, cfg.covariance_term, cfg.weighting) == (
        "bernoulli", "disagreement", True, "exact")
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
        (dict(tau=512), "tau must be smaller than max_completion_length"),
        (dict(snap_window=-1), "snap_window must be an int >= 0"),
        (dict(design="poisson"), "design must be one of"),
        (dict(edge_proxy="energy"), "edge_proxy='energy' needs"),
        (dict(mode="practical", weighting="clipped"), "weighting='clipped' needs w_max"),
        (dict(mode="practical", weighting="clipped", w_max=-1.0), "needs w_max > 0"),
        (dict(w_max=10.0), "w_max is used only with weighting='clipped'"),
        (dict(design="conditional_poisson", anchor_pair=True), "anchor_pair=True"),
        (dict(design_size=2), "design_size applies only to fixed-size"),
        (dict(design="conditional_poisson", design_size=5), r"design_size must lie in \[2"),
        (dict(design="conditional_poisson", design_size=1), r"design_size must lie in \[2"),
        (dict(design="conditional_poisson", budget_ratio=0.1, pi_min=0.05),
         r"floor\(num_generations \* budget_ratio\)"),
        (dict(delta=0.5), "delta must be None"),
        (dict(top_p=0.9), "top_p must be 1.0"),
        (dict(top_k=20), "top_k must be 0 or None"),
        (dict(repetition_penalty=1.1), "repetition_penalty must be 1.0"),
        (dict(use_vllm=True, vllm_importance_sampling_correction=False,
              vllm_enable_sleep_mode=True), "vllm_enable_sleep_mode"),
        (dict(use_vllm=True, vllm_importance_sampling_correction=False,
              vllm_tensor_parallel_size=2), "vllm_tensor_parallel_size"),
        (dict(head_temperature_fraction=0.0), "head_temperature_fraction"),
        (dict(head_lr=0.0), "head_lr must be > 0"),
        (dict(multi_objective_aggregation="normalize_then_sum"), "multi_objective_aggregation"),
        (dict(use_vllm=True), "use_vllm=True"),
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


def test_import_is_lazy():
    # `import pairht_trl` (and its light submodules) must not pull in torch, transformers or trl.
    code = (
        "import sys, pairht_trl; "
        "heavy = [m for m in ('torch', 'transformers', 'trl') if m in sys.modules]; "
        "assert not heavy, heavy; "
        "assert sorted(dir(pairht_trl)) == sorted(pairht_trl.__all__)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    import pairht_trl  # in this process trl is loaded already: the lazy names resolve

    assert pairht_trl.PairGRPOTrainer.__module__ == "pairht_trl.trainer"
    assert pairht_trl.AuditCallback.__module__ == "pairht_trl.audit_mode"
