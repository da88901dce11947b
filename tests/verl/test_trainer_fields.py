"""The trainer mode's step on the layout TransferQueue holds: rows built by verl's own
``AgentLoopOutput.as_dict`` and ``list_of_dict_to_tensordict`` (what the agent loop puts), the
plan in ``extra_fields``, ragged responses; the result equals :func:`pairht.pair_advantages`."""

from __future__ import annotations

import numpy as np
import pytest

from verl_required import require_verl_for_tests

require_verl_for_tests()

import torch  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

import pairht  # noqa: E402
from pairht.step import plan_step  # noqa: E402
from pairht.verl.config import PairVerlConfig  # noqa: E402
from pairht.verl.rows import plan_rows  # noqa: E402
from pairht.verl.trainer import READ_FIELDS, advantage_fields  # noqa: E402

pytestmark = pytest.mark.verl


def test_advantage_fields_on_the_transfer_queue_layout_equal_pair_advantages():
    b, g = 2, 5
    rng = np.random.default_rng(11)
    plan = plan_step(rng.random((b, g)), rng.uniform(5, 40, (b, g)),
                     np.zeros((b, g), dtype=bool), budget_ratio=0.5, rng=rng)
    assert (~plan.selected).any()
    rewards = rng.integers(0, 2, (b, g)).astype(float) + rng.random((b, g)) / 8
    rows = []
    for i in range(b):
        for row in plan_rows(plan, i):
            j = row["pair_index"]
            n_resp = 1 + (3 * i + j) % 4  # ragged responses
            extra = dict(row)
            out = AgentLoopOutput(prompt_ids=[1, 2, 3], response_ids=list(range(4, 4 + n_resp)),
                                  response_mask=[1] * n_resp, reward_score=float(rewards[i, j]),
                                  metrics=AgentLoopMetrics(), extra_fields=extra)
            field = out.as_dict()
            field["uid"] = f"prompt-{i}"
            rows.append(field)
    order = rng.permutation(len(rows))
    td = list_of_dict_to_tensordict([rows[k] for k in order]).select(*READ_FIELDS)
    result = advantage_fields(td, PairVerlConfig())
    adv = result["advantages"].to_padded_tensor(padding=0.0).double()
    mask = result["response_mask"].to_padded_tensor(padding=0)
    per_row = np.zeros(len(rows))
    for k in range(len(rows)):
        vals = adv[k][mask[k].bool()]
        per_row[k] = vals[0].item() if vals.numel() else 0.0
    got = per_row[np.argsort(order)].reshape(b, g)
    # rm_scores are float32 in verl: the reference reads the same float32 rewards
    r32 = rewards.astype(np.float32).astype(np.float64)
    want = pairht.pair_advantages(r32, plan.selected, plan.joint).astype(np.float32)
    np.testing.assert_array_equal(got.astype(np.float32), want)
    kept = mask.sum(-1).numpy()[np.argsort(order)].reshape(b, g)
    assert np.all((kept > 0) == plan.selected)
    assert result["advantages"].dtype == torch.float32
