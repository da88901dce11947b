"""A randomly initialised tiny Llama: the policy of the toy tasks and of the backend tests.

One builder for every tiny checkpoint the project makes (:func:`pairht.demo.toy.make_model`,
:func:`pairht.vllm.testing.save_tiny_llama`), and one record of its settings
(:class:`TinyLlamaSpec`), so that a model is the same function of its settings and seed
wherever it is built. Needs torch and transformers (imported on call).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["TinyLlamaSpec", "tiny_llama"]


@dataclasses.dataclass(frozen=True)
class TinyLlamaSpec:
    """Size and initialisation of a tiny ``LlamaForCausalLM``; defaults train in seconds on CPU.

    ``num_key_value_heads = num_heads``; ``init_std`` is the config's ``initializer_range``
    (transformers' default 0.02 when None). A caller with other defaults states them as
    overrides, ``dataclasses.replace(TinyLlamaSpec(), num_heads=2)``.

    Examples
    --------
    >>> TinyLlamaSpec(num_layers=1).num_layers, TinyLlamaSpec().hidden_size
    (1, 64)
    """

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_positions: int = 64
    tie_word_embeddings: bool = True
    init_std: float | None = None


def tiny_llama(
    tokenizer: Any,
    spec: TinyLlamaSpec | None = None,
    *,
    vocab_size: int | None = None,
    seed: int = 0,
    **settings: Any,
) -> Any:
    """A random-init ``LlamaForCausalLM`` for ``tokenizer``, deterministic in ``seed``.

    The model's settings are ``spec`` (default :class:`TinyLlamaSpec`) with the fields named in
    ``settings`` replaced (``tiny_llama(tok, num_layers=1)``). ``pad`` and ``eos`` ids come from
    ``tokenizer`` (``bos = eos``); ``vocab_size`` defaults to ``len(tokenizer)``. The
    initialisation draws from a forked torch RNG, so the caller's random state is left as it
    was.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    s = dataclasses.replace(spec or TinyLlamaSpec(), **settings)
    extra: dict[str, Any] = {} if s.init_std is None else {"initializer_range": s.init_std}
    cfg = LlamaConfig(
        vocab_size=len(tokenizer) if vocab_size is None else vocab_size,
        hidden_size=s.hidden_size,
        intermediate_size=s.intermediate_size,
        num_hidden_layers=s.num_layers,
        num_attention_heads=s.num_heads,
        num_key_value_heads=s.num_heads,
        max_position_embeddings=s.max_positions,
        tie_word_embeddings=s.tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        **extra,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(cfg)
