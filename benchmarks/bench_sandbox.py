"""Throughput of the code sandbox against plain ``subprocess.run``, measured in the same run.

A batch of N short correct programs (each: read two integers, print their sum), one stdin
test each, scored

* sandboxed: ``CodeVerifier`` (namespaces, private uid, rlimits, seccomp, tmpfs workdir,
  output comparison), ``--workers`` runs in flight;
* plain: ``subprocess.run([python, "-I", "-c", program], input=...)`` with the same number of
  threads and the same output comparison, no confinement at all.

Prints programs per second for both and their ratio (sandbox / plain). The two are run
alternately ``--repeat`` times and the best time of each is kept, so a load change on a
shared machine hits both alike.

    python benchmarks/bench_sandbox.py [--n 256] [--workers 2] [--repeat 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from pairht.verifiers import CodeVerifier, outputs_match, sandbox_capabilities


def _batch(n: int) -> tuple[list[str], list[dict]]:
    programs = [f"a, b = map(int, input().split())\nprint(a + b + {i} - {i})\n" for i in range(n)]
    tests = [{"inputs": [f"{i} {2 * i}\n"], "outputs": [f"{3 * i}\n"]} for i in range(n)]
    return programs, tests


def _plain(program: str, test: dict) -> bool:
    out = subprocess.run([sys.executable, "-I", "-c", program], input=test["inputs"][0],
                         capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and outputs_match(out.stdout, test["outputs"][0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    caps = sandbox_capabilities()  # probe outside the timed region
    programs, tests = _batch(args.n)

    t_box = t_plain = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        results = CodeVerifier(max_workers=args.workers)(programs, tests)
        t_box = min(t_box, time.perf_counter() - t0)
        assert all(r.passed for r in results), "a correct program failed in the sandbox"

        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as pool:
            ok = list(pool.map(_plain, programs, tests))
        t_plain = min(t_plain, time.perf_counter() - t0)
        assert all(ok)

    print(f"sandbox mechanisms: {', '.join(caps['mechanisms'])}")
    print(f"programs: {args.n}, workers: {args.workers}, best of {args.repeat}")
    print(f"sandboxed : {args.n / t_box:8.1f} programs/s  ({t_box:.2f} s)")
    print(f"plain run : {args.n / t_plain:8.1f} programs/s  ({t_plain:.2f} s)")
    print(f"ratio sandbox/plain throughput: {t_plain / t_box:.2f}")


if __name__ == "__main__":
    main()
