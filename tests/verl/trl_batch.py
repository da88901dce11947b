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
#: the cases stored (rule, width): PAIR's program (pair-HT estimator) and Neyman's (difference
#: estimator), with prefixes for every candidate and for a subset of 4 of 6
CASES = (("pair", "prefixes"), ("pair_dr", "prefixes"), ("pair", "subset"))


def _name(rule: str, width: str) -> str:
    return f"trl_batch_{rule}_{width}.npz"


def trl_batch(tmp_path: Path, rule: str, width: str) -> dict[str, np.ndarray]:
    """One batch of the trainer: its plan's rows (``row_<field>``, plan order), the rewards and
    the advantages it handed TRL's loss, ``(B, G)`` (float64 model, unstandardised)."""
    import torch
    from pair_helpers import make_trainer, scored_batch, use_float64_logprobs

    n_prompts, g = 3, 6
    sizes = {"prefix_group_size": 4} if width == "subset" else {}
    trainer = make_trainer(tmp_path, double=True, num_generations=g,
                           per_device_train_batch_size=n_prompts * g, allocator=rule,
                           width=width, drop_unselected_rows=False, scale_rewards="none",
                           **sizes)
    # varied predictions, so pi differs across candidates (as tests/trl/test_trainer_exact.py)
    trainer.head_trainer.head = "mlp"
    gen = torch.Generator().manual_seed(0)
    for head in (trainer.head_trainer.heads.success, trainer.head_trainer.heads.cost):
        with torch.no_grad():
            head[-1].weight.copy_(2.0 * torch.randn(head[-1].weight.shape, generator=gen,
                                                    dtype=head[-1].weight.dtype))
    use_float64_logprobs(trainer)
    out = scored_batch(trainer, n_prompts)
    d = trainer.last_draw
    rows = {f"row_{k}": (v.astype(str) if v.dtype == object else v)
            for k, v in d.plan.as_rows().items()}
    return {**rows, "rewards": d.rewards,
            "advantages": out["advantages"].detach().double().numpy().reshape(n_prompts, g)}


def load(rule: str, width: str) -> dict[str, np.ndarray]:
    with np.load(DATA / _name(rule, width)) as f:
        return {k: f[k] for k in f.files}


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(Path(__file__).parents[1] / "trl"))
    DATA.mkdir(exist_ok=True)
    for old in DATA.glob("trl_batch_*.npz"):
        old.unlink()
    for rule, width in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            batch = trl_batch(Path(tmp), rule, width)
        np.savez(DATA / _name(rule, width), **batch)
        print(rule, width, {k: v.shape for k, v in batch.items()})
