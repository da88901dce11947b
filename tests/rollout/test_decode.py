"""Decoding that drops finished rows (pairht.rollout.decode) against ``generate`` itself.

Greedy: token for token ``generate``'s output (each row cut at its own budget), fresh and when
resuming phase 2 from a phase-1 cache. Sampling: at every step, every running row's processed
scores are the ones ``generate`` computes for that row's prefix alone (temperature, top-k, top-p
and the repetition penalty, whose per-row state must follow the rows that leave); the
distribution of whole completions is checked against exact enumeration in
tests/trl/test_generation.py (``test_sampled_completions_follow_the_policy_distribution``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from pairht.rollout.decode import decode_rows
from pairht.rollout.features import left_pad
from pairht.rollout.snapping import trim_after_eos
from pairht.rollout.transformers_backend import TransformersTwoPhase

MAX_LEN = 24


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 9, (16,), generator=g)
    return [torch.randint(4, 31, (int(n),), generator=g).tolist() for n in lengths]


def _config(tokenizer, **kw) -> GenerationConfig:
    return GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                            pad_token_id=tokenizer.pad_token_id, **kw)


def test_greedy_is_generate_token_for_token(hf_model, tokenizer, prompts):
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, hf_model.device)
    budget = [MAX_LEN - 3 * (i % 4) for i in range(len(prompts))]
    gc = _config(tokenizer, do_sample=False)
    out = decode_rows(hf_model, ids, mask, max_new_tokens=budget, generation_config=gc)
    ref = hf_model.generate(ids, attention_mask=mask, generation_config=_config(
        tokenizer, do_sample=False, max_new_tokens=MAX_LEN))[:, ids.shape[1]:].tolist()
    eos = [tokenizer.eos_token_id]
    assert out == [trim_after_eos(r[:b], eos) for r, b in zip(ref, budget)]
    # Rows end at many different steps, by EOS and by budget: the drop is exercised.
    assert len({len(o) for o in out}) >= 4
    assert any(o[-1] == eos[0] for o in out) and any(o[-1] != eos[0] for o in out)


def test_greedy_phase_two_is_the_generate_path_token_for_token(hf_model, tokenizer, prompts):
    common = dict(tau=6, snap_window=5, eos_token_ids=[tokenizer.eos_token_id],
                  pad_token_id=tokenizer.pad_token_id, snap_token_ids=[3],
                  max_completion_length=MAX_LEN)
    outs = []
    for drop in (True, False):
        tp = TransformersTwoPhase(**common, drop_finished_rows=drop)
        res = tp.generate_prefixes(hf_model, prompts)
        selected = np.flatnonzero(~res.prefix_done.numpy())
        outs.append(tp.continue_selected(hf_model, res, selected))
    assert outs[0] == outs[1]
    assert len({len(o) for o in outs[0]}) > 1  # rows end at different steps


class _Record(LogitsProcessor):
    """Keeps every step's running rows and their processed scores."""

    def __init__(self) -> None:
        self.steps: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids, scores):
        self.steps.append((input_ids.clone(), scores.clone()))
        return scores


def test_sampled_scores_are_generates_for_the_same_prefix(hf_model, tokenizer, prompts):
    # Every processor with per-row or per-length state is on: the repetition penalty (padding
    # lengths from the mask), temperature, top-k, top-p.
    rows = prompts[:8]
    assert len({tuple(p) for p in rows}) == len(rows)  # a row is found by its prompt
    ids, mask = left_pad(rows, tokenizer.pad_token_id, hf_model.device)
    width = ids.shape[1]
    gc = _config(tokenizer, do_sample=True, temperature=0.7, top_k=12, top_p=0.9,
                 repetition_penalty=1.3)
    record = _Record()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        out = decode_rows(hf_model, ids, mask, max_new_tokens=MAX_LEN, generation_config=gc,
                          logits_processor=LogitsProcessorList([record]))
    assert len({len(o) for o in out}) >= 3  # rows left at different steps
    checked = 0
    for step_ids, step_scores in record.steps:
        for row_ids, scores in zip(step_ids, step_scores):
            r = next(i for i in range(len(rows)) if torch.equal(row_ids[:width], ids[i]))
            # The same prefix, alone in its batch, through generate's own processors.
            alone = row_ids.unsqueeze(0)
            alone_mask = torch.cat([mask[r], mask.new_ones(len(row_ids) - width)]).unsqueeze(0)
            ref = hf_model.generate(
                alone, attention_mask=alone_mask, generation_config=_config(
                    tokenizer, do_sample=True, temperature=0.7, top_k=12, top_p=0.9,
                    repetition_penalty=1.3, max_new_tokens=1, output_scores=True,
                    return_dict_in_generate=True),
            ).scores[0][0]
            kept = torch.isfinite(ref)
            assert torch.equal(torch.isfinite(scores), kept)
            # float32: a cached decode step against one prefill of the whole prefix sums in
            # another order (up to 3e-5 apart on logits of magnitude 10 here); a processor
            # state that did not follow its row (penalty, padding) moves a score by ~10%.
            torch.testing.assert_close(scores[kept], ref[kept], rtol=1e-4, atol=1e-4)
            checked += 1
    assert checked == sum(len(o) for o in out)


def test_a_budget_per_row_must_match_the_rows(hf_model, tokenizer):
    ids = torch.tensor([[5, 6], [7, 8]])
    with pytest.raises(ValueError, match="max_new_tokens must be one int >= 0 or one per row"):
        decode_rows(hf_model, ids, torch.ones_like(ids), max_new_tokens=[3, 4, 5],
                    generation_config=_config(tokenizer, do_sample=False))


def test_a_zero_budget_generates_nothing(hf_model, tokenizer):
    ids = torch.tensor([[5, 6], [7, 8]])
    gc = _config(tokenizer, do_sample=False)
    out = decode_rows(hf_model, ids, torch.ones_like(ids), max_new_tokens=[0, 2],
                      generation_config=gc)
    both = decode_rows(hf_model, ids, torch.ones_like(ids), max_new_tokens=2,
                       generation_config=gc)
    assert out == [[], both[1]]
