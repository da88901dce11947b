"""The per-prompt history the prompt-level comparators plan from is saved with every
checkpoint (``pair_state.pt``) and restored on resume."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch
from pair_helpers import make_trainer

from pairht.trl.trainer import PAIR_STATE_FILE


def test_the_prompt_history_is_checkpointed_and_restored_on_resume(tmp_path):
    opts = dict(allocator="hora", max_steps=2, n_prompts=2, save_strategy="steps", save_steps=1)
    full = make_trainer(tmp_path / "full", **opts)
    full.train()
    ckpt = tmp_path / "full" / "checkpoint-1"
    saved = torch.load(ckpt / PAIR_STATE_FILE, weights_only=False)["prompt_history"]
    first = full.draw_history[0]["mask"].sum()
    assert sum(t for _, t in saved["counts"].values()) == first  # step 1's observations
    resumed = make_trainer(tmp_path / "resumed", **opts)
    resumed.train(resume_from_checkpoint=str(ckpt))
    # the resumed store holds the checkpoint's visit plus its own step 2 (a fresh history would
    # hold step 2's alone); generation after resume need not repeat the first run's
    got = resumed.prompt_history.state_dict()["counts"]
    assert sorted(got) == sorted(saved["counts"])
    second = resumed.draw_history[0]["mask"].sum()
    assert sum(t for _, t in got.values()) == first + second
    for key, (s, t) in saved["counts"].items():
        assert got[key][1] >= t and got[key][0] >= s - 1e-12
