"""PAIR's default: the audit row ``default`` and :class:`pairht.audit.AutoWidth`, the choice the
TRL trainer's ``width="auto"`` makes, from one code path (pairht.audit.width.choose_option)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import pairht.audit.width as width_mod
from pairht.audit import (
    ROWS,
    AuditConfig,
    AutoWidth,
    WidthAdvice,
    decision_for,
    run_audit,
    synthetic_population,
    width_advice,
    with_predictions,
)
from pairht.audit.width import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MAX_RATIO,
    DEFAULT_OPTIONS,
    N_BOOT,
    choose_option,
    cross_fitted_choice,
)


@pytest.fixture(scope="module")
def pop():
    return synthetic_population(12, 8, prefix_tokens=8, rng=3)


def test_default_row_is_the_declared_choice():
    row = ROWS["default"]
    assert row.options == DEFAULT_OPTIONS and row.options[0] == "grpo_small"
    assert row.confidence == DEFAULT_CONFIDENCE and row.max_ratio == DEFAULT_MAX_RATIO
    assert ROWS["pair_width"].max_ratio == 1.0
    assert ROWS["pair_width"].confidence == width_mod.CONFIDENCE


def test_default_row_selects_the_cross_fitted_choice_at_its_confidence(pop):
    res = run_audit(pop, rows=["default", *DEFAULT_OPTIONS], n_draws=0,
                    config=AuditConfig(budget_ratio=0.5, seed=2))
    mse = {k: res.row(k).per_prompt["mse_exact"] for k in DEFAULT_OPTIONS}
    choice, chosen = cross_fitted_choice(mse, DEFAULT_OPTIONS, seed=2,
                                         confidence=DEFAULT_CONFIDENCE,
                                         max_ratio=DEFAULT_MAX_RATIO)
    row = res.row("default")
    np.testing.assert_array_equal(row.per_prompt["choice"], choice)
    np.testing.assert_array_equal(row.per_prompt["mse_exact"], chosen)


@pytest.mark.parametrize("margin", [1.0, 0.85])
def test_choose_option_is_argmin_then_confidence_brute_force(margin):
    rng = np.random.default_rng(1)
    kept = 0
    for _ in range(40):
        seen = rng.gamma(2.0, size=(3, 15)) * np.array([[1.0], [0.7], [0.8]])
        best = int(np.argmin(seen.mean(axis=1)))
        assert choose_option(seen, None, 10, rng) == best
        got = choose_option(seen, 0.8, 300, np.random.default_rng(5), max_ratio=margin)
        means = seen.mean(axis=1)
        if best == 0 or means[best] > margin * means[0]:
            assert got == 0
        else:
            # the bootstrap of the same resamples, by hand: the corrected level's quantile of
            # the ratio must be below 1 and at most the margin
            gen = np.random.default_rng(5)
            take = gen.integers(15, size=(300, 15))
            ratio = seen[best][take].mean(axis=1) / seen[0][take].mean(axis=1)
            q = np.quantile(ratio, 1 - (1 - 0.8) / 2)
            assert got == (best if q < 1 and q <= margin else 0)
            kept += got == best
    assert kept > 0  # the draws reach the branch that keeps a challenger


def test_the_confidence_is_asked_of_the_margin_not_of_any_gain():
    """Seen ratio 0.715 (a 28% gain on the mean), 0.14 of it carried by one prompt: the
    bootstrap puts the ratio past the margin too often, so the default keeps GRPO, while
    asking only for a confident gain of any size would leave it (the resample's ratio is
    0.575 + 0.14 k, k ~ Binomial(40, 1/40) the times that prompt is drawn)."""
    grpo = np.ones(40)
    option = np.full(40, 0.575)
    option[0] += 0.14 * 40
    seen = np.stack([grpo, option])
    assert np.isclose(seen[1].mean() / seen[0].mean(), 0.715)
    take = np.random.default_rng(0).integers(40, size=(N_BOOT, 40))
    q = np.quantile(option[take].mean(axis=1) / grpo[take].mean(axis=1), DEFAULT_CONFIDENCE)
    assert DEFAULT_MAX_RATIO < q < 1.0  # confident of a gain, not of the margin
    assert choose_option(seen, DEFAULT_CONFIDENCE, N_BOOT, np.random.default_rng(0),
                         max_ratio=DEFAULT_MAX_RATIO) == 0
    assert choose_option(seen, DEFAULT_CONFIDENCE, N_BOOT, np.random.default_rng(0),
                         max_ratio=1.0) == 1


def test_the_margin_keeps_the_first_option_unless_the_gain_reaches_it():
    seen = np.array([[1.0] * 6, [0.9] * 6])  # a sure 10% gain
    gen = np.random.default_rng(0)
    assert choose_option(seen, 0.9, 100, gen, max_ratio=1.0) == 1
    assert choose_option(seen, 0.9, 100, gen, max_ratio=0.9) == 1  # the margin is inclusive
    assert choose_option(seen, 0.9, 100, gen, max_ratio=0.85) == 0
    assert choose_option(seen, None, 100, gen, max_ratio=0.85) == 0
    for bad in (0.0, 1.5, True):
        with pytest.raises(ValueError, match="max_ratio must be a number in"):
            choose_option(seen, 0.9, 100, gen, max_ratio=bad)


def test_choose_option_refuses_bad_tables():
    with pytest.raises(ValueError, match="seen must be a finite"):
        choose_option(np.ones(4), 0.9, 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="seen must be a finite"):
        choose_option(np.array([[1.0, np.nan], [1.0, 1.0]]), 0.9, 10, np.random.default_rng(0))


def test_row_and_auto_width_share_one_decision_function(pop, monkeypatch):
    """Both paths reach ``choose_option`` with the default's options and confidence."""
    calls: list[tuple[int, float | None, float]] = []
    real = width_mod.choose_option

    def spy(seen, confidence, n_boot, rng, *, max_ratio=1.0):
        calls.append((np.shape(seen)[0], confidence, max_ratio))
        return real(seen, confidence, n_boot, rng, max_ratio=max_ratio)

    monkeypatch.setattr(width_mod, "choose_option", spy)
    import pairht.audit.advice as advice_mod

    monkeypatch.setattr(advice_mod, "choose_option", spy)
    run_audit(pop, rows=["default"], n_draws=0, config=AuditConfig(budget_ratio=0.5))
    want = (len(DEFAULT_OPTIONS), DEFAULT_CONFIDENCE, DEFAULT_MAX_RATIO)
    assert calls and set(calls) == {want}
    calls.clear()
    AutoWidth(0.5, pop.group_size).observe(pop)
    assert calls == [want]


