"""Two-phase generation with KV reuse (pairht.rollout.transformers_backend) on a tiny random Llama.

The key property: prefix (phase 1) + resumed suffix (phase 2) is the completion one
uninterrupted ``generate`` produces, token for token under greedy decoding, and in distribution
under sampling.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

pytest.importorskip("transformers")
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from pairht.rollout.transformers_backend import (
    TransformersTwoPhase,
    prefix_features,
    snap_cut,
    snap_token_ids_from_tokenizer,
    trim_after_eos,
)

VOCAB = ["<pad>", "<bos>", "<eos>", "\n", ".", "end?", "a.b", *[f"w{i}" for i in range(7, 48)]]
PAD, BOS, EOS = 0, 1, 2


def _tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )


def _settings(vocab: int, hidden: int, layers: int, init: float) -> dict:
    """The tiny decoder's config fields (any Llama-like architecture)."""
    return dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                num_hidden_layers=layers, num_attention_heads=4 if hidden >= 32 else 2,
                num_key_value_heads=2 if hidden >= 32 else 1, max_position_embeddings=128,
                pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, initializer_range=init,
                tie_word_embeddings=False)


def _llama(vocab: int, hidden: int, layers: int, seed: int, init: float) -> LlamaForCausalLM:
    cfg = LlamaConfig(**_settings(vocab, hidden, layers, init))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tokenizer():
    return _tokenizer()


@pytest.fixture(scope="module")
def model():
    # Seed and scale chosen so that greedy decoding of the prompts below covers every case:
    # EOS inside the prefix (one at the first token), snaps at various offsets, no snap.
    return _llama(len(VOCAB), hidden=32, layers=2, seed=5, init=0.5)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 9, (16,), generator=g)
    return [[BOS, *torch.randint(5, 48, (int(n),), generator=g).tolist()] for n in lengths]


def _two_phase(tokenizer, **kw) -> TransformersTwoPhase:
    args = dict(
        tau=6,
        snap_window=5,
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
        snap_token_ids=[3, 4],
        max_completion_length=24,
    )
    args.update(kw)
    return TransformersTwoPhase(**args)


# ----------------------------------------------------------------------------- snapping rule


def _snap_reference(row, tau, window, snap, eos):
    """The rule of snap_cut written as a plain scan over one row."""
    for t, tok in enumerate(row):
        if tok in eos:
            return t + 1, True
        if snap and t >= tau - 1 and tok in snap:
            return t + 1, False
        if t + 1 == (tau + window if snap else tau):
            return t + 1, False
    return len(row), False


