"""ConditionalPoisson inclusion probabilities: speed and accuracy against cps-sampling.

Run ``python benchmarks/bench_designs.py``. For N = 16, 64, 256 it times, in the same run,

* pairht ``ConditionalPoisson(pi)`` (calibration to 1e-15) and ``.joint()``;
* cps-sampling (PyPI ``cps-sampling``) ``ConditionalPoisson(pi, n).joint_inclusion()`` (its
  fixed-point calibration, stopped at an L1 change of 0.01), and its ``joint_inclusion(p, n)``
  given pairht's exact working probabilities ``p = w / (1 + w)`` (the joint step alone);
* pairht ``.inclusion`` of order 3 and 4 on batches (cps-sampling has no order 3 or 4).

Errors are max absolute differences from pairht's values, which the test-suite checks
against enumeration, a 50-digit computation and the fixed-size identities. For N = 16 the
pairht joint is also compared with the enumerated support here.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from pairht.designs import ConditionalPoisson


def _best(fn, repeat: int = 5) -> float:
    """Best wall time of ``repeat`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _pi(n_units: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pi = rng.uniform(0.02, 0.98, n_units)
    pi *= round(n_units / 2) / pi.sum()  # mean 1/2, so pi stays below 1 for these draws
    return pi


def _sets(n_units: int, k: int, count: int, rng: np.random.Generator) -> np.ndarray:
    if math.comb(n_units, k) <= count:
        return np.array(list(itertools.combinations(range(n_units), k)), dtype=np.int64)
    return np.sort(np.stack([rng.choice(n_units, k, replace=False) for _ in range(count)]), 1)


def main() -> None:
    import cps_sampling

    print(f"{'N':>4} {'what':<34} {'pairht s':>10} {'cps s':>10} {'ratio':>7} {'cps err':>9}")
    rng = np.random.default_rng(0)
    for n_units in (16, 64, 256):
        pi = _pi(n_units, seed=n_units)
        n = round(float(pi.sum()))
        ours = ConditionalPoisson(pi)
        exact = ours.joint()
        if n_units <= 16:
            masks, probs = ours.support()
            m = masks.astype(np.float64)
            err = np.max(np.abs((m * probs[:, None]).T @ m - exact))
            print(f"{n_units:>4} pairht joint vs enumeration: max abs diff {err:.2e}")

        def cps_full(pi=pi, n=n):
            return cps_sampling.ConditionalPoisson(pi, n).joint_inclusion()

        t_ours = _best(lambda pi=pi: ConditionalPoisson(pi).joint())
        t_cps = _best(cps_full)
        full = cps_full()
        p_cps = cps_sampling.calibrate(pi)
        first = cps_sampling.inclusion_from_matrix(cps_sampling.draw_matrix(p_cps, n))
        print(
            f"{n_units:>4} {'calibrate + joint':<34} {t_ours:>10.4g} {t_cps:>10.4g} "
            f"{t_cps / t_ours:>7.2f} {np.max(np.abs(full - exact)):>9.2e}"
            f"   (cps first-order err {np.max(np.abs(first - pi)):.2e})"
        )
        w = ours.working_weights
        p = w / (1.0 + w)
        t_ours = _best(ours.joint)
        t_cps = _best(lambda p=p, n=n: cps_sampling.joint_inclusion(p, n))
        err = np.max(np.abs(cps_sampling.joint_inclusion(p, n) - exact))
        print(
            f"{n_units:>4} {'joint given working weights':<34} {t_ours:>10.4g} {t_cps:>10.4g} "
            f"{t_cps / t_ours:>7.2f} {err:>9.2e}"
        )
        for k in (3, 4):
            sets = _sets(n_units, k, 1000, rng)
            t = _best(lambda sets=sets, d=ours: d.inclusion(sets))
            print(f"{n_units:>4} {f'inclusion order {k}, {len(sets)} sets':<34} {t:>10.4g}")
    # the estimators' exact covariance: order-4 sets from all edge pairs at G = 64
    ours = ConditionalPoisson(_pi(64, seed=64))
    quads = _sets(64, 4, 10**6, rng)
    t = _best(lambda: ours.inclusion(quads), repeat=1)
    print(f"  64 {f'inclusion order 4, {len(quads)} sets':<34} {t:>10.4g}")


if __name__ == "__main__":
    main()
