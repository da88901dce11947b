"""The shared-prompt features forward (pairht.rollout.features.prefix_features) on the tiny Llama.

Rows of a GRPO batch repeat each prompt ``G`` times, so the forward computes every distinct
prompt once, expands its keys and values to the rows that share it and runs only the prefix
tokens. It must give the features of the full forward on prompt + prefix of every row, to
rounding: with prompts of different lengths (left padding, so positions come from the mask) and
prefixes of different lengths, shorter and longer than the window.
"""

from __future__ import annotations

import random

import pytest
import torch

from pairht.rollout.features import prefix_features

#: Prefix lengths of the rows in turn: shorter and longer than every window tested.
PREFIX_LENGTHS = (1, 2, 24, 7, 17, 3, 12, 20, 5, 9, 15, 22, 4, 11, 19)


def _rows(seed: int, group_sizes=(1, 2, 3, 4, 5), prompt_lengths=(13, 19, 11, 24, 16),
          preamble=()):
    """Groups of rows repeating a prompt, shuffled (groups need not be contiguous).

    Prompt ``k`` is ``preamble`` then ``prompt_lengths[k]`` tokens starting with ``4 + k``, so
    that no two prompts share more than the preamble.
    """
    g = torch.Generator().manual_seed(seed)
    prompts, prefixes = [], []
    for k, (size, n) in enumerate(zip(group_sizes, prompt_lengths, strict=True)):
        tail = torch.randint(4, 31, (n - 1,), generator=g).tolist()
        prompt = [*preamble, 4 + k, *tail]
        for _ in range(size):
            length = PREFIX_LENGTHS[len(prompts) % len(PREFIX_LENGTHS)]
            prompts.append(prompt)
            prefixes.append(torch.randint(3, 31, (length,), generator=g).tolist())
    order = list(range(len(prompts)))
    random.Random(seed).shuffle(order)
    return [prompts[i] for i in order], [prefixes[i] for i in order]


class _Passes:
    """Records each forward pass of the model: (input width, whether it extends a filled cache)."""

    def __init__(self, model):
        self.seen: list[tuple[int, bool]] = []
        self.handle = model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        cache = kwargs.get("past_key_values")
        filled = cache is not None and cache.get_seq_length() > 0
        self.seen.append((kwargs["input_ids"].shape[1], filled))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@pytest.fixture(scope="module", params=[torch.float32, torch.float64], ids=["f32", "f64"])
def policy(request, checkpoint):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=request.param).eval()


def _tolerance(model):
    # float32: a different batching of the same float32 sums (rounding, ~1e-7 relative, grown
    # through the layers); float64: the features are rounded to float32 at the end, so both
    # ways must agree to float32 rounding.
    return 1e-5 if model.dtype == torch.float32 else 2e-7


PREAMBLE = (9, 8, 7, 6, 5, 4, 30, 29, 28, 27)  # a chat template's common system turn


@pytest.mark.parametrize(
    ("window", "batch_size", "preamble", "passes"),
    [
        (16, 64, (), 2),  # the distinct prompts, then the prefixes
        (4, 64, (), 2),
        (16, 7, (), 2),  # batches cut groups: each batch shares what it holds
        (16, 64, PREAMBLE, 3),  # the preamble once, the rest of each prompt, the prefixes
        (3, 9, PREAMBLE, 3),
    ],
)
def test_shared_prompt_forward_equals_the_full_forward(policy, window, batch_size, preamble,
                                                       passes):
    prompts, prefixes = _rows(seed=window + batch_size, preamble=preamble)
    assert len({len(p) for p in prompts}) > 1 and len({len(q) for q in prefixes}) > 1
    assert min(map(len, prefixes)) < window < max(map(len, prefixes))
    full = prefix_features(policy, prompts, prefixes, window=window, pad_token_id=0,
                           batch_size=batch_size, share_prompts=False)
    with _Passes(policy) as seen:
        shared = prefix_features(policy, prompts, prefixes, window=window, pad_token_id=0,
                                 batch_size=batch_size)
    # The shared path ran: the first batch in `passes` passes, the last one against a cache as
    # wide as the longest prefix of the batch (not prompt + prefix).
    assert [cached for _, cached in seen.seen[:passes]] == [False] + [True] * (passes - 1)
    assert seen.seen[passes - 1][0] <= max(map(len, prefixes))
    assert shared.dtype == torch.float32 and shared.shape == full.shape
    tol = _tolerance(policy)
    torch.testing.assert_close(shared, full, rtol=tol, atol=tol * float(full.abs().max()))


