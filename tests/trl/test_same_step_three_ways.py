"""One PAIR step through the numpy API, the TRL trainer and a plain-torch custom loop gives
the same advantages (float64, 1e-12), for the pair-HT and the difference estimators at every
width.

The trainer plans on its heads' predictions with its design generator; the numpy API
(:func:`pairht.step.plan_step`, :func:`pairht.step.estimate`) and the custom loop of
``docs/extend/framework.md`` (its ``pair_step``, torch tensors in and out) are given the same
predictions, rewards and generator state, and must reproduce the trainer's plan bit for bit
and its advantages -- both the ones it logs and the tensor it hands TRL's loss.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("trl")

from pair_helpers import make_trainer, scored_batch

from pairht.estimators import difference_advantages, pair_advantages, prediction_baselines
from pairht.step import estimate, plan_step, prefix_candidates

G = 6
FRAMEWORK_PAGE = Path(__file__).resolve().parents[2] / "docs" / "extend" / "framework.md"

CASES = [
    ("pair", "prefixes", {}),
    ("pair", "subset", {"prefix_group_size": 4}),
    ("pair", "whole", {"whole_group_size": 3}),
    ("pair_dr", "prefixes", {}),
    ("pair_dr", "subset", {"prefix_group_size": 4}),
    ("pair_dr", "whole", {"whole_group_size": 3}),
]


def _custom_loop() -> dict:
    """The namespace of the framework page's code block (which trains its toy policy)."""
    (source,) = re.findall(r"```python\n(.*?)```", FRAMEWORK_PAGE.read_text(), re.S)
    namespace: dict = {"__name__": "__framework_page__"}
    exec(compile(source, str(FRAMEWORK_PAGE), "exec"), namespace)
    return namespace


def _generator(state: dict) -> np.random.Generator:
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = copy.deepcopy(state)
    return rng


@pytest.mark.parametrize(("allocator", "width", "sizes"), CASES,
                         ids=[f"{a}-{w}" for a, w, _ in CASES])
def test_numpy_api_trl_trainer_and_custom_loop_give_the_same_advantages(tmp_path, allocator,
                                                                      width, sizes):
    trainer = make_trainer(tmp_path, double=True, allocator=allocator, width=width,
                           drop_unselected_rows=False, **sizes)
    a = trainer.pair_args
    state = copy.deepcopy(trainer.design_rng.bit_generator.state)
    skill = trainer._head_skill()
    out = scored_batch(trainer, 2)  # the trainer's step: generation, plan, rewards, estimate
    draw = trainer.last_draw
    B = draw.plan.shape[0]
    options = dict(budget_ratio=a.budget_ratio, width=a.width, group_size=G, n_groups=B,
                   whole_group_size=a.whole_group_size, allocator=a.allocator,
                   design=a.design, pi_min=a.pi_min, anchor_pair=a.anchor_pair,
                   program_options={"size": "auto", "proxy": a.edge_proxy,
                                    "covariance_term": a.covariance_term})
    predictions = {} if width == "whole" else dict(
        p_hat=draw.p_hat, c_hat=draw.c_hat, finished=draw.prefix_done,
        prefix_tokens=draw.prefix_len, **skill)

    # 1. the numpy API, from the same generator state
    rng = _generator(state)
    cands = prefix_candidates(width, B, G, prefix_group_size=a.prefix_group_size, rng=rng)
    plan = plan_step(**predictions, subset=cands, rng=rng, **options)
    assert np.array_equal(plan.selected, draw.plan.selected)
    assert np.array_equal(plan.joint, draw.plan.joint) and np.array_equal(plan.pi, draw.pi)
    est = estimate(plan, draw.rewards, weighting=a.weighting, scale_rewards=a.scale_rewards)
    assert est.estimator == ("difference" if allocator == "pair_dr" else "ht")
    np.testing.assert_allclose(est.advantages, draw.advantages, rtol=0, atol=1e-12)

    # 2. the TRL trainer: the advantages it hands TRL's loss (float64 model, rows kept)
    handed = out["advantages"].detach().cpu().numpy()
    assert out["advantages"].dtype == torch.float64
    np.testing.assert_allclose(handed, est.advantages.reshape(-1), rtol=0, atol=1e-12)

    # 3. the custom loop's adapter, torch tensors in and out
    pair_step = _custom_loop()["pair_step"]
    rng = _generator(state)
    cands = prefix_candidates(width, B, G, prefix_group_size=a.prefix_group_size, rng=rng)
    r = torch.from_numpy(np.nan_to_num(draw.rewards))
    p, c, f = (torch.from_numpy(np.asarray(x)) for x in (draw.p_hat, draw.c_hat,
                                                          draw.prefix_done))
    extra = {k: v for k, v in predictions.items() if k not in ("p_hat", "c_hat", "finished")}
    adv, mask, _ = pair_step(p, c, f, lambda sel: torch.where(sel, r, torch.nan), rng=rng,
                             subset=cands, **extra, **options)
    assert torch.equal(mask, torch.from_numpy(draw.mask))
    np.testing.assert_allclose(adv.numpy(), est.advantages, rtol=0, atol=1e-12)

    # and each is the estimator's formula, computed here from the plan at full width
    if width == "prefixes":
        if allocator == "pair_dr":
            base = prediction_baselines(draw.p_hat, draw.rewards, draw.prefix_done)
            want = difference_advantages(draw.rewards, plan.selected, plan.joint, base)
        else:
            want = pair_advantages(draw.rewards, plan.selected, plan.joint)
        np.testing.assert_allclose(est.advantages, want, rtol=0, atol=1e-12)
