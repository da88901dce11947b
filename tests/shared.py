"""Helpers several test folders share (importable as ``shared``: ``tests/`` is on the path of
every test, as for ``tiny_llama``): peak memory of a call, and the support of the small
designs the tests write out by hand, independent of ``pairht.designs``."""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np


def peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes Python allocated while ``fn()`` ran (``tracemalloc``; numpy's buffers count)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def srswor_support(finished: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every sample of SRSWOR of ``k`` unfinished candidates, the finished ones always in, and
    its probability ``1 / C(U, k)``: masks ``(C(U, k), G)``, probs ``(C(U, k),)``."""
    fin = np.asarray(finished, dtype=bool)
    masks = []
    for chosen in itertools.combinations(np.flatnonzero(~fin), k):
        m = fin.copy()
        m[list(chosen)] = True
        masks.append(m)
    return np.array(masks), np.full(len(masks), 1.0 / len(masks))


def bernoulli_support(pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every sample of independent Bernoulli(``pi_i``) draws with positive probability."""
    p = np.asarray(pi, dtype=float)
    masks = np.array(list(itertools.product([False, True], repeat=p.size)))
    probs = np.prod(np.where(masks, p, 1.0 - p), axis=1)
    return masks[probs > 0], probs[probs > 0]
