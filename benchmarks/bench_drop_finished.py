r"""Decoding with finished rows dropped against ``generate``, on the demo's own policy.

``generate`` keeps a finished row in the batch until the longest row ends;
:func:`pairht.rollout.decode.decode_rows` (what ``TransformersTwoPhase`` and the demo's GRPO
arm decode with) removes it the step it ends. This times both on the long chains' warm-started
policy (``pairht.demo.chain``, 2-layer Llama of hidden 64, one torch thread, sampling at
temperature 1, completions of 64-124 tokens): ``single``, every row of 16 prompts x G = 8 to
the end (GRPO's generation); ``phase 2``, a uniform half of the rows resumed from their
``tau = 8`` prefixes (PAIR's continuation at budget ratio 0.5); ``no EOS``, half the rows
with an end token the policy never emits, so no row leaves early and the ratio is the loop's
own per-step cost against ``generate``'s. Both decoders alternate within
each round (the order swapped every round), process CPU time, the least of the rounds kept::

    python benchmarks/bench_drop_finished.py             # 5 rounds
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=16)
    args = ap.parse_args()

    import numpy as np
    import torch
    from transformers import GenerationConfig

    from pairht.demo import toy
    from pairht.demo.chain import CHAIN_LONG_TASK as task
    from pairht.demo.warm_cache import warm_model
    from pairht.rollout.transformers_backend import TransformersTwoPhase

    torch.set_num_threads(1)
    model = warm_model(task, 0, 1500, toy.ToyModelConfig(max_positions=160))
    tok = toy.make_tokenizer(task)
    rows = task.dataset(args.prompts, rng=0, split="train")
    prompts = [tok(r["prompt"])["input_ids"] for r in rows for _ in range(8)]
    common = dict(tau=8, snap_window=8, eos_token_ids=[tok.eos_token_id],
                  pad_token_id=tok.pad_token_id, snap_token_ids=[tok.convert_tokens_to_ids("\n")],
                  max_completion_length=task.max_new_tokens,
                  generation_config=GenerationConfig(do_sample=True, temperature=1.0, top_k=0,
                                                     top_p=1.0))
    backends = {drop: TransformersTwoPhase(**common, drop_finished_rows=drop)
                for drop in (False, True)}
    # No row can end early (EOS never emitted): the loop's own per-step cost against generate's.
    no_eos = {drop: TransformersTwoPhase(**{**common, "eos_token_ids": [len(tok) + 7]},
                                         drop_finished_rows=drop) for drop in (False, True)}
    best: dict[tuple[str, bool], float] = {}
    tokens: dict[tuple[str, bool], list[int]] = {}
    rng = np.random.default_rng(0)
    for r in range(args.rounds):
        for drop in ((False, True) if r % 2 == 0 else (True, False)):
            tp = backends[drop]
            torch.manual_seed(r)
            t0 = time.process_time()
            full = tp.generate_full(model, prompts)
            t1 = time.process_time()
            res = tp.generate_prefixes(model, prompts)
            sel = np.flatnonzero(rng.random(len(prompts)) < 0.5)
            t2 = time.process_time()
            out = tp.continue_selected(model, res, sel)
            t3 = time.process_time()
            long = no_eos[drop].generate_full(model, prompts[: len(prompts) // 2])
            t4 = time.process_time()
            for part, sec, n in (("single", t1 - t0, sum(map(len, full))),
                                 ("no EOS", t4 - t3, sum(map(len, long))),
                                 ("phase 2", t3 - t2, sum(len(o) - len(res.prefix_ids[i])
                                                          for o, i in zip(out, sel)))):
                best[part, drop] = min(best.get((part, drop), float("inf")), sec)
                tokens.setdefault((part, drop), []).append(n)
    print(f"| decode | generate CPU s | drop finished CPU s | drop / generate | tokens "
          f"(mean of {args.rounds}) |")
    print("|---|---|---|---|---|")
    for part, n_rows in (("single", len(prompts)), ("phase 2", len(prompts)),
                         ("no EOS", len(prompts) // 2)):
        g, d = best[part, False], best[part, True]
        print(f"| {part} ({n_rows} rows) | {g:.2f} | {d:.2f} | {d / g:.2f}x | "
              f"{np.mean(tokens[part, True]):.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
