"""The trainer feeds its heads the confidence features (head_confidence=True, the default)."""

from __future__ import annotations

import pytest
import torch
from pair_helpers import make_trainer

from pairht.rollout.contract import PrefixResult
from pairht.rollout.features import CONFIDENCE_FEATURES


def _prefix(confidence):
    return PrefixResult(prefix_ids=[[5], [6]], prefix_done=torch.zeros(2, dtype=torch.bool),
                        features=torch.ones(2, 3), state=None, confidence=confidence)


def test_heads_read_hidden_states_and_confidence_by_default(tmp_path):
    trainer = make_trainer(tmp_path)
    hidden = trainer.model.config.hidden_size
    heads = trainer.head_trainer
    assert heads.hidden_size == hidden + len(CONFIDENCE_FEATURES)
    assert heads.passthrough == len(CONFIDENCE_FEATURES)  # kept whole by the linear probe
    conf = torch.tensor([[-2.0, -0.5], [-0.1, -0.05]])
    torch.testing.assert_close(trainer.head_inputs(_prefix(conf)),
                               torch.cat([torch.ones(2, 3), conf], dim=1))
    with pytest.raises(RuntimeError, match=r"reported no confidence features.*head_confidence"):
        trainer.head_inputs(_prefix(None))


def test_head_confidence_false_reads_the_hidden_states_only(tmp_path):
    trainer = make_trainer(tmp_path, head_confidence=False)
    assert trainer.head_trainer.hidden_size == trainer.model.config.hidden_size
    assert trainer.head_trainer.passthrough == 0
    # The default transformers backend then skips the per-step log-softmax of the recorder.
    assert trainer.generation_backend.record_confidence is False
    assert make_trainer(tmp_path / "on").generation_backend.record_confidence is True
    torch.testing.assert_close(trainer.head_inputs(_prefix(None)), torch.ones(2, 3))


@pytest.mark.slow
def test_a_training_step_updates_the_heads_with_confidence(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=2)
    trainer.train()
    draw = trainer.last_draw
    hidden = trainer.model.config.hidden_size
    assert draw.features.shape[-1] == hidden + len(CONFIDENCE_FEATURES)
    conf = draw.features.reshape(-1, draw.features.shape[-1])[:, hidden:]
    assert (conf <= 0).all() and (conf[:, 0] <= conf[:, 1] + 1e-6).all()
    assert trainer.head_trainer.n_labels > 0
