"""``PairGRPOTrainer.draw_history`` labels each draw with the optimizer step it is logged at.

Issue 11, item 9: the label was ``state.global_step`` read at generation time, i.e. the number
of optimizer steps already *finished*, one less than the step whose update uses the draw and
whose log line carries its ``pair/*`` metrics.
"""

from __future__ import annotations

import numpy as np
from pair_helpers import make_trainer


def test_draw_step_label_is_the_logged_step_that_uses_it(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=3, per_device_train_batch_size=12, n_prompts=8)
    trainer.train()
    draws = list(trainer.draw_history)
    assert [d["step"] for d in draws] == [1, 2, 3]
    # ... and each draw's own numbers are in the log line of that step
    logged = {e["step"]: e for e in trainer.state.log_history if "pair/completed" in e}
    assert sorted(logged) == [1, 2, 3]
    for d in draws:
        k = d["mask"].sum(-1)
        assert logged[d["step"]]["pair/completed"] == float(np.mean(k))
        assert logged[d["step"]]["pair/pi_mean"] == float(np.mean(d["pi"]))
