"""Speed of the estimator core against references measured in the same run.

Run: ``python benchmarks/bench_estimators.py``. Prints, for each case, the time of the
library call, the time of its reference and their ratio:

1. ``pair_advantages`` for B = 128 groups of G = 16 and 64 candidates, against a plain
   per-pair Python loop over the observed edges (the paper's Algorithm 1 written literally).
2. ``design_covariance(...).trace`` for G = 16, d = 10^5, against the cost of the single
   ``(G, d) x (d, G)`` Gram product it cannot avoid (the floor); the aim is within 3x.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from pairht.designs import Bernoulli, ConditionalPoisson
from pairht.estimators import design_covariance, pair_advantages


def best_of(fn: Callable[[], object], repeat: int = 5, number: int = 1) -> float:
    """Smallest mean wall time of ``number`` calls over ``repeat`` rounds (seconds)."""
    fn()  # warm-up: numba compilation, caches
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def loop_advantages(r: np.ndarray, mask: np.ndarray, joint: np.ndarray) -> np.ndarray:
    """Reference: A_i += (r_i - r_j) / (2 M rho_ij) over observed pairs, one pair at a time."""
    b, g = r.shape
    m = g * (g - 1) / 2
    out = np.zeros((b, g))
    for k in range(b):
        for i in range(g):
            if not mask[k, i]:
                continue
            for j in range(i + 1, g):
                if mask[k, j]:
                    term = (r[k, i] - r[k, j]) / (2 * m * joint[k, i, j])
                    out[k, i] += term
                    out[k, j] -= term
    return out


def bench_advantages(rng: np.random.Generator) -> None:
    print("pair_advantages, B = 128 groups (float64)")
    for g in (16, 64):
        pi = rng.uniform(0.2, 1.0, (128, g))
        joint = pi[:, :, None] * pi[:, None, :]
        mask = rng.random((128, g)) < pi
        r = (rng.random((128, g)) < 0.5).astype(np.float64)
        ours = pair_advantages(r, mask, joint)
        ref = loop_advantages(r, mask, joint)
        assert np.allclose(ours, ref, rtol=1e-12, atol=1e-14)
        args = (r, mask, joint)
        t_vec = best_of(lambda a=args: pair_advantages(*a), repeat=7, number=5)
        t_loop = best_of(lambda a=args: loop_advantages(*a), repeat=3)
        print(
            f"  G = {g:3d}: vectorised {t_vec * 1e3:8.3f} ms   per-pair loop "
            f"{t_loop * 1e3:8.1f} ms   speed-up {t_loop / t_vec:7.1f}x"
        )


def bench_covariance(rng: np.random.Generator) -> None:
    g, d = 16, 100_000
    print(f"design_covariance(...).trace, G = {g}, d = {d:,} (floor: one Gram product)")
    r = (rng.random(g) < 0.5).astype(np.float64)
    s = rng.normal(size=(g, d))
    t_floor = best_of(lambda: s @ s.T, repeat=7, number=3)
    pi = rng.uniform(0.2, 0.8, g)
    pi *= 8.0 / pi.sum()
    designs = {"bernoulli": Bernoulli(pi), "conditional_poisson": ConditionalPoisson(pi)}
    print(f"  Gram product (floor)      {t_floor * 1e3:8.3f} ms")
    for name, design in designs.items():
        t = best_of(lambda d=design: design_covariance(r, s, d, full=False), repeat=7, number=3)
        print(f"  {name:25s} {t * 1e3:8.3f} ms   ratio to floor {t / t_floor:5.2f}x")
    # the general (order-4 inclusion) path at the largest G it is meant for
    g = 64
    r64 = (rng.random(g) < 0.5).astype(np.float64)
    pi64 = np.full(g, 0.25)
    cp = ConditionalPoisson(pi64)
    gram = np.eye(g)
    t64 = best_of(lambda: design_covariance(r64, None, cp, gram=gram), repeat=3)
    print(f"  conditional_poisson G = 64 (order-4 inclusions, gram given) {t64 * 1e3:8.1f} ms")


def main() -> None:
    rng = np.random.default_rng(0)
    bench_advantages(rng)
    bench_covariance(rng)


if __name__ == "__main__":
    main()