def test_distinct_prompts_with_a_common_preamble_share_it(policy):
    # No prompt repeats, one prompt is the preamble and one token (the smallest rest), rows in
    # their given order: the preamble is computed once.
    prompts, prefixes = _rows(seed=8, group_sizes=(1, 1, 1, 1), prompt_lengths=(1, 5, 12, 3),
                              preamble=PREAMBLE * 3)
    full = prefix_features(policy, prompts, prefixes, window=6, share_prompts=False)
    with _Passes(policy) as seen:
        shared = prefix_features(policy, prompts, prefixes, window=6)
    assert seen.seen[0] == (len(PREAMBLE) * 3, False) and len(seen.seen) == 3
    tol = _tolerance(policy)
    torch.testing.assert_close(shared, full, rtol=tol, atol=tol * float(full.abs().max()))


def test_rows_keep_their_order_and_each_its_own_prefix(policy):
    prompts, prefixes = _rows(seed=3)
    shared = prefix_features(policy, prompts, prefixes, window=5)
    # One row at a time (no padding, no sharing) is the plainest reference.
    alone = torch.cat([
        prefix_features(policy, [p], [q], window=5) for p, q in zip(prompts, prefixes)
    ])
    tol = _tolerance(policy)
    torch.testing.assert_close(shared, alone, rtol=tol, atol=tol * float(alone.abs().max()))


def test_distinct_prompts_take_the_full_forward(policy):
    prompts, prefixes = _rows(seed=4, group_sizes=(1, 1, 1, 1, 1))
    with _Passes(policy) as passes:
        prefix_features(policy, prompts, prefixes)
    width = max(len(p) + len(q) for p, q in zip(prompts, prefixes))
    assert passes.seen == [(width, False)]


def test_sharing_that_would_not_save_tokens_takes_the_full_forward(policy):
    # Two rows share a 2-token prompt, a third row's long prompt sets the padded width: the
    # prompt pass (2 x 30) plus the prefix pass (3 x 20) exceed one full pass (3 x 32).
    g = torch.Generator().manual_seed(5)
    short = [5, 6]
    long = torch.randint(4, 31, (30,), generator=g).tolist()
    prompts = [short, short, long]
    prefixes = [torch.randint(4, 31, (20,), generator=g).tolist(), [7], [8, 9]]
    with _Passes(policy) as passes:
        got = prefix_features(policy, prompts, prefixes)
    assert passes.seen == [(32, False)]
    assert got.shape[0] == 3


def test_a_model_without_a_cache_argument_gets_the_full_forward(policy):
    class NoCache(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        @property
        def device(self):
            return self.inner.device

        def forward(self, input_ids, attention_mask, position_ids, use_cache,
                    output_hidden_states):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=position_ids, use_cache=use_cache,
                              output_hidden_states=output_hidden_states)

    prompts, prefixes = _rows(seed=6)
    wrapped = NoCache(policy)
    got = prefix_features(wrapped, prompts, prefixes)
    want = prefix_features(policy, prompts, prefixes, share_prompts=False)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_bad_arguments_are_refused(policy):
    with pytest.raises(ValueError, match="batch_size"):
        prefix_features(policy, [[5]], [[6]], batch_size=0)
    with pytest.raises(ValueError, match="prefix_ids\\[0\\] is empty"):
        prefix_features(policy, [[5]], [[]])
