"""One generation batch through the real TRL trainer (``PairGRPOTrainer``, main environment),
the input and output of its advantage step kept as a fixture for the verl suite.

verl and TRL cannot share an environment (their transformers ranges are disjoint), so the TRL
side runs here and is stored in ``data/trl_batch_<rule>.npz``; ``.venv-verl`` feeds the same
plan and rewards through the verl adapter and compares (test_advantage.py). In the main
environment ``test_trl_fixture.py`` reruns this and compares with the stored file, so a change
of the TRL trainer's advantages cannot leave a stale fixture behind.

Regenerate: ``PYTHONPATH=src:tests/trl .venv/bin/python tests/verl/trl_batch.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data"
#: the rules stored: PAIR's program (pair-HT estimator) and Neyman's (difference estimator)
RULES = ("pair", "pair_dr")
KEYS = ("rewards", "mask", "joint", "pi", "p_hat", "prefix_done", "advantages")


def trl_batch(tmp_path: Path, rule: str) -> dict[str, np.ndarray]:
    """The trainer's logged plan, rewards and advantages of one batch (float64, unstandardised)."""
    import torch
    from pair_helpers import make_trainer, scored_batch, use_float64_logprobs

    n_prompts, g = 3, 6
    trainer = make_trainer(tmp_path, double=True, num_generations=g,
                           per_device_train_batch_size=n_prompts * g, allocator=rule,
                           drop_unselected_rows=False, scale_rewards="none")
    # varied predictions, so pi differs across candidates (as tests/trl/test_trainer_exact.py)
    trainer.head_trainer.head = "mlp"
    gen = torch.Generator().manual_seed(0)
    for head in (trainer.head_trainer.heads.success, trainer.head_trainer.heads.cost):
        with torch.no_grad():
            head[-1].weight.copy_(2.0 * torch.randn(head[-1].weight.shape, generator=gen,
                                                    dtype=head[-1].weight.dtype))
    use_float64_logprobs(trainer)
    scored_batch(trainer, n_prompts)
    d = trainer.last_draw
    return {"rewards": d.rewards, "mask": d.mask, "joint": d.joint, "pi": d.pi,
            "p_hat": d.p_hat, "prefix_done": d.prefix_done, "advantages": d.advantages}


def load(rule: str) -> dict[str, np.ndarray]:
    with np.load(DATA / f"trl_batch_{rule}.npz") as f:
        return {k: f[k] for k in KEYS}


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(Path(__file__).parents[1] / "trl"))
    DATA.mkdir(exist_ok=True)
    for rule in RULES:
        with tempfile.TemporaryDirectory() as tmp:
            batch = trl_batch(Path(tmp), rule)
        np.savez(DATA / f"trl_batch_{rule}.npz", **batch)
        print(rule, {k: v.shape for k, v in batch.items()})
