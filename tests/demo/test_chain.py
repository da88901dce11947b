"""The chain-arithmetic task (pairht_demo.chain): tokenisation, reward, demonstrator, splits."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("transformers")

from pairht_demo import chain, toy

T = chain.CHAIN_TASK


@pytest.fixture(scope="module")
def tok():
    return toy.make_tokenizer(T)


def test_tokenizer_round_trips_prompts_targets_and_demonstrations_without_unknowns(tok):
    rng = np.random.default_rng(0)
    for item in chain.TRAIN_ITEMS[::37] + chain.EVAL_ITEMS[::11]:
        for text in (chain.prompt_text(item), chain.target_completion(item),
                     chain.demonstration(item, rng)[0]):
            ids = tok(text)["input_ids"]
            assert tok.unk_token_id not in ids
            assert tok.decode(ids) == text


@pytest.mark.parametrize("k", [chain.MIN_COUNT, 6, chain.MAX_COUNT])
def test_correct_response_has_6k_plus_4_tokens_with_eos(tok, k):
    ids = tok(chain.target_completion((2, 3, k)))["input_ids"] + [tok.eos_token_id]
    assert len(ids) == chain.response_length(k) == 6 * k + 4


def test_reward_reads_the_last_answer_line_against_an_independent_sum():
    rng = np.random.default_rng(1)
    for _ in range(200):
        s, d, k = int(rng.integers(10)), int(rng.integers(10)), int(rng.integers(4, 10))
        truth = (s + d * k) % 10  # closed form, not the module's running sum
        p = chain.prompt_text((s, d, k))
        wrong = (truth + 1 + int(rng.integers(9))) % 10
        assert chain.chain_reward([p], [f"answer {wrong} \n answer {truth}"]) == [1.0]
        assert chain.chain_reward([p], [f"answer {truth} \n answer {wrong}"]) == [0.0]
        assert chain.chain_reward([p], ["no answer here"]) == [0.0]
        cols = dict(start=[s], step=[d], count=[k])
        assert chain.chain_reward(["ignored"], [f"answer {truth}"], **cols) == [1.0]


@pytest.mark.parametrize(
    ("item", "match"),
    [((1, 2, 3), "count in 4..9"), ((10, 2, 5), "start, step in 0..9"), ((1, 2), "item must")],
)
def test_bad_items_are_rejected_naming_the_rule(item, match):
    with pytest.raises(ValueError, match=match):
        chain.prompt_text(item)


def test_demonstrator_flag_matches_the_reward_and_its_rate_is_092_to_the_k():
    rng = np.random.default_rng(2)
    n, hits, expected = 4000, 0, 0.0
    for item in chain.CHAIN_TASK.sample(n, rng, "train"):
        text, ok = chain.demonstration(item, rng)
        assert chain.chain_reward([chain.prompt_text(item)], [text]) == [float(ok)]
        hits += ok
        expected += 0.92 ** item[2]
    mean = expected / n
    # 5 binomial standard deviations: fails if the slip rate or its consequence is wrong
    assert abs(hits / n - mean) < 5 * math.sqrt(mean * (1 - mean) / n)


def test_splits_are_disjoint_cover_everything_and_sampling_respects_them():
    assert not set(chain.TRAIN_ITEMS) & set(chain.EVAL_ITEMS)
    assert len(chain.TRAIN_ITEMS) + len(chain.EVAL_ITEMS) == 10 * 10 * 6
    assert set(T.eval_items) <= set(chain.EVAL_ITEMS) and len(T.eval_items) == 32
    assert set(T.sample(200, 0, "train")) <= set(chain.TRAIN_ITEMS)
    ds = T.dataset(16, rng=3)
    assert ds.to_dict() == T.dataset(16, rng=3).to_dict()
    for row in ds:
        item = (row["start"], row["step"], row["count"])
        assert item in chain.TRAIN_ITEMS
        assert chain.chain_reward([row["prompt"]], [row["answer"]]) == [1.0]
    with pytest.raises(ValueError, match="split must be"):
        T.sample(2, 0, "test")


def test_early_slip_demonstrator_slips_mostly_on_the_first_line():
    """CHAIN_EARLY_TASK: line 1 slips with probability EARLY_SLIPS[0], later lines with
    EARLY_SLIPS[1]; success is (1 - s1)(1 - s2)^(k-1); everything else is the chain task's."""
    s1, s2 = chain.EARLY_SLIPS
    early = chain.CHAIN_EARLY_TASK
    assert early.name == "chain_early" and early.reward is T.reward
    assert early.train_items == T.train_items and early.eval_items == T.eval_items
    rng = np.random.default_rng(3)
    n, hits, expected, first_wrong = 4000, 0, 0.0, 0
    for item in early.sample(n, rng, "train"):
        text, ok = early.demonstration(item, rng)
        assert chain.chain_reward([chain.prompt_text(item)], [text]) == [float(ok)]
        s, d, _ = item
        first_value = int(text.split()[4])  # "1 + d = v \n ...": v of line 1
        first_wrong += first_value != (s + d) % 10
        hits += ok
        expected += (1 - s1) * (1 - s2) ** (item[2] - 1)
    mean = expected / n
    assert abs(hits / n - mean) < 5 * math.sqrt(mean * (1 - mean) / n)
    assert abs(first_wrong / n - s1) < 5 * math.sqrt(s1 * (1 - s1) / n)

    def old_demonstrator(item, gen):  # the chain task's demonstrator before EARLY_SLIPS
        s, d, k = item
        values, v = [], s
        for _ in range(k):
            v = (v + d) % 10
            if gen.random() < 0.08:
                v = (v + int(gen.integers(1, 10))) % 10
            values.append(v)
        return values

    for seed, item in enumerate([(1, 2, 5), (9, 9, 9), (0, 3, 4)]):
        text, _ = chain.demonstration(item, np.random.default_rng(seed))
        want = old_demonstrator(item, np.random.default_rng(seed))
        assert [int(w) for w in text.split()[4::5][:item[2]]] == want
