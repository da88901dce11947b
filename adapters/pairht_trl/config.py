"""``PairGRPOConfig``: every knob of PAIR on top of TRL's ``GRPOConfig``.

Defaults follow the paper's default training configuration (Table "Default training
configuration") and the appendices "Practical Departures from the Exact Estimator" and
"Implementation Details". Two modes:

``mode="exact"``
    The policy update IS the pair Horvitz-Thompson estimator (Eq. pair-ht) up to a constant:
    unclipped (one epoch, ``num_iterations=1``, so every PPO ratio is 1 and clipping is
    inactive), unstandardised (``scale_rewards="none"``), constant loss normaliser
    (``loss_type="dr_grpo"``: TRL divides the summed token loss by
    ``rows_per_micro_batch * max_completion_length``, a number that does not depend on which rows
    are masked), ``weighting="exact"``, no KL term and no entropy bonus.

``mode="practical"``
    PAIR advantages inserted into TRL's clipped PPO surrogate (default 2 epochs), with optional
    reward standardisation and clipped / Hajek weights. Not an unbiased gradient; reported as a
    "pair-corrected data-collection target" (paper, appendix "Practical Departures").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl import GRPOConfig

MODES = ("exact", "practical")
DESIGN_KINDS = ("bernoulli", "conditional_poisson", "dependent_rounding")
FIXED_SIZE_DESIGNS = ("conditional_poisson", "dependent_rounding")
EDGE_PROXIES = ("disagreement", "score_norm", "energy")
WEIGHTINGS = ("exact", "clipped", "hajek")


@dataclass
class PairGRPOConfig(GRPOConfig):
    r"""Configuration of :class:`~pairht_trl.PairGRPOTrainer`: TRL's ``GRPOConfig`` plus PAIR.

    Every invalid combination raises ``ValueError`` at construction, naming the fields.

    Parameters
    ----------
    mode : {"exact", "practical"}
        ``"exact"`` (default): the update equals ``-(1 / (G * max_completion_length))`` times
        the batch mean over prompts of the pair-HT gradient (see
        :meth:`PairGRPOTrainer.update_scale`). Requires ``num_iterations=1``,
        ``steps_per_generation == gradient_accumulation_steps``, ``scale_rewards="none"``,
        ``loss_type="dr_grpo"``, ``weighting="exact"``, ``beta=0``, no entropy bonus,
        ``top_entropy_quantile=1``, ``mask_truncated_completions=False``.
        ``"practical"``: clipped PPO surrogate with PAIR advantages.
    tau : int
        Prefix checkpoint in generated tokens (paper default 256), snapped forward to the next
        newline or sentence end within ``snap_window`` tokens.
    snap_window : int
        Largest forward snap of the prefix checkpoint (paper: 32).
    budget_ratio : float in (0, 1]
        Expected suffix budget per group as a fraction of the full-group predicted suffix cost:
        ``budget = budget_ratio * sum_i c_hat_i`` (paper: 0.5).
    pi_min : float in (0, 1]
        Probability floor (paper: 0.08); caps inverse weights at ``1 / pi_min**2``.
    design : {"bernoulli", "conditional_poisson", "dependent_rounding"}
        Continuation design; its exact joint ``rho_ij`` is logged before any reward exists.
    design_size : int or None
        Sample size of a fixed-size design (``sum_i pi_i``); ``None`` uses
        ``floor(budget_ratio * G)`` (:func:`pairht.allocation.auto_size`), which must be at
        least ``max(2, ceil(G * pi_min))``. Only for fixed-size designs.
    edge_proxy : {"disagreement", "score_norm", "energy"}
        Edge proxy ``a_ij`` of the contrast graph (Eq. edge-proxy); only ``"disagreement"`` is
        computable from the prefix heads alone.
    covariance_term : bool
        Include the shared-vertex term ``b_i`` in the allocation objective.
    weighting : {"exact", "clipped", "hajek"}
        Edge weighting: exact HT ``1/rho``, clipped ``min(1/rho, w_max)``, or Hajek
        self-normalised. Only ``"exact"`` is design-unbiased.
    w_max : float or None
        Clip level for ``weighting="clipped"`` (paper: 10, 20 or 50).
    anchor_pair : bool
        Force a uniformly drawn pair into every draw (mixture design with exact joints), so
        every group observes at least one edge. Bernoulli base design only.
    design_seed : int or None
        Seed of the trainer-owned design generator (``None``: derived from ``seed``). Its state
        is saved with checkpoints.
    head_width, head_feature_window, head_lr, head_replay, head_temperature_fraction
        Prefix heads: MLP width (256), number of last prefix hidden states averaged (16),
        Adam learning rate, replay window in labels (2048), fraction of the newest replay
        labels the temperature is fitted on (0.25).
    head_steps_per_update, head_batch_size
        Adam steps on replay minibatches after each policy update, and their size.
    lagged_heads : bool
        Allocate with the heads of the preceding checkpoint (lagged-predictor variant).
    """

    # ------------------------------------------------------------------ TRL defaults changed
    # None = resolved from `mode` in __post_init__ (exact: 1 epoch, no standardisation).
    num_iterations: int | None = field(  # type: ignore[assignment]
        default=None,
        metadata={"help": "PPO epochs per generation batch; None: 1 (exact) or 2 (practical)."},
    )
    scale_rewards: str | None = field(  # type: ignore[assignment]
        default=None,
        metadata={"help": "'none'|'group'|'batch'; None: 'none' (exact), 'group' (practical)."},
    )
    loss_type: str = field(
        default="dr_grpo",
        metadata={"help": "TRL loss type; 'dr_grpo' has a constant, mask-independent normaliser."},
    )

    # ------------------------------------------------------------------ PAIR
    mode: str = field(default="exact", metadata={"help": "'exact' or 'practical'."})
    tau: int = field(default=256, metadata={"help": "Prefix checkpoint in generated tokens."})
    snap_window: int = field(default=32, metadata={"help": "Forward snap window (tokens)."})
    budget_ratio: float = field(
        default=0.5, metadata={"help": "Expected suffix budget / full-group predicted cost."}
    )
    pi_min: float = field(default=0.08, metadata={"help": "Continuation probability floor."})
    design: str = field(default="bernoulli", metadata={"help": "Continuation design."})
    design_size: int | None = field(
        default=None, metadata={"help": "Sample size of fixed-size designs."}
    )
    edge_proxy: str = field(default="disagreement", metadata={"help": "Edge proxy a_ij."})
    covariance_term: bool = field(default=True, metadata={"help": "Use the b_i term."})
    weighting: str = field(default="exact", metadata={"help": "'exact' | 'clipped' | 'hajek'."})
    w_max: float | None = field(default=None, metadata={"help": "Clip level (clipped)."})
    anchor_pair: bool = field(default=False, metadata={"help": "Force a random anchor pair."})
    design_seed: int | None = field(default=None, metadata={"help": "Design RNG seed."})
    head_width: int = field(default=256, metadata={"help": "Prefix head MLP width."})
    head_feature_window: int = field(default=16, metadata={"help": "Hidden states averaged."})
    head_lr: float = field(default=1e-3, metadata={"help": "Prefix head learning rate."})
    head_replay: int = field(default=2048, metadata={"help": "Replay window (labels)."})
    head_temperature_fraction: float = field(
        default=0.25, metadata={"help": "Newest replay fraction for the temperature fit."}
    )
    lagged_heads: bool = field(default=False, metadata={"help": "Lagged-predictor variant."})
    head_steps_per_update: int = field(
        default=32, metadata={"help": "Head Adam steps after each policy update."}
    )
    head_batch_size: int = field(default=256, metadata={"help": "Head minibatch size."})

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got mode={self.mode!r}")
        if self.num_iterations is None:
            self.num_iterations = 1 if self.mode == "exact" else 2
        if self.scale_rewards is None:
            self.scale_rewards = "none" if self.mode == "exact" else "group"
        super().__post_init__()
        self._check_pair_fields()
        if self.mode == "exact":
            self._check_exact()

    # ------------------------------------------------------------------ validation
    def _check_pair_fields(self) -> None:
        for name in ("tau", "snap_window", "head_width", "head_feature_window", "head_replay"):
            value = getattr(self, name)
            lo = 0 if name == "snap_window" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ValueError(f"{name} must be an int >= {lo}; got {name}={value!r}")
        if self.max_completion_length is not None and self.tau >= self.max_completion_length:
            raise ValueError(
                f"tau must be smaller than max_completion_length (the prefix is a strict part of "
                f"the response); got tau={self.tau}, max_completion_length="
                f"{self.max_completion_length}"
            )
        if not 0.0 < self.budget_ratio <= 1.0:
            raise ValueError(
                f"budget_ratio must lie in (0, 1] (a fraction of the full-group suffix cost); "
                f"got budget_ratio={self.budget_ratio!r}"
            )
        if not 0.0 < self.pi_min <= 1.0:
            raise ValueError(
                f"pi_min must lie in (0, 1] (a positive floor keeps every rho_ij > 0); "
                f"got pi_min={self.pi_min!r}"
            )
        if self.budget_ratio < self.pi_min:
            raise ValueError(
                f"budget_ratio must be at least pi_min (the floor alone costs pi_min of the "
                f"full-group suffix); got budget_ratio={self.budget_ratio!r}, "
                f"pi_min={self.pi_min!r}"
            )
        if self.design not in DESIGN_KINDS:
            raise ValueError(f"design must be one of {DESIGN_KINDS}; got design={self.design!r}")
        if self.edge_proxy not in EDGE_PROXIES:
            raise ValueError(
                f"edge_proxy must be one of {EDGE_PROXIES}; got edge_proxy={self.edge_proxy!r}"
            )
        if self.edge_proxy != "disagreement":
            raise ValueError(
                f"edge_proxy={self.edge_proxy!r} needs a score-norm or pair-energy predictor, "
                f"which the trainer does not train yet; use edge_proxy='disagreement'"
            )
        if self.weighting not in WEIGHTINGS:
            raise ValueError(
                f"weighting must be one of {WEIGHTINGS}; got weighting={self.weighting!r}"
            )
        if self.weighting == "clipped":
            if self.w_max is None or not self.w_max > 0:
                raise ValueError(
                    f"weighting='clipped' needs w_max > 0 (the clip level of 1/rho); "
                    f"got w_max={self.w_max!r}"
                )
        elif self.w_max is not None:
            raise ValueError(
                f"w_max is used only with weighting='clipped'; got w_max={self.w_max!r} with "
                f"weighting={self.weighting!r}"
            )
        fixed = self.design in FIXED_SIZE_DESIGNS
        if self.design_size is not None:
            if not fixed:
                raise ValueError(
                    f"design_size applies only to fixed-size designs {FIXED_SIZE_DESIGNS}; got "
                    f"design_size={self.design_size!r} with design={self.design!r}"
                )
            if not 2 <= self.design_size <= self.num_generations:
                raise ValueError(
                    f"design_size must lie in [2, num_generations={self.num_generations}] (a "
                    f"pair needs two completed candidates); got design_size={self.design_size!r}"
                )
            if self.num_generations * self.pi_min > self.design_size:
                raise ValueError(
                    f"design_size={self.design_size} is below num_generations * pi_min = "
                    f"{self.num_generations * self.pi_min:g}; no pi >= pi_min sums to it"
                )
        elif fixed:
            # size "auto" (pairht.allocation.auto_size): n = floor(G * budget_ratio), which must
            # reach max(2, ceil(G * pi_min)) for the budget to afford it
            g = self.num_generations
            lower = max(2, math.ceil(g * self.pi_min - 1e-12))
            if math.floor(g * self.budget_ratio * (1 + 1e-12)) < lower:
                raise ValueError(
                    f"design={self.design!r} completes n = floor(num_generations * budget_ratio) "
                    f"= {math.floor(g * self.budget_ratio)} candidates, below max(2, "
                    f"ceil(num_generations * pi_min)) = {lower}: raise budget_ratio or "
                    f"num_generations, or use design='bernoulli'"
                )
        if self.anchor_pair and fixed:
            raise ValueError(
                f"anchor_pair=True is defined for the Bernoulli base design only; a fixed-size "
                f"design already guarantees design_size >= 2 endpoints. Got anchor_pair=True "
                f"with design={self.design!r}"
            )
        if not 0.0 < self.head_temperature_fraction <= 1.0:
            raise ValueError(
                f"head_temperature_fraction must lie in (0, 1]; got "
                f"head_temperature_fraction={self.head_temperature_fraction!r}"
            )
        if not self.head_lr > 0:
            raise ValueError(f"head_lr must be > 0; got head_lr={self.head_lr!r}")
        if self.head_steps_per_update < 0 or self.head_batch_size < 1:
            raise ValueError(
                f"head_steps_per_update must be >= 0 and head_batch_size >= 1; got "
                f"head_steps_per_update={self.head_steps_per_update!r}, "
                f"head_batch_size={self.head_batch_size!r}"
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"PAIR combines reward functions as a weighted sum before the pair estimator; "
                f"multi_objective_aggregation must be 'sum_then_normalize', got "
                f"{self.multi_objective_aggregation!r}"
            )
        if self.use_transformers_continuous_batching:
            raise ValueError(
                "PairGRPOTrainer generates in two phases (prefix, then resume the selected "
                "candidates); use_transformers_continuous_batching=True is not supported. Use the "
                "default transformers backend or use_vllm=True (pairht_vllm)"
            )
        if self.use_vllm:
            unsupported = [
                ("vllm_enable_sleep_mode", self.vllm_enable_sleep_mode, False),
                ("vllm_structured_outputs_regex", self.vllm_structured_outputs_regex, None),
            ]
            if self.vllm_mode == "colocate":
                unsupported.append(
                    ("vllm_tensor_parallel_size", self.vllm_tensor_parallel_size, 1)
                )
            bad = [(k, v, want) for k, v, want in unsupported if v != want]
            if bad:
                raise ValueError(
                    "the two-phase vLLM backend (pairht_vllm) does not support "
                    + ", ".join(f"{k}={v!r} (use {want!r})" for k, v, want in bad)
                )
        if self.use_vllm and self.vllm_importance_sampling_correction:
            # The two-phase vLLM backend returns no sampling logprobs, and TRL's truncated
            # importance correction would reweight the pair-HT update away from the estimator.
            raise ValueError(
                "use_vllm=True requires vllm_importance_sampling_correction=False: PAIR's vLLM "
                "backend (pairht_vllm) returns no sampling logprobs and the correction would "
                "change the pair-HT estimator"
            )

    def _check_exact(self) -> None:
        rules = [
            ("num_iterations", self.num_iterations == 1, "1 (one epoch: PPO ratios are 1)"),
            ("scale_rewards", self.scale_rewards == "none", "'none' (no standardisation)"),
            ("loss_type", self.loss_type == "dr_grpo", "'dr_grpo' (constant loss normaliser)"),
            ("weighting", self.weighting == "exact", "'exact' (unclipped 1/rho)"),
            ("beta", self.beta == 0.0, "0 (no KL term)"),
            ("entropy_coef", self.entropy_coef == 0.0, "0 (no entropy bonus)"),
            ("use_adaptive_entropy", not self.use_adaptive_entropy, "False"),
            ("top_entropy_quantile", self.top_entropy_quantile == 1.0, "1.0 (every token)"),
            ("mask_truncated_completions", not self.mask_truncated_completions, "False"),
            ("off_policy_mask_threshold", self.off_policy_mask_threshold is None, "None"),
            # TRL's two-sided clip clamps the ratio at delta even at ratio 1 when delta < 1
            ("delta", self.delta is None, "None (no two-sided ratio clamp)"),
            # the scores TRL differentiates are those of the temperature-only policy: any
            # other sampling transform makes the samples off-policy for them
            ("top_p", self.top_p == 1.0, "1.0 (sample from the policy itself)"),
            ("top_k", self.top_k in (None, 0), "0 or None"),
            ("min_p", self.min_p in (None, 0.0), "None"),
            ("repetition_penalty", self.repetition_penalty == 1.0, "1.0"),
            (
                "steps_per_generation",
                self.steps_per_generation == self.gradient_accumulation_steps,
                f"gradient_accumulation_steps={self.gradient_accumulation_steps} (one "
                f"optimizer step per generation batch, on-policy)",
            ),
        ]
        bad = [(name, want) for name, ok, want in rules if not ok]
        if bad:
            got = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in bad)
            need = "; ".join(f"{name} must be {want}" for name, want in bad)
            raise ValueError(
                f"mode='exact' makes the update equal to the pair-HT estimator, which needs: "
                f"{need}. Got {got}. Use mode='practical' for the clipped surrogate."
            )
