r"""What a decode step of the demo's tiny policy costs per batch size: when fewer rows save time.

PAIR continues a subset of the candidates, so its phase 2 decodes fewer rows per step than
GRPO's generation; that saves time only where a decode step's cost grows with its rows. This
prints the CPU milliseconds per decode step of the demo's policy (``pairht_demo.toy``, chain
vocabulary, one torch thread, ``model.generate`` with sampling, 64 new tokens) at 16-256
rows, and the cost of half the rows relative to all of them::

    python benchmarks/bench_decode_rows.py
"""

from __future__ import annotations

import time


def main() -> int:
    import torch

    from pairht_demo import toy
    from pairht_demo.chain import CHAIN_LONG_TASK

    torch.set_num_threads(1)
    model = toy.make_model(0, toy.ToyModelConfig(max_positions=160), CHAIN_LONG_TASK).eval()
    new = 64
    ms = {}
    for rows in (16, 32, 64, 128, 256):
        ids = torch.full((rows, 10), 5)
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                               min_new_tokens=new, do_sample=True)
            best = min(best, time.process_time() - t0)
        ms[rows] = 1000 * best / new
    print("| rows | CPU ms per decode step | half the rows costs |")
    print("|---|---|---|")
    for rows, t in ms.items():
        half = f"{ms[rows // 2] / t:.2f}x" if rows // 2 in ms else ""
        print(f"| {rows} | {t:.2f} | {half} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
