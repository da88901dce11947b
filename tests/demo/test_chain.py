"""The chain-arithmetic task (pairht.demo.chain): tokenisation, reward, demonstrator, splits."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("transformers")

from pairht.demo import chain, toy

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


# ------------------------------------------------------------------ the long chains
L = chain.CHAIN_LONG_TASK


def test_long_task_round_trips_its_texts_and_responses_take_6k_plus_4_tokens():
    tok = toy.make_tokenizer(L)
    assert L.words[: len(T.words)] == T.words  # the chain vocabulary, then the line numbers
    assert L.words[len(T.words):] == tuple(str(i) for i in range(10, chain.LONG_COUNTS[1] + 1))
    rng = np.random.default_rng(4)
    for item in L.train_items[::97] + L.eval_items[::7]:
        for text in (L.prompt(item), L.answer(item), L.demonstration(item, rng)[0]):
            ids = tok(text)["input_ids"]
            assert tok.unk_token_id not in ids and tok.decode(ids) == text
    for k in chain.LONG_COUNTS:
        ids = tok(L.answer((2, 3, k)))["input_ids"] + [tok.eos_token_id]
        assert len(ids) == chain.response_length(k) == 6 * k + 4
    assert L.max_new_tokens == chain.response_length(chain.LONG_COUNTS[1]) + 8


def test_long_task_splits_reward_and_demonstrator():
    lo, hi = chain.LONG_COUNTS
    assert not set(L.train_items) & set(L.eval_items)
    assert len(L.train_items) + len([it for s in range(10) for d in range(10)
                                     for it in [(s, d, k) for k in range(lo, hi + 1)]
                                     if sum(it) % 5 == 0]) == 100 * (hi - lo + 1)
    assert len(L.eval_items) == 64 and all(sum(it) % 5 == 0 for it in L.eval_items)
    assert set(L.sample(300, 0, "train")) <= set(L.train_items)
    for row in L.dataset(8, rng=1):
        item = (row["start"], row["step"], row["count"])
        assert L.reward([row["prompt"]], [row["answer"]]) == [1.0]
        assert L.reward(["ignored"], [row["answer"]], **{k: [v] for k, v in row.items()
                                                          if k in ("start", "step", "count")}
                        ) == [1.0]
        assert item in L.train_items
    # The same slip profile as chain_early: success (1 - s1)(1 - s2)^(k - 1).
    s1, s2 = chain.EARLY_SLIPS
    rng = np.random.default_rng(5)
    n, hits, expected = 3000, 0, 0.0
    for item in L.sample(n, rng, "train"):
        text, ok = L.demonstration(item, rng)
        assert L.reward([L.prompt(item)], [text]) == [float(ok)]
        hits += ok
        expected += (1 - s1) * (1 - s2) ** (item[2] - 1)
    mean = expected / n
    assert abs(hits / n - mean) < 5 * math.sqrt(mean * (1 - mean) / n)


def test_long_task_refuses_counts_outside_its_range_naming_it():
    with pytest.raises(ValueError, match=r"count in 10\.\.20"):
        L.prompt((1, 2, 9))
    with pytest.raises(ValueError, match=r"count in 10\.\.20"):
        L.reward([L.prompt((1, 2, 12)).replace("12", "21")], ["answer 1"])
    with pytest.raises(ValueError, match=r"count in 4\.\.9"):  # the short task keeps its range
        T.reward([L.prompt((1, 2, 12))], ["answer 1"])
    with pytest.raises(ValueError, match="counts must be"):
        chain.make_chain_task("x", counts=(5, 4))
    with pytest.raises(ValueError, match="slips must be"):
        chain.make_chain_task("x", slips=(1.0, 0.1))