def test_auto_width_pools_the_newest_audits(pop):
    other = synthetic_population(12, 8, prefix_tokens=8, rng=4)
    auto = AutoWidth(0.5, 8, history=2)
    auto.observe(pop)
    auto.observe(other)
    third = synthetic_population(12, 8, prefix_tokens=8, rng=5)
    d = auto.observe(third, seed=7)
    assert list(auto.audits) == [other, third]
    direct = width_advice([other, third], 0.5, seed=7, options=DEFAULT_OPTIONS[1:],
                          confidence=DEFAULT_CONFIDENCE, max_ratio=DEFAULT_MAX_RATIO)
    assert d.advice == direct


def test_pooled_advice_is_the_choice_on_the_concatenated_prompts(pop):
    other = synthetic_population(12, 8, prefix_tokens=8, rng=4)
    adv = width_advice([pop, other], 0.5, seed=1, options=DEFAULT_OPTIONS[1:],
                       confidence=DEFAULT_CONFIDENCE, max_ratio=DEFAULT_MAX_RATIO)
    cfg = AuditConfig(budget_ratio=0.5, seed=1)
    res = [run_audit(p, rows=list(DEFAULT_OPTIONS), n_draws=0, config=cfg) for p in (pop, other)]
    table = np.stack([np.concatenate([r.row(k).per_prompt["mse_exact"] for r in res])
                      for k in DEFAULT_OPTIONS])
    want = choose_option(table, DEFAULT_CONFIDENCE, N_BOOT,
                         np.random.default_rng(np.random.SeedSequence([1, 37])),
                         max_ratio=DEFAULT_MAX_RATIO)
    assert adv.choice == DEFAULT_OPTIONS[want]
    best = 1 + int(np.argmin(table[1:].mean(axis=1)))
    assert adv.option == DEFAULT_OPTIONS[best]
    np.testing.assert_allclose(adv.ratio, table[best].mean() / table[0].mean(), rtol=1e-12)


def test_hindsight_predictions_leave_grpo_and_uninformative_ones_do_not():
    pop = synthetic_population(24, 8, prefix_tokens=8, rng=0)
    sharp = AutoWidth(0.5, 8).observe(with_predictions(pop, "hindsight"))
    assert sharp.width in ("prefixes", "subset") and sharp.allocator == "pair_dr"
    flat = dataclasses.replace(pop, p_hat=np.full(pop.p_hat.shape, 0.5),
                               c_hat=np.full(pop.c_hat.shape, float(pop.c_hat.mean())))
    assert AutoWidth(0.5, 8).observe(flat).width == "whole"


@pytest.mark.parametrize(("choice", "width", "allocator"), [
    ("grpo_small", "whole", None), ("none", "whole", None),
    ("pair_dr_narrow", "subset", "pair_dr"), ("pair_dr", "prefixes", "pair_dr"),
])
def test_decision_runs_each_option(choice, width, allocator):
    adv = WidthAdvice(choice, 0.8, 0.7, 0.9, group_size=1.2, generated=0.6,
                      option="pair_dr_narrow", prefix_width=5)
    d = decision_for(adv, 8)
    assert (d.width, d.allocator) == (width, allocator)
    if width == "whole":
        assert d.whole_group_size == 2.0  # G' clipped to [2, G]
    if width == "subset":
        assert d.prefix_group_size == 5


def test_auto_width_refuses_bad_arguments(pop):
    with pytest.raises(ValueError, match="options must start with 'grpo_small'"):
        AutoWidth(0.5, 8, options=("pair_dr", "grpo_small"))
    with pytest.raises(ValueError, match="history must be an int >= 1"):
        AutoWidth(0.5, 8, history=0)
    with pytest.raises(ValueError, match=r"population has G = 8 .* group_size = 6"):
        AutoWidth(0.5, 6).observe(pop)


def test_auto_width_audits_each_population_once(pop, monkeypatch):
    import pairht.audit.auto as auto_mod

    calls = []
    real = auto_mod.option_audit

    def counting(population, *args, **kwargs):
        calls.append(population)
        return real(population, *args, **kwargs)

    monkeypatch.setattr(auto_mod, "option_audit", counting)
    auto = AutoWidth(0.5, 8, history=2)
    pops = [pop, *(synthetic_population(12, 8, prefix_tokens=8, rng=s) for s in (4, 5))]
    for p in pops:
        auto.observe(p)
    assert calls == pops  # one audit per arrival, not one per pooled population per decision
