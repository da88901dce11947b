"""The toy task: tokenizer, verifiable reward, demonstrator, datasets and the warm-up band."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.demo import toy


@pytest.fixture(scope="module")
def tok():
    return toy.make_tokenizer()


def _canonical_texts():
    rng = np.random.default_rng(0)
    texts = []
    for c, k in toy.TRAIN_COMBOS[::7] + toy.EVAL_COMBOS[::5]:
        texts.append(toy.prompt_text(c, k))
        texts.append(toy.target_completion(c, k))
        texts.append(toy.demonstration(c, k, rng)[0])
    return texts


def test_tokenizer_round_trips_every_canonical_text_without_unknown_tokens(tok):
    for text in _canonical_texts():
        ids = tok(text)["input_ids"]
        assert tok.unk_token_id not in ids, text
        assert tok.decode(ids) == text


def test_newline_is_one_token_and_specials_are_distinct(tok):
    assert tok("\n")["input_ids"] == [tok.convert_tokens_to_ids("\n")]
    assert tok.decode(tok.convert_tokens_to_ids(["\n"])) == "\n"
    ids = {tok.pad_token_id, tok.eos_token_id, tok.unk_token_id, tok.convert_tokens_to_ids("\n")}
    assert len(ids) == 4
    assert tok.padding_side == "left"


@pytest.mark.parametrize("count", [toy.MIN_COUNT, 7, toy.MAX_COUNT])
def test_correct_response_has_3k_plus_3_tokens_with_eos(tok, count):
    ids = tok(toy.target_completion("a", count))["input_ids"] + [tok.eos_token_id]
    assert len(ids) == toy.response_length(count) == 3 * count + 3
    assert ids.count(tok.convert_tokens_to_ids("\n")) == count + 1


# (completion, reward) for the prompt "repeat c 3 :", written by hand
CASES = [
    ("3 \n c 1 \n c 2 \n c 3 \n", 1.0),  # canonical
    ("3\nc 1\nc 2\nc 3", 1.0),  # whitespace-insensitive, final newline optional
    ("3 \n c 1 \n c 2 \n c 3 \n <eos>", 1.0),  # special tokens not skipped when decoding
    ("3 \n\n c 1 \n c 2 \n\n c 3 \n", 1.0),  # empty lines ignored
    ("4 \n c 1 \n c 2 \n c 3 \n c 4 \n", 0.0),  # wrong declared count, followed faithfully
    ("4 \n c 1 \n c 2 \n c 3 \n", 0.0),  # wrong declared count, right body
    ("3 \n c 1 \n c 2 \n", 0.0),  # a line short
    ("3 \n c 1 \n c 2 \n c 3 \n c 4 \n", 0.0),  # a line too many
    ("3 \n c 1 \n d 2 \n c 3 \n", 0.0),  # slipped letter
    ("3 \n c 1 \n c 3 \n c 2 \n", 0.0),  # wrong order
    ("c 1 \n c 2 \n c 3 \n", 0.0),  # no declared count
    ("3 c 1 c 2 c 3", 0.0),  # no newlines: one line
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "reward"), CASES)
def test_reward_on_hand_written_cases(completion, reward):
    assert toy.toy_reward(["repeat c 3 :"], [completion]) == [reward]
    # answer columns (as TRL passes them) give the same verdict as parsing the prompt
    assert toy.toy_reward(["ignored"], [completion], letter=["c"], count=[3]) == [reward]


def test_reward_accepts_trl_keywords_and_chat_messages():
    got = toy.toy_reward(
        prompts=[[{"role": "user", "content": "repeat b 4 :"}]],
        completions=[[{"role": "assistant", "content": toy.target_completion("b", 4)}]],
        completion_ids=[[1, 2, 3]],
        trainer_state=None,
        log_metric=print,
    )
    assert got == [1.0]


@pytest.mark.parametrize(
    ("prompts", "completions", "match"),
    [
        (["repeat c 3 :"], [], "same length"),
        (["repeat c"], ["3"], "prompt must read"),
        (["repeat z 3 :"], ["3"], "letter must be one of"),
        (["repeat c 30 :"], ["3"], r"count must lie in \[3, 12\]"),
        ([3], ["3"], "must be str or chat messages"),
    ],
)
def test_reward_rejects_bad_input_naming_the_rule(prompts, completions, match):
    with pytest.raises(ValueError, match=match):
        toy.toy_reward(prompts, completions)


def test_demonstrator_flag_matches_the_reward_and_its_success_rate_is_three_eighths():
    rng = np.random.default_rng(1)
    n = 4000
    hits = 0
    for c, k in toy.sample_prompts(n, rng):
        text, ok = toy.demonstration(c, k, rng)
        assert toy.toy_reward([toy.prompt_text(c, k)], [text]) == [float(ok)]
        hits += ok
    # P(correct) = P(count kept) * P(no slip) = 0.5 * 0.75 = 0.375 exactly; 4 binomial standard
    # deviations at n = 4000 is 4 * sqrt(0.375 * 0.625 / 4000) = 0.031.
    assert abs(hits / n - 0.375) < 0.031


def test_splits_are_disjoint_and_cover_every_combination():
    assert not set(toy.TRAIN_COMBOS) & set(toy.EVAL_COMBOS)
    assert len(toy.TRAIN_COMBOS) + len(toy.EVAL_COMBOS) == len(toy.LETTERS) * 10
    assert len(toy.EVAL_COMBOS) == 16


def test_dataset_is_deterministic_in_the_seed_and_has_answer_columns():
    a, b = toy.make_dataset(32, rng=3), toy.make_dataset(32, rng=3)
    assert a.to_dict() == b.to_dict()
    assert a.to_dict() != toy.make_dataset(32, rng=4).to_dict()
    assert a.column_names == ["prompt", "letter", "count", "answer"]
    for row in a:
        assert (row["letter"], row["count"]) in toy.TRAIN_COMBOS
        assert row["prompt"] == toy.prompt_text(row["letter"], row["count"])
        assert toy.toy_reward([row["prompt"]], [row["answer"]]) == [1.0]
    ev = toy.make_dataset(16, rng=0, split="eval")
    assert all((r["letter"], r["count"]) in toy.EVAL_COMBOS for r in ev)


def test_bad_split_and_size_are_rejected():
    with pytest.raises(ValueError, match="split must be 'train' or 'eval'"):
        toy.make_dataset(4, split="test")
    with pytest.raises(ValueError, match="n must be a positive int"):
        toy.sample_prompts(0)


def test_model_init_is_deterministic_in_the_seed():
    import torch

    a, b, c = toy.make_model(5), toy.make_model(5), toy.make_model(6)
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), na
    assert any(
        not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters())
    )
    assert 32 <= a.config.hidden_size <= 64 and a.config.num_hidden_layers == 2


def test_warm_up_lifts_the_success_rate_from_zero_into_the_target_band(tok):
    """Untrained: no completion is right. After the default warm-up (seed 0): the sampled success
    rate on the held-out prompts lies in [0.3, 0.6], the band that gives groups contrast (the
    demonstrator's own rate is 0.375)."""
    cold = toy.success_rate(toy.make_model(0), tok, samples_per_prompt=2, seed=0)
    assert cold == 0.0
    model, result = toy.warm_started_model(0)
    assert result.steps == 400 and result.final_loss < 0.3
    warm = toy.success_rate(model, tok, split="eval", samples_per_prompt=8, seed=1)
    assert 0.3 <= warm <= 0.6, warm
    # the memoised copy is a fresh model with identical weights
    again, _ = toy.warm_started_model(0)
    assert again is not model
    assert toy.success_rate(again, tok, split="eval", samples_per_prompt=8, seed=1) == warm
