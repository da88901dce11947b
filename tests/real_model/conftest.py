"""One SmolLM2 load for the whole real-model suite.

Loading the GGUF file costs about 40 s of CPU (the ``gguf`` reader parses the file's metadata
once for the tokenizer, once for the config and once for the weights), so the tests share one
dequantised model: ``test_smollm2.py`` uses it directly (every test there gives the weights back
as it found them) and ``test_smollm2_training.py`` trains a deep copy.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2_loaded():
    """``pairht.demo.smollm2.load_smollm2()``: the float32 model (eval mode, CPU) and tokenizer."""
    torch = pytest.importorskip("torch")
    from pairht.demo.smollm2 import load_smollm2

    torch.set_num_threads(1)
    return load_smollm2()
