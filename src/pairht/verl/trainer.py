"""The v1 trainer mode ``pair_sync``: verl's synchronous trainer with PAIR's advantage step.

Select it with ``trainer.use_v1=true trainer.v1.trainer_mode=pair_sync``. Only
``_compute_advantage`` changes (a private verl method: verl is pinned exactly and
tests/verl/test_seams.py fails when it moves): it reads the batch's rewards, response masks,
``uid`` and the plan the agent-loop worker logged in ``extra_fields`` from TransferQueue, calls
:func:`pairht.verl.advantage.pair_advantage`, and writes ``advantages``, ``returns`` and the
masked ``response_mask`` back. Everything else (old/ref log-probs, the PPO update) is verl's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import transfer_queue as tq
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from pairht.verl.advantage import pair_advantage, plan_fields_from_extra
from pairht.verl.config import PairVerlConfig

__all__ = ["TRAINER_MODE", "PairSyncTrainer", "advantage_fields"]

#: the name under ``trainer.v1.trainer_mode``
TRAINER_MODE = "pair_sync"
#: what the advantage step reads from TransferQueue
READ_FIELDS = ["uid", "response_mask", "rm_scores", "extra_fields"]


def check_algorithm(config: Any) -> None:
    """Refuse verl options that would make the estimate something else than PAIR's.

    A KL penalty folded into the reward depends on the policy, not only on the outcome, and
    rollout correction's importance weights or rejection act on rows after the design was
    drawn; both are refused naming the key (verl's default, both null, passes).
    """
    algorithm = config.algorithm
    if algorithm.get("use_kl_in_reward", False):
        raise ValueError("algorithm.use_kl_in_reward must be false with trainer.v1.trainer_mode="
                         f"{TRAINER_MODE} (use the actor's KL loss: actor.use_kl_loss=true)")
    correction = algorithm.get("rollout_correction", None) or {}
    for key in ("rollout_is", "rollout_rs"):
        if correction.get(key, None) is not None:
            raise ValueError(f"algorithm.rollout_correction.{key} must be null with "
                             f"trainer.v1.trainer_mode={TRAINER_MODE} (it reweights or rejects "
                             f"rows after the design was drawn); got {correction.get(key)!r}")


def advantage_fields(data: TensorDict, config: PairVerlConfig) -> TensorDict:
    """The fields the step writes back, from the fields it read (both as TransferQueue holds
    them: ragged response tensors, ``uid`` and ``extra_fields`` as non-tensor stacks).

    Returns ``advantages``, ``returns`` and ``response_mask`` (ragged, like the input).
    """
    response_mask = data["response_mask"]
    padded = data.to_padded_tensor()
    uid = np.array(padded.pop("uid").tolist(), dtype=object)
    extra = padded.pop("extra_fields").tolist()
    batch = DataProto(batch=padded)
    batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
    batch.non_tensor_batch["uid"] = uid
    batch.non_tensor_batch.update(plan_fields_from_extra(extra))
    out = pair_advantage(batch, config)
    fields = {k: response_to_nested(out.batch[k], response_mask)
              for k in ("advantages", "returns", "response_mask")}
    return TensorDict(fields, batch_size=len(uid))


@register_trainer(TRAINER_MODE)
class PairSyncTrainer(PPOTrainerSync):
    """verl's ``sync`` trainer whose advantage step is PAIR's (module docstring)."""

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        check_algorithm(self.config)
        cfg = PairVerlConfig.from_root(self.config)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=READ_FIELDS)
        output = advantage_fields(data, cfg)
        kept = output["response_mask"].values().sum().item()
        metrics["pair/kept_response_tokens"] = float(kept)
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)
