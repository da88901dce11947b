r"""``PairGRPOTrainer``: PAIR adaptive suffix continuation inside TRL's ``GRPOTrainer``.

The trainer makes the two calls of :mod:`pairht.step` and moves tensors; the algorithm (width,
allocation, design, estimator) is the step's::

    prefix_candidates -> phase 1 prefixes -> heads p_hat, c_hat -> plan_step (logged before
    any reward) -> phase 2 on plan.selected -> rewards -> estimate(plan, rewards) ->
    TRL's loss with the advantages, rows off est.mask zeroed (and dropped, loss unchanged)
    -> heads updated on the new labels after the policy update

Seams (``super()`` each time, never a copied TRL body): ``_generate_single_turn`` (two-phase
generation and the plan, train mode only), ``_calculate_rewards`` (the selected rows only; NaN
elsewhere), ``_generate_and_score_completions`` (advantages and loss mask replaced),
``compute_loss`` (the row-drop factor), ``training_step`` (the heads' refresh).

Exact mode (``loss_type="dr_grpo"``, ``num_iterations=1``, ``beta=0``, ``scale_rewards="none"``):
``grad(loss) = -(1 / (G L)) mean_b g_PAIR(q_b)`` with ``L = max_completion_length`` and
``g_PAIR`` the pair-HT gradient (Eq. pair-ht); :attr:`PairGRPOTrainer.update_scale` is
``-1 / (G L)``. Metrics: ``pair/<name>`` for the step's logged quantities
(:meth:`pairht.trl.draw.DesignDraw.metrics`), ``pair/heads/*``, ``pair/time_*``
(``docs/trl.md``).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from typing import Any

import numpy as np
import torch
from trl.models import unwrap_model_for_generation

from pairht.step import estimate, head_labels, plan_step, prefix_candidates
from pairht.torch.distributed import broadcast_from_main, gather_rows, local_slice
from pairht.torch.history import PromptHistory, group_keys, prompt_key
from pairht.torch.row_drop import LOSS_SCALE_KEY, drop_rows
from pairht.torch.shrinkage import shrinkage_weights
from pairht.trl.checkpoint import PAIR_STATE_FILE, load_pair_state, pair_state, read_pair_state
from pairht.trl.config import PairGRPOConfig, RewardFailureWarning, RewardFunctionError
from pairht.trl.draw import DesignDraw
from pairht.trl.gather import gather_predictions, process_local_reward_gather
from pairht.trl.rewards import RewardRows, guard_reward_funcs, report_reward_calls
from pairht.trl.setup import (
    check_setup,
    default_backend,
    default_heads,
    estimate_options,
    head_inputs,
    plan_options,
    prepare_vllm,
)
from pairht.trl.timing import instrument
from pairht.trl.width import start_auto_width, switch_width
from trl import GRPOTrainer

__all__ = [
    "PAIR_STATE_FILE", "DesignDraw", "PairGRPOTrainer", "RewardFailureWarning",
    "RewardFunctionError",
]

def _check_trl_seams() -> None:
    import trl.trainer.grpo_trainer as grpo_module

    seams = ("_generate_single_turn", "_calculate_rewards", "_generate_and_score_completions")
    missing = [name for name in seams if not hasattr(GRPOTrainer, name)]
    if missing or not hasattr(grpo_module, "gather"):
        raise ImportError(
            f"pairht.trl needs TRL's GRPOTrainer seams {missing or ''} and "
            f"trl.trainer.grpo_trainer.gather (TRL >= 1.16, < 2)"
        )


_check_trl_seams()


class PairGRPOTrainer(GRPOTrainer):
    """TRL ``GRPOTrainer`` with PAIR adaptive suffix continuation and pair-HT advantages.

    Parameters
    ----------
    model, reward_funcs, train_dataset, eval_dataset, processing_class, ..., peft_config
        As for ``trl.GRPOTrainer`` (same order). Tools, environments and ``rollout_func``
        are refused (PAIR needs to control generation).
    args : PairGRPOConfig
        Training and PAIR configuration.
    generation_backend : object, optional
        Two-phase generator with ``generate_prefixes(model, prompt_ids)``,
        ``continue_selected(model, prefix, selected)`` and ``generate_full(model, prompts)``;
        default :class:`pairht.rollout.transformers_backend.TransformersTwoPhase` (or
        :class:`pairht.vllm.VLLMTwoPhase` with ``use_vllm``) built from ``args``.
    head_trainer : object, optional
        Prefix heads with ``predict``, ``add``, ``update``, ``state_dict``,
        ``load_state_dict``; default :class:`pairht.torch.heads.HeadTrainer`.

    Attributes
    ----------
    last_draw : DesignDraw or None
        The latest training batch's plan, rewards and estimate.
    draw_history : deque of dict
        ``{"step", "pi", "mask"}`` of the latest 1024 training draws; ``step`` is the optimizer
        step (1-based, as in the logs) whose update first uses the draw.
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: PairGRPOConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: Any = None,
        optimizers: Any = (None, None),
        quantization_config: Any = None,
        peft_config: Any = None,
        *,
        generation_backend: Any = None,
        head_trainer: Any = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(args, PairGRPOConfig):
            raise ValueError(f"args must be a PairGRPOConfig (PAIR's knobs live there); got "
                             f"{type(args).__name__}")
        for name in ("tools", "rollout_func", "environment_factory"):
            if kwargs.get(name) is not None:
                raise ValueError(
                    f"{name} is not supported by PairGRPOTrainer: PAIR must control generation "
                    f"(prefix, design draw, resume); got {name}={kwargs[name]!r}"
                )
        prepare_vllm(args)
        super().__init__(
            model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset,
            eval_dataset=eval_dataset, processing_class=processing_class,
            reward_processing_classes=reward_processing_classes, callbacks=callbacks,
            optimizers=optimizers, quantization_config=quantization_config,
            peft_config=peft_config, **kwargs,
        )
        self.pair_args: PairGRPOConfig = args
        check_setup(self, args)
        self._pair_stats = {"reward_failures": 0}
        self._reward_rows = RewardRows()
        self.reward_funcs = guard_reward_funcs(self.reward_funcs, self._pair_stats,
                                               args.reward_failure, self._reward_rows)
        seed = args.design_seed if args.design_seed is not None else args.seed
        # One generator per trainer, seeded identically on every process and advanced
        # identically (every process draws; the main process's draw is broadcast).
        self.design_rng = np.random.Generator(np.random.PCG64(seed))
        self._warm_start: np.ndarray | None = None
        self._pending_labels: dict[str, Any] | None = None
        self.last_draw: DesignDraw | None = None
        self.draw_history: deque[dict[str, Any]] = deque(maxlen=1024)  # recent draws only
        # Per-prompt successes/trials of observed rewards, read by the prompt-level allocators
        # (vip, hora, duet) through StepInputs.history; keys of the batch being trained.
        self.prompt_history = PromptHistory()
        self._history_keys: list[bytes] | None = None
        self.generation_backend = generation_backend or default_backend(self)
        self.head_trainer = head_trainer or default_heads(self)
        from pairht.trl.audit_mode import AuditCallback

        for callback in self.callback_handler.callbacks:
            if isinstance(callback, AuditCallback):
                callback.trainer = self
        # PAIR's default width "auto": the width and estimator from the run's own audits
        self.auto_width: Any = None
        self.auto_option: str | None = None
        self.pair_audit_tokens = 0
        start_auto_width(self)
        self.step_timer = instrument(self)  # pair/time_<phase>, the seams of plain GRPO

    @property
    def update_scale(self) -> float:
        """Exact mode: ``grad(loss) = update_scale * mean_b g_PAIR(q_b)`` (see module doc)."""
        g, length = self.pair_args.num_generations, self.pair_args.max_completion_length
        if g is None or length is None:
            raise ValueError(f"update_scale = -1 / (num_generations * max_completion_length) "
                             f"needs both set; got num_generations={g!r}, "
                             f"max_completion_length={length!r}")
        return -1.0 / (g * length)

    def _head_skill(self) -> dict[str, float]:
        """Shrinkage weights for the step (:func:`pairht.torch.shrinkage.shrinkage_weights`)."""
        return shrinkage_weights(self.head_trainer, self.pair_args.shrink_to_skill,
                                 self.pair_args.shrink_by)

    def _phase(self, name: str) -> Any:
        """``self.step_timer.phase(name)`` (a no-op before ``__init__`` set the timer)."""
        timer = getattr(self, "step_timer", None)
        return timer.phase(name) if timer is not None else contextlib.nullcontext()

    def set_width(self, width: str, whole_group_size: float | None = None,
                  allocator: str | None = None, prefix_group_size: int | None = None) -> None:
        """Switch the width from the next generation batch on
        (:func:`pairht.trl.width.switch_width`); the audit callbacks call it."""
        switch_width(self.pair_args, width, whole_group_size, allocator, prefix_group_size)

    def head_inputs(self, prefix: Any) -> torch.Tensor:
        """What the heads read for a prefix batch (:func:`pairht.trl.setup.head_inputs`)."""
        return head_inputs(prefix, self.pair_args.head_confidence, self.generation_backend)

    # ------------------------------------------------------------------ seam 1: generation
    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        if not self.model.training:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        if images is not None or multimodal_fields:
            raise ValueError("PairGRPOTrainer supports text-only prompts (no images)")
        self._refresh_heads()  # labels of the previous batch, after its policy update
        args = self.pair_args
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
                # TRL sets generation_kwargs only when vLLM is off (the vLLM engine takes its
                # sampling settings itself); with vLLM the unwrapped model only computes features.
                generation_kwargs=None if self.use_vllm else self.generation_kwargs,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as unwrapped,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
            # One autocast region around both phases: accelerate's per-forward autocast clears
            # the weight-cast cache after every decoding step, nested regions keep it
            # (docs/performance.md). A no-op without mixed precision.
            self.accelerator.autocast(),
        ):
            return self._two_phase(unwrapped, prompt_ids)

    def _two_phase(self, unwrapped: Any, prompt_ids: Any) -> tuple[list[list[int]], None]:
        """Prefixes for the step's candidates, the plan, then the selected rows to the end.

        Rows never generated (no prefix and not selected) carry one EOS token as their
        completion: TRL's batch keeps every row (``split_tensor_dict`` drops remainder rows of
        an uneven batch), and the loss mask of seam 3 removes them.
        """
        args, acc = self.pair_args, self.accelerator
        g = args.num_generations
        assert g is not None  # resolved by GRPOConfig
        n_local = len(prompt_ids)
        n_groups = gather_rows(acc, np.zeros((n_local, 1))).shape[0] // g
        assert args.width is not None  # resolved by PairGRPOConfig
        cands = broadcast_from_main(acc, prefix_candidates(
            args.width, n_groups, g, prefix_group_size=args.prefix_group_size,
            rng=self.design_rng))
        inside = np.zeros((n_groups, g), dtype=bool)
        inside[np.arange(n_groups)[:, None], cands] = True
        local = np.flatnonzero(inside.reshape(-1)[local_slice(acc, n_local)])
        eos = int(next(iter(self.eos_token_ids)))
        completion_ids: list[list[int]] = [[eos] for _ in range(n_local)]
        suffix_local = np.zeros(n_local, dtype=np.int64)
        if cands.shape[1] == 0:  # no prefix phase: the selected rows generated whole
            draw = self._plan(None, prompt_ids, cands)
            selected = np.flatnonzero(draw.plan.selected.reshape(-1)[draw.rows]).tolist()
            # Called even with nothing selected here: a backend whose generation is a
            # collective across processes (vLLM server mode) needs every process to join.
            with self._phase("generation"):
                whole = self.generation_backend.generate_full(
                    unwrapped, [list(prompt_ids[i]) for i in selected])
            for row, ids in zip(selected, whole):
                completion_ids[row] = list(ids)
                suffix_local[row] = len(ids)
            draw.suffix_len = gather_rows(acc, suffix_local).reshape(-1, g)
            self.last_draw = draw
            return completion_ids, None
        # A process holding no row with a prefix still generates one throwaway prefix:
        # backends whose phase 1 is a collective (vLLM server mode) need every process, and
        # the features' width comes with it. It is never continued nor scored.
        rows_in = local if len(local) else np.arange(1)
        with self._phase("prefix"):
            prefix = self.generation_backend.generate_prefixes(
                unwrapped, [prompt_ids[i] for i in rows_in])
        # The backend times its feature forward inside phase 1: file it as features.
        feature_s = getattr(self.generation_backend, "last_feature_seconds", None)
        if feature_s is not None and hasattr(self, "step_timer"):
            self.step_timer.add("features", feature_s, taken_from="prefix")
        # Sync check (pairht.rollout.sync_check): engine vs policy log-probs after the sync.
        gap = getattr(self.generation_backend, "last_logprob_gap", None)
        if gap is not None:
            self._metrics["train"]["pair/engine_logprob_gap"].append(float(gap))
        draw = self._plan(prefix, prompt_ids, cands, local)
        selected = np.flatnonzero(draw.plan.selected.reshape(-1)[draw.rows][local]).tolist()
        # Called even with nothing selected on this process: backends whose phase 2 is a
        # collective across processes (vLLM server mode) need every process to join.
        with self._phase("continuation"):
            finished = self.generation_backend.continue_selected(unwrapped, prefix, selected)
        for k, row in enumerate(local):
            completion_ids[row] = list(prefix.prefix_ids[k])
        for k, ids in zip(selected, finished):
            completion_ids[local[k]] = list(ids)
            suffix_local[local[k]] = len(ids) - len(prefix.prefix_ids[k])
        draw.suffix_len = gather_rows(acc, suffix_local).reshape(-1, g)
        heads_in = self.head_inputs(prefix).float().cpu().numpy()
        features = np.zeros((n_local, heads_in.shape[-1]), dtype=heads_in.dtype)
        features[local] = heads_in[: len(local)]
        draw.features = torch.as_tensor(gather_rows(acc, features))
        self.last_draw = draw
        return completion_ids, None

    def _plan(self, prefix: Any, prompt_ids: Any, cands: np.ndarray,
              local: np.ndarray | None = None) -> DesignDraw:
        """Predict (with a prefix batch), gather, then :func:`pairht.step.plan_step`.

        Every process plans from the same gathered inputs with an identically seeded
        generator (which stays in lockstep); the main process's plan is broadcast and logged
        in ``draw_history`` before any reward exists.
        """
        args, acc = self.pair_args, self.accelerator
        g = args.num_generations
        assert g is not None  # resolved by GRPOConfig
        n_local = len(prompt_ids)
        opts = plan_options(args, self._warm_start)
        predictions: dict[str, Any] = {"n_groups": cands.shape[0]}
        if prefix is not None:
            assert local is not None  # the rows holding the prefixes
            with self._phase("heads"):
                p_loc, c_loc = self.head_trainer.predict(self.head_inputs(prefix))
            allrows = gather_predictions(acc, prefix, p_loc, c_loc, local, n_local)
            row_keys = np.stack([prompt_key(ids) for ids in prompt_ids])
            self._history_keys = group_keys(gather_rows(acc, row_keys), g)
            predictions = {
                "p_hat": allrows[:, 0].reshape(-1, g), "c_hat": allrows[:, 1].reshape(-1, g),
                "finished": allrows[:, 2].reshape(-1, g) > 0.5,
                "prefix_tokens": allrows[:, 3].reshape(-1, g).astype(np.int64),
                "history": self.prompt_history.lookup(self._history_keys),
                **self._head_skill(),
            }
        with self._phase("allocation"):
            plan = plan_step(**predictions, subset=cands, rng=self.design_rng, **opts)
        plan = broadcast_from_main(acc, plan)
        if prefix is not None and plan.continuation is not None:
            self._warm_start = plan.continuation.pi_alloc
        draw = DesignDraw(plan=plan, rows=local_slice(acc, n_local))
        # global_step counts finished optimizer steps: this draw feeds the next one
        self.draw_history.append(draw.history_entry(int(self.state.global_step) + 1))
        return draw

    # ------------------------------------------------------------------ seam 2: rewards
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        draw = self.last_draw
        if not self.model.training or draw is None or draw.rewards is not None:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        generated = draw.plan.selected
        local_mask = generated.reshape(-1)[draw.rows]
        if len(local_mask) != len(prompts):
            raise RuntimeError(f"PAIR design covers {len(local_mask)} local rows but the reward "
                               f"call has {len(prompts)}; the generation and scoring batches "
                               f"disagree")
        sel = np.flatnonzero(local_mask).tolist()
        n_funcs = len(self.reward_funcs)
        full = torch.full((len(prompts), n_funcs), float("nan"), device=self.accelerator.device)
        if sel:
            # the batch rows of the scored completions, so that a failure names its prompt
            self._reward_rows.rows = [draw.rows.start + i for i in sel]
            self._reward_rows.group_size = int(generated.shape[1])
            try:
                with process_local_reward_gather():
                    sub = super()._calculate_rewards(
                        [inputs[i] for i in sel], [prompts[i] for i in sel],
                        [completions[i] for i in sel], [completion_ids_list[i] for i in sel],
                    )
            finally:
                self._reward_rows.rows = self._reward_rows.group_size = None
            full[sel] = sub.to(full.dtype)
        report_reward_calls(self.accelerator, self._pair_stats, self._metrics["train"],
                            len(sel) * n_funcs, int(self.state.global_step) + 1)
        gathered = self.accelerator.gather(full) if self.accelerator.num_processes > 1 else full
        weights = self.reward_weights.to(gathered.device).to(gathered.dtype)
        rewards = (gathered * weights).nansum(dim=1)
        flat = rewards.cpu().double().numpy().reshape(generated.shape)
        draw.rewards = np.where(generated, flat, np.nan)
        if self._history_keys is not None:  # observed rewards only, for the next plans
            self.prompt_history.update(self._history_keys, draw.rewards, generated,
                                       draw.plan.pi)
            self._history_keys = None
        return gathered

    # ------------------------------------------------------------------ seam 3: advantages
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        draw = self.last_draw
        if not self.model.training or draw is None or draw.estimate is not None:
            return out
        assert draw.rewards is not None  # filled in by seam 2
        est = estimate(draw.plan, draw.rewards, rng=self.design_rng,
                       suffix_tokens=draw.suffix_len, **estimate_options(self.pair_args))
        draw.estimate = est = broadcast_from_main(self.accelerator, est)
        if self.draw_history:
            self.draw_history[-1].update(draw.pruned_entry())
        # the heads learn from every generated row with a prefix (before any pruning)
        self._pending_labels = None
        if draw.features is not None:
            labels = head_labels(draw.plan, draw.rewards, draw.suffix_len)
            self._pending_labels = {**labels,
                                    "features": draw.features[torch.as_tensor(labels["rows"])]}
        device = out["advantages"].device
        dtype = torch.float64 if self._policy_dtype() == torch.float64 else torch.float32
        flat = torch.as_tensor(est.advantages, dtype=dtype, device=device).reshape(-1)
        out["advantages"] = flat[draw.rows]
        keep = torch.as_tensor(est.mask, device=device).reshape(-1)[draw.rows]
        out["completion_mask"] = out["completion_mask"] * keep.to(out["completion_mask"].dtype)[
            :, None]
        loss_mask = out["completion_mask"]
        if "tool_mask" in out:
            loss_mask = loss_mask * out["tool_mask"]
        out["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        if self.pair_args.drop_unselected_rows:
            # Masked rows only cost work: drop them, loss unchanged (pairht.torch.row_drop),
            # padded to the largest kept count of any process (TRL gathers per-row metrics).
            per_process = est.mask.reshape(self.accelerator.num_processes, -1).sum(-1)
            out = drop_rows(out, keep.bool(), self.loss_type,
                            min_rows=max(1, int(per_process.max())))
            self._metrics["train"]["pair/update_rows"].append(float(self.accelerator.gather(
                torch.tensor(out["prompt_ids"].shape[0], device=device)).sum()))
        # TRL logged its own (unused) advantages for the completions table; show ours.
        logged = self._logs["advantages"]
        for _ in range(min(flat.numel(), len(logged))):
            logged.pop()
        logged.extend(flat.tolist())
        self._log_step(draw)
        return out

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """TRL's loss times the factor :func:`pairht.torch.row_drop.drop_rows` stored (if any)."""
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        scale = inputs.get(LOSS_SCALE_KEY)
        return loss if scale is None else loss * float(scale)

    def _policy_dtype(self) -> torch.dtype:
        try:
            return next(self.accelerator.unwrap_model(self.model).parameters()).dtype
        except StopIteration:  # pragma: no cover - a model without parameters
            return torch.float32

    def _log_step(self, draw: DesignDraw) -> None:
        """``pair/<key>`` for the step's logged quantities, the plan's and the heads'."""
        auto = self.auto_width.options if self.auto_width is not None else ()
        option = auto.index(self.auto_option) if self.auto_option in auto else None
        for key, value in draw.metrics(self.head_trainer, option).items():
            self._metrics["train"][f"pair/{key}"].append(value)

    # ------------------------------------------------------------------ seam 4: heads
    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0:
            self._refresh_heads()
        return loss

    def _refresh_heads(self) -> None:
        """Add the pending labels to the replay window and refit (after the policy update)."""
        labels, self._pending_labels = self._pending_labels, None
        if labels is None:
            return
        self.head_trainer.add(
            labels["features"], labels["rewards"], labels["costs"], labels["pi"], labels["mask"],
            # checkpoints written before width "subset" carry no group size: num_generations
            group_size=labels.get("group_size", self.pair_args.num_generations),
        )
        with self._phase("heads"):
            head_metrics = self.head_trainer.update()
        for key, value in head_metrics.items():
            self._metrics["train"][f"pair/heads/{key}"].append(float(value))

    # ------------------------------------------------------------------ checkpoints
    def pair_state_dict(self) -> dict[str, Any]:
        """Design RNG, heads, warm start, pending labels (:mod:`pairht.trl.checkpoint`)."""
        return pair_state(self)

    def load_pair_state_dict(self, state: dict[str, Any]) -> None:
        load_pair_state(self, state)  # inverse of pair_state_dict

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            torch.save(self.pair_state_dict(),
                       os.path.join(self._get_output_dir(trial=trial), folder, PAIR_STATE_FILE))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.load_pair_state_dict(read_pair_state(checkpoint))
