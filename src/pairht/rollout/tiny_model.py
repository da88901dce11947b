"""A randomly initialised tiny Llama: the policy of the toy tasks and of the backend tests.

One builder for every tiny checkpoint the project makes (:func:`pairht.demo.toy.make_model`,
:func:`pairht.vllm.testing.save_tiny_llama`), so that a model is the same function of its
settings and seed wherever it is built. Needs torch and transformers (imported on call).
"""

from __future__ import annotations

from typing import Any

__all__ = ["tiny_llama"]


def tiny_llama(
    tokenizer: Any,
    *,
    vocab_size: int | None = None,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 128,
    max_positions: int = 64,
    tie_word_embeddings: bool = True,
    init_std: float | None = None,
    seed: int = 0,
) -> Any:
    """A random-init ``LlamaForCausalLM`` for ``tokenizer``, deterministic in ``seed``.

    ``pad`` and ``eos`` ids come from ``tokenizer`` (``bos = eos``); ``vocab_size`` defaults to
    ``len(tokenizer)``; ``num_key_value_heads = num_heads``; ``init_std`` is the config's
    ``initializer_range`` (transformers' default 0.02 when None). The initialisation draws from
    a forked torch RNG, so the caller's random state is left as it was.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    extra: dict[str, Any] = {} if init_std is None else {"initializer_range": init_std}
    cfg = LlamaConfig(
        vocab_size=len(tokenizer) if vocab_size is None else vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        **extra,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(cfg)
