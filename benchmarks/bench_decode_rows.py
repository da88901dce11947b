r"""What a decode step of the demo's tiny policy costs per batch size: when fewer rows save time.

PAIR continues a subset of the candidates, so its phase 2 decodes fewer rows per step than
GRPO's generation; that saves time only where a decode step's cost grows with its rows. This
prints the CPU milliseconds per decode step of the demo's policy (``pairht.demo.toy``, chain
vocabulary, one torch thread, ``model.generate`` with sampling, 64 new tokens) at 16-256
rows, and the cost of half the rows relative to all of them::

    python benchmarks/bench_decode_rows.py
"""

from __future__ import annotations

import time


def main() -> int:
    import torch

    from pairht.demo import toy
    from pairht.demo.chain import CHAIN_LONG_TASK

    torch.set_num_threads(1)
    model = toy.make_model(0, toy.ToyModelConfig(max_positions=160), CHAIN_LONG_TASK).eval()
    new = 64
    sizes = (16, 32, 64, 128, 256)
    best = dict.fromkeys(sizes, float("inf"))
    # Sizes interleaved within each of 7 rounds, the least CPU time kept: drift in the
    # machine's speed then touches every size alike (single runs varied by 10-20 % here).
    for _ in range(7):
        for rows in sizes:
            ids = torch.full((rows, 10), 5)
            t0 = time.process_time()
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                               min_new_tokens=new, do_sample=True)
            best[rows] = min(best[rows], time.process_time() - t0)
    ms = {rows: 1000 * t / new for rows, t in best.items()}
    print("| rows | CPU ms per decode step | half the rows costs |")
    print("|---|---|---|")
    for rows, t in ms.items():
        half = f"{ms[rows // 2] / t:.2f}x" if rows // 2 in ms else ""
        print(f"| {rows} | {t:.2f} | {half} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
