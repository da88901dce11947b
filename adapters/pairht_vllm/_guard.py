"""The import guard: vLLM is an optional, GPU-only dependency (``pip install 'pairht[vllm]'``)."""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

#: The vLLM releases this adapter was written and reviewed against (see docs/trl.md).
SUPPORTED_VLLM = ">=0.31,<0.34"
_LOW, _HIGH = (0, 31), (0, 34)

INSTALL_HINT = (
    "pairht_vllm needs vLLM (GPU only): pip install 'pairht[vllm]' "
    f"(vllm{SUPPORTED_VLLM}, with trl[vllm] for server mode)"
)


def require_vllm() -> ModuleType:
    """Return the ``vllm`` module, or raise ``ImportError`` telling how to install it.

    A vLLM outside ``>=0.31,<0.34`` is used with a ``UserWarning`` (the APIs this adapter calls,
    ``LLM.generate``, ``SamplingParams`` and ``vllm.inputs.TokensPrompt``, are stable across
    minor releases, but only that range was reviewed).
    """
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as exc:  # ModuleNotFoundError included
        raise ImportError(INSTALL_HINT) from exc
    version = getattr(vllm, "__version__", None)
    parsed = _parse(version) if isinstance(version, str) else None
    if parsed is not None and not _LOW <= parsed < _HIGH:
        warnings.warn(
            f"pairht_vllm was written against vllm{SUPPORTED_VLLM}; found vllm {version}",
            UserWarning,
            stacklevel=2,
        )
    return vllm


def _parse(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None
