"""benchmarks/paper_regime.py: the paper-regime population keeps its documented properties, and
the table script runs (its ``--quick`` form, as in docs/audit.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from pairht.audit import ROWS, with_predictions
from pairht.audit.predictions import within_prompt_skill

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import paper_regime as pr


@pytest.fixture(scope="module")
def large():
    """A large draw (2,000 prompts x G = 16) at every named skill, one seed."""
    return {name: pr.paper_regime_population(2000, 16, skill=name, rng=7) for name in pr.SKILLS}


def test_shapes_lengths_and_prefix_share(large):
    pop = large["realistic"]
    assert pop.rewards.shape == pop.p_hat.shape == pop.c_hat.shape == (2000, 16)
    assert pop.scores.shape == (2000, 16, 32) and pop.finished is None
    length = pop.costs + pop.prefix_len
    lo, hi = pr.LENGTH_RANGE
    assert length.min() >= lo and length.max() <= hi
    assert 1500 <= np.median(length) <= 2100
    assert ((pop.prefix_len >= 256) & (pop.prefix_len < 256 + 16)).all()
    share = pop.prefix_len / length
    assert 0.05 <= np.median(share) <= 0.20
    assert (pop.c_hat > 0).all() and (pop.costs > 0).all()
    # failing answers are longer
    assert np.median(length[pop.rewards == 0]) > 1.1 * np.median(length[pop.rewards == 1])
    assert pop.meta["source"] == "benchmarks/paper_regime.py" and pop.meta["tau"] == 256


def test_two_fifths_of_prompts_are_near_zero_variance(large):
    r = large["none"].rewards
    minority = np.minimum(r.sum(axis=1), 16 - r.sum(axis=1))
    assert abs(np.mean(minority <= 1) - 0.4) < 0.05  # all equal, or one rare outcome
    assert 0.2 <= np.mean(minority == 0) <= 0.4
    assert 0.4 <= r.mean() <= 0.6


def test_within_prompt_skill_rises_from_none_to_strong(large):
    m = {name: within_prompt_skill(pop) for name, pop in large.items()}
    m["hindsight"] = within_prompt_skill(with_predictions(large["none"], "hindsight"))
    assert m["none"]["brier"] == pytest.approx(0.0, abs=1e-12) and m["none"]["auc"] == 0.5
    assert (large["none"].p_hat == large["none"].p_hat[:, :1]).all()
    assert 0.08 <= m["realistic"]["brier"] <= 0.2
    assert m["realistic"]["brier"] < m["strong"]["brier"] < m["hindsight"]["brier"] == 1.0
    assert 0.5 < m["realistic"]["auc"] < m["strong"]["auc"] < m["hindsight"]["auc"] == 1.0
    # cost heads gain too: log-cost correlation rises with skill
    corr = [np.corrcoef(np.log(large[n].c_hat).ravel(), np.log(large[n].costs).ravel())[0, 1]
            for n in pr.SKILLS]
    assert corr[0] < corr[1] < corr[2]


def test_a_seed_gives_the_same_candidates_at_every_skill():
    a = pr.paper_regime_population(6, 8, skill="none", rng=3)
    b = pr.paper_regime_population(6, 8, skill=0.9, rng=3)
    again = pr.paper_regime_population(6, 8, skill="none", rng=3)
    for key in ("rewards", "costs", "prefix_len", "scores"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    for key in ("p_hat", "c_hat", "m_hat", "rewards", "scores"):
        np.testing.assert_array_equal(getattr(a, key), getattr(again, key))
    assert not np.array_equal(a.p_hat, b.p_hat)
    assert b.meta["skill"] == 0.9 and a.meta["skill"] == "none"


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"skill": "expert"}, "skill"), ({"skill": 1.5}, "skill"), ({"skill": True}, "skill"),
    ({"G": 1}, "G"), ({"n_prompts": 0}, "n_prompts"), ({"tau": 600}, "tau"),
    ({"extreme_share": 1.2}, "extreme_share"), ({"within_sd": -1.0}, "within_sd"),
    ({"score_reward_corr": float("nan")}, "score_reward_corr"),
])
def test_bad_input_names_the_argument(kwargs, name):
    args = {"n_prompts": 4, "G": 8, **kwargs}
    n, g = args.pop("n_prompts"), args.pop("G")
    with pytest.raises(ValueError, match=rf"^{name} must"):
        pr.paper_regime_population(n, g, **args)


def test_row_keys_show_the_default_first_then_extra_rows():
    keys = pr.row_keys(["pair_strata"])
    assert keys[0] == "default" and "default" in ROWS
    assert keys[: len(pr.ROW_KEYS)] == list(pr.ROW_KEYS) and keys[-1] == "pair_strata"
    with pytest.raises(ValueError, match="--rows"):
        pr.row_keys(["no_such_row"])


def test_the_quick_table_runs(capsys):
    assert pr.main(["--quick", "--n-boot", "200"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("|")]
    assert lines[0] == "| row | none | realistic | strong | hindsight |"
    rows = [ln.split("|")[1].strip().strip("`") for ln in lines[2:]]
    assert rows == pr.row_keys()
    cells = {r: ln.split("|")[2:-1] for r, ln in zip(rows, lines[2:])}
    assert all(c.strip().startswith("1.000") for c in cells["grpo_small"])
    assert all("n/a" not in c for cs in cells.values() for c in cs)
    assert "Budget 0.5" in out and "Within-prompt skill" in out