@given(
    st.integers(1, 6),
    st.integers(0, 4),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_snap_cut_matches_a_plain_scan(tau, window, rows, seed, with_snap):
    n = tau + window
    gen = np.random.default_rng(seed).integers(0, 6, size=(rows, n))
    snap = {3, 4} if with_snap else set()
    lengths, ended = snap_cut(
        torch.as_tensor(gen),
        tau=tau,
        snap_window=window,
        snap_token_ids=torch.tensor(sorted(snap), dtype=torch.long),
        eos_token_ids=torch.tensor([2]),
    )
    ref = [_snap_reference(r.tolist(), tau, window, snap, {2}) for r in gen]
    assert lengths.tolist() == [L for L, _ in ref]
    assert ended.tolist() == [e for _, e in ref]


def test_snap_token_ids_from_tokenizer(tokenizer):
    # newline, ".", and "end?" (ends with a delimiter); not "a.b", words or special tokens
    assert snap_token_ids_from_tokenizer(tokenizer) == [3, 4, 5]


def test_trim_after_eos_keeps_first_eos():
    assert trim_after_eos([7, 2, 9, 2], [2, 9]) == [7, 2]
    assert trim_after_eos([7, 8], [2]) == [7, 8]


# ----------------------------------------------------------------------------- exactness


@pytest.mark.parametrize(
    "selection",
    [
        [11, 0, 3, 8, 14],  # indices, out of order, a done row (3) and rows of every cut type
        "mask",
        [3],  # only a finished row: nothing to resume
    ],
)
def test_two_phase_equals_uninterrupted_greedy_generation(model, tokenizer, prompts, selection):
    tp = _two_phase(tokenizer)
    full = tp.generate_full(model, prompts)
    res = tp.generate_prefixes(model, prompts)
    lengths = res.prefix_lengths
    done = res.prefix_done.numpy()
    # The prompts exercise every branch: EOS in the prefix, a snap before the end of the
    # window, no snap (cut at tau + window), and left padding (prompt lengths differ).
    assert done.any() and (~done).any()
    assert ((lengths >= tp.tau) & (lengths < tp.tau + tp.snap_window) & ~done).any()
    assert ((lengths == tp.tau + tp.snap_window) & ~done).any()
    assert len({len(p) for p in prompts}) > 3
    for i, p in enumerate(res.prefix_ids):
        assert p == full[i][: len(p)]
        assert done[i] == (p[-1] == EOS)
    if selection == "mask":
        mask = np.zeros(len(prompts), dtype=bool)
        mask[[1, 4, 5, 9, 12, 15]] = True
        idx = list(np.flatnonzero(mask))
        out = tp.continue_selected(model, res, torch.as_tensor(mask))
    else:
        idx = selection
        out = tp.continue_selected(model, res, selection)
    assert len(idx) < len(prompts)
    assert out == [full[i] for i in idx]


def test_phase_two_reuses_the_cache_instead_of_prefilling(model, tokenizer, prompts):
    # Every forward pass of phase 2 feeds one token per row: prompt and prefix come from the
    # phase-1 cache (a re-prefill would feed the whole prompt + prefix first).
    tp = _two_phase(tokenizer)
    res = tp.generate_prefixes(model, prompts)
    widths = []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        widths.append(ids.shape)

    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        sel = np.flatnonzero(~res.prefix_done.numpy())[:5].tolist()
        out = tp.continue_selected(model, res, sel)
    finally:
        handle.remove()
    # One pass per suffix token of the longest-running row; pass t feeds one token for each
    # row still running (a row leaves the batch the step it ends).
    suffix = [len(o) - len(res.prefix_ids[i]) for o, i in zip(out, sel)]
    assert len(set(suffix)) > 1  # rows end at different steps: the drop is exercised
    assert widths == [(sum(n > t for n in suffix), 1) for t in range(max(suffix))]


def test_two_phase_without_snap_tokens_cuts_at_tau(model, tokenizer, prompts):
    tp = _two_phase(tokenizer, snap_token_ids=None, tau=5)
    full = tp.generate_full(model, prompts)
    res = tp.generate_prefixes(model, prompts)
    done = res.prefix_done.numpy()
    assert (res.prefix_lengths[~done] == 5).all()
    out = tp.continue_selected(model, res, np.arange(len(prompts)))
    assert out == full


def test_prefix_reaching_max_length_is_done(model, tokenizer, prompts):
    tp = _two_phase(tokenizer, tau=6, snap_window=5, max_completion_length=7)
    full = tp.generate_full(model, prompts)
    res = tp.generate_prefixes(model, prompts)
    assert (res.prefix_lengths <= 7).all()
    assert res.prefix_done.numpy()[res.prefix_lengths == 7].all()
    assert tp.continue_selected(model, res, np.arange(len(prompts))) == full


def test_sampled_prefix_is_the_start_of_the_same_seed_full_sample(model, tokenizer, prompts):
    # Phase 1 consumes the random stream exactly as an uninterrupted `generate` sample does, so
    # with the same seed its prefixes are the first tokens of the full samples. (The reference
    # is `generate` itself: dropping finished rows draws the same distribution from another
    # stream, checked in tests/rollout/test_decode.py.)
    cfg = GenerationConfig(do_sample=True, temperature=1.3, top_k=0, top_p=1.0)
    tp = _two_phase(tokenizer, generation_config=cfg)
    reference = _two_phase(tokenizer, generation_config=cfg, drop_finished_rows=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        full = reference.generate_full(model, prompts)
        torch.manual_seed(7)
        res = tp.generate_prefixes(model, prompts)
    for p, f in zip(res.prefix_ids, full):
        assert p == f[: len(p)]
    assert len({tuple(f) for f in full}) == len(prompts)


@pytest.mark.parametrize("two_phase", [True, False], ids=["two-phase", "single-phase"])
def test_sampled_completions_follow_the_policy_distribution(two_phase):
    # Exact completion probabilities by enumerating every token sequence (6 tokens, length 4)
    # against 4000 two-phase samples. Snapping (tau = 1, window 2) makes the cut depend on the
    # sampled tokens; a cut that fell back to tau when the window had no delimiter would be
    # biased, and this test rejects that variant with p ~ 1e-17 at this sample size.
    vocab, max_len, n = 6, 4, 4000
    tiny = _llama(vocab, hidden=16, layers=1, seed=0, init=0.8)
    seqs = torch.tensor(list(itertools.product(range(vocab), repeat=max_len)))
    with torch.no_grad():
        inp = torch.cat([torch.full((len(seqs), 1), BOS), seqs], dim=1)
        logp = torch.log_softmax(tiny(inp).logits[:, :-1].double(), dim=-1)
    steps = logp.gather(2, seqs.unsqueeze(-1)).squeeze(-1).numpy()
    exact: dict[tuple[int, ...], float] = {}
    for s, lp in zip(seqs.tolist(), steps):
        c = tuple(trim_after_eos(s, [EOS]))
        exact.setdefault(c, float(np.exp(lp[: len(c)].sum())))
    assert sum(exact.values()) == pytest.approx(1.0, abs=1e-12)

    tp = TransformersTwoPhase(
        tau=1,
        snap_window=2,
        eos_token_ids=[EOS],
        pad_token_id=PAD,
        snap_token_ids=[3],
        max_completion_length=max_len,
        generation_config=GenerationConfig(do_sample=True, top_k=0, top_p=1.0),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        if two_phase:
            res = tp.generate_prefixes(tiny, [[BOS]] * n)
            out = tp.continue_selected(tiny, res, np.ones(n, dtype=bool))
        else:  # generate_full drops each row from the batch at its end
            out = tp.generate_full(tiny, [[BOS]] * n)
    keys = list(exact)
    where = {k: i for i, k in enumerate(keys)}
    counts = np.bincount([where[tuple(o)] for o in out], minlength=len(keys))
    expected = n * np.array([exact[k] for k in keys])
    big = expected >= 5  # pool the rare completions into one cell
    obs = np.r_[counts[big], counts[~big].sum()]
    exp = np.r_[expected[big], expected[~big].sum()]
    assert big.sum() > 20
    assert stats.chisquare(obs, exp).pvalue > 1e-3


# ----------------------------------------------------------------------------- features


def _features_one_row(model, prompt, prefix, window):
    # Independent reference: one unpadded sequence, default positions, plain mean.
    with torch.no_grad():
        out = model(torch.tensor([prompt + prefix]), output_hidden_states=True)
    w = min(window, len(prefix))
    return out.hidden_states[-1][0, -w:].mean(dim=0)


@pytest.mark.parametrize("window", [16, 3])
def test_features_equal_a_no_grad_forward(model, tokenizer, prompts, window):
    tp = _two_phase(tokenizer, feature_window=window)
    res = tp.generate_prefixes(model, prompts)
    assert res.features.dtype == torch.float32 and not res.features.requires_grad
    assert res.features.shape == (len(prompts), model.config.hidden_size)
    # both prefixes shorter than the window (fewer states averaged) and longer ones
    assert (res.prefix_lengths < window).any()
    assert (res.prefix_lengths > window).any() or window == 16
    ref = torch.stack(
        [
            _features_one_row(model, p, q, window)
            for p, q in zip(prompts, res.prefix_ids, strict=True)
        ]
    )
    batched = prefix_features(
        model, prompts, res.prefix_ids, window=window, pad_token_id=PAD, batch_size=5
    )
    torch.testing.assert_close(res.features, ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(batched, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("window", [16, 3])
def test_features_of_repeated_prompts_equal_a_no_grad_forward(model, tokenizer, prompts, window):
    # GRPO rows repeat each prompt: prefix_features then computes each prompt once and expands
    # its cache (transformers' DynamicCache API, checked here at the lowest supported version
    # too by make test-lower).
    tp = _two_phase(tokenizer, feature_window=window)
    grouped = [p for p in prompts for _ in range(3)]
    res = tp.generate_prefixes(model, grouped)
    ref = torch.stack(
        [
            _features_one_row(model, p, q, window)
            for p, q in zip(grouped, res.prefix_ids, strict=True)
        ]
    )
    shared = prefix_features(model, grouped, res.prefix_ids, window=window, pad_token_id=PAD)
    full = prefix_features(
        model, grouped, res.prefix_ids, window=window, pad_token_id=PAD, share_prompts=False
    )
    torch.testing.assert_close(shared, ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(shared, full, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- bad input


def test_continue_twice_raises(model, tokenizer, prompts):
    tp = _two_phase(tokenizer)
    res = tp.generate_prefixes(model, prompts[:4])
    tp.continue_selected(model, res, [0])
    with pytest.raises(ValueError, match="already consumed"):
        tp.continue_selected(model, res, [1])


@pytest.mark.parametrize(
    ("selected", "match"),
    [
        ([0, 4], r"must lie in \[0, 4\)"),
        ([1, 1], "distinct"),
        (np.ones(3, dtype=bool), r"shape \(4,\)"),
        ([0.5], "bool mask"),
    ],
)
def test_bad_selection_raises(model, tokenizer, prompts, selected, match):
    tp = _two_phase(tokenizer)
    res = tp.generate_prefixes(model, prompts[:4])
    with pytest.raises(ValueError, match=match):
        tp.continue_selected(model, res, selected)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"tau": 0}, "tau must be a positive"),
        ({"snap_window": -1}, "snap_window must be >= 0"),
        ({"feature_window": 0}, "feature_window must be >= 1"),
        ({"eos_token_ids": []}, "eos_token_ids must name at least one"),
        ({"max_completion_length": None}, "max_completion_length must be a positive"),
    ],
)
def test_bad_constructor_arguments_raise(tokenizer, kw, match):
    with pytest.raises(ValueError, match=match):
        _two_phase(tokenizer, **kw)


def test_empty_prompt_raises(model, tokenizer):
    with pytest.raises(ValueError, match=r"prompt_ids\[1\] is empty"):
        _two_phase(tokenizer).generate_prefixes(model, [[BOS], []])


def test_disabled_kv_cache_raises_a_clear_error(tokenizer):
    # Gradient checkpointing in train mode makes transformers drop the cache.
    m = _llama(len(VOCAB), hidden=32, layers=2, seed=5, init=0.5)
    enable = getattr(m, "activation_checkpointing_enable", None) or m.gradient_checkpointing_enable
    enable()
    m.train()
    with pytest.raises(RuntimeError, match="KV cache was disabled"):
        _two_phase(tokenizer).generate_prefixes(m, [[BOS, 9], [BOS]])


def test_sliding_window_models_are_refused(tokenizer):
    from transformers import MistralConfig, MistralForCausalLM

    # the tiny decoder of the other tests, with a sliding window on its attention
    cfg = MistralConfig(**_settings(len(VOCAB), hidden=16, layers=1, init=0.02),
                        sliding_window=8)
    m = MistralForCausalLM(cfg).eval()
    with pytest.raises(NotImplementedError, match="DynamicSlidingWindowLayer"):
        _two_phase(tokenizer).generate_prefixes(m, [[BOS, 9]])
