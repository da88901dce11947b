"""The tiny Llama's one record of settings: every caller's model is the spec with its overrides.

Each builder is compared with a ``LlamaForCausalLM`` built here straight from transformers'
``LlamaConfig`` with the caller's settings written out, so a spec that lost or changed a
default fails.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from pairht.demo import toy
from pairht.rollout.tiny_model import TinyLlamaSpec, tiny_llama
from pairht.vllm.testing import save_tiny_llama


def _direct(tok, seed, *, vocab, hidden, layers, heads, inter, positions, tie, std=None):
    extra = {} if std is None else {"initializer_range": std}
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=heads, max_position_embeddings=positions,
                      tie_word_embeddings=tie, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id, **extra)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


def _same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_toy_model_is_the_default_spec():
    tok = toy.make_tokenizer()
    want = _direct(tok, 3, vocab=len(toy.TOY_TASK.words), hidden=64, layers=2, heads=4,
                   inter=128, positions=64, tie=True)
    assert toy.ToyModelConfig is TinyLlamaSpec
    assert _same_weights(toy.make_model(3), want)


def test_keyword_settings_override_the_spec():
    tok = toy.make_tokenizer()
    want = _direct(tok, 1, vocab=len(tok), hidden=32, layers=1, heads=2, inter=64,
                   positions=64, tie=True)
    spec = TinyLlamaSpec(hidden_size=48, intermediate_size=64)
    assert _same_weights(tiny_llama(tok, spec, seed=1, hidden_size=32, num_layers=1,
                                    num_heads=2), want)


def test_save_tiny_llama_writes_the_cpu_spec(tmp_path):
    tok = toy.make_tokenizer()
    want = _direct(tok, 6, vocab=len(tok), hidden=64, layers=2, heads=2, inter=128,
                   positions=256, tie=False, std=0.5)
    folder = save_tiny_llama(tmp_path, tok, seed=6)
    got = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    assert _same_weights(got, want)


def test_save_tiny_llama_refuses_a_small_head_dimension(tmp_path):
    with pytest.raises(ValueError, match=r"hidden_size / num_heads must be an integer >= 32.*"
                                         r"hidden_size=64, num_heads=4"):
        save_tiny_llama(tmp_path, toy.make_tokenizer(), num_heads=4)


def test_unknown_setting_is_refused():
    with pytest.raises(TypeError, match="num_experts"):
        tiny_llama(toy.make_tokenizer(), num_experts=2)
