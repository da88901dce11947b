"""``edge_proxy``: the names come from the step's registry; the trainer feeds the length energy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("trl")

from pair_helpers import make_config, make_trainer

from pairht.step.pair_program import PROXIES


def test_the_config_names_the_steps_proxies_and_refuses_the_untrainable_ones(tmp_path):
    assert make_config(tmp_path, edge_proxy="length_energy").edge_proxy == "length_energy"
    for name in sorted(set(PROXIES) - {"disagreement", "length_energy"}):
        with pytest.raises(ValueError, match=f"edge_proxy='{name}' needs a score-norm"):
            make_config(tmp_path, edge_proxy=name)
    with pytest.raises(ValueError, match="edge_proxy"):
        make_config(tmp_path, edge_proxy="nope")


def test_length_energy_trains_a_step_with_exact_probabilities(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=1, edge_proxy="length_energy")
    trainer.train()
    d = trainer.draw_history[0]
    pi = np.asarray(d["pi"])
    assert np.all((pi > 0) & (pi <= 1)) and pi.min() < 1  # a real allocation was drawn
    assert trainer.last_draw is not None and np.all(np.isfinite(trainer.last_draw.advantages))
