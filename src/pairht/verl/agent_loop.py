"""The agent-loop worker that generates each group in two phases (v1, TransferQueue).

Select it with ``actor_rollout_ref.rollout.agent.agent_loop_manager_class=
pairht.verl.agent_loop.PairAgentLoopManager``. verl's ``AgentLoopWorkerTQ._run_prompt`` spawns
the ``n`` sessions of one prompt in one coroutine; here that coroutine runs
:func:`pairht.verl.two_phase.two_phase_group` through the worker's own server manager
(``llm_client``) and hands every candidate to verl's ``_agent_loop_postprocess`` (reward,
TransferQueue) with the plan's row in ``extra_fields``. Validation batches keep verl's path.
``_run_prompt`` is private: verl is pinned and tests/verl/test_seams.py checks the seam.
Single-turn chat prompts only (the prompt is the chat template of ``raw_prompt``).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import numpy as np
import ray
import transfer_queue as tq
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

from pairht.verl.config import PairVerlConfig
from pairht.verl.two_phase import two_phase_group

__all__ = ["PairAgentLoopManager", "PairAgentLoopWorker", "group_rng"]

logger = logging.getLogger(__name__)


def group_rng(seed: int, uid: str, step: int) -> np.random.Generator:
    """The design's generator of one group: a function of the run's seed, the prompt's ``uid``
    and the step, so that a rerun draws the same designs (and no reward enters it)."""
    digest = hashlib.sha256(f"{uid}".encode()).digest()
    return np.random.default_rng([int(seed), int(step), *np.frombuffer(digest[:16], np.uint32)])


class _Worker(AgentLoopWorkerTQ.__ray_actor_class__):  # type: ignore[name-defined,misc]
    async def _run_prompt(self, prompt: dict, sampling_params: dict, trajectory: dict,
                          trace: bool = False) -> None:
        if trajectory["validate"]:
            return await super()._run_prompt(prompt, sampling_params, trajectory, trace)
        uid = prompt["uid"]
        await tq.async_kv_put(key=uid, partition_id="train", tag={"status": "running"})
        try:
            cfg = PairVerlConfig.from_root(self.config)
            rollout = self.config.actor_rollout_ref.rollout
            n = int(prompt.pop("__rollout_n__", rollout.n))
            prompt.pop("__do_sample__", None)
            prompt.pop("agent_name", None)
            prompt_ids = self.tokenizer.apply_chat_template(
                list(prompt["raw_prompt"]), add_generation_prompt=True, tokenize=True)
            eos = self.tokenizer.eos_token_id
            _, candidates = await two_phase_group(
                self.llm_client, list(prompt_ids), request_ids=[f"{uid}-{i}" for i in range(n)],
                sampling_params=dict(sampling_params),
                response_length=int(rollout.response_length),
                eos_token_ids=eos if isinstance(eos, list) else [eos], config=cfg,
                rng=group_rng(cfg.seed, str(uid), int(prompt.get("global_steps", 0))))
            for i, c in enumerate(candidates):
                output = AgentLoopOutput(
                    prompt_ids=list(prompt_ids), response_ids=c.response_ids,
                    response_mask=[1] * len(c.response_ids), response_logprobs=c.log_probs,
                    num_turns=2, metrics=AgentLoopMetrics(), extra_fields=dict(c.extra_fields))
                await self._agent_loop_postprocess(output, False, **prompt, session_id=i)
            status = "finished"
        except Exception:
            logger.exception("pairht two-phase generation failed for uid=%s", uid)
            status = "failure"
        await tq.async_kv_put(key=uid, partition_id="train", tag={"status": status})


#: the Ray actor class of the worker
PairAgentLoopWorker = ray.remote(_Worker)


class PairAgentLoopManager(AgentLoopManagerTQ):
    """verl's v1 agent-loop manager with :data:`PairAgentLoopWorker` as its workers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = PairAgentLoopWorker
