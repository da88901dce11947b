r"""Audit mode: dump fully generated candidate populations of the live policy.

At chosen training steps, :class:`AuditCallback` (or a direct call of
:func:`collect_population`) takes ``P`` prompts, generates ``G`` candidates each *to the end*
(no design: every suffix is completed), and writes them in the audit population format of
:mod:`pairht.audit.population`, so that ``pairht audit --population FILE`` replays every design
and estimator on a real model's population (PAIR paper, section "Frozen-policy estimator
audit").

Per candidate it records the prefix heads' predictions ``p_hat``, ``c_hat`` at the prefix
checkpoint (the same two-phase generator and heads the trainer allocates with), the realised
reward (the trainer's reward functions, weighted sum), the realised suffix tokens, the prefix
length, and the sequence score on a fixed parameter block:

.. math:: s_i = \nabla_{\theta_{block}} \log \pi_\theta(o_i \mid q)
              = \nabla_{\theta_{block}} \sum_t \log \pi_\theta(o_{i,t} \mid q, o_{i,<t}),

computed by autograd, one unpadded sequence at a time (positions ``0..len-1``, so the score does
not depend on batch padding). The default block is the policy's final normalisation weight (the
last parameter whose name ends in ``norm.weight``, e.g. ``model.norm.weight`` of Llama/Qwen):
small (``hidden_size`` entries), present in every decoder, and upstream of the LM head, so its
scores mix information from every position. Any parameter can be named instead.

Finished prefixes: a candidate whose prefix already ended (no suffix) is complete, so it is
marked ``finished`` (the audit keeps it with probability 1, at no cost). The population format
requires realised costs ``> 0``, so its cost is recorded as 1 token (``meta["n_cost_floored"]``
counts them); its ``c_hat`` is the heads' prediction, which no allocation reads.

Score norms: ``m_hat = sqrt(prefix_len + [not finished] c_hat)``
(:func:`pairht.torch.heads.score_norm_proxy`), the input of the length-scaled edge proxy.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback

from pairht.designs.base import srswor_sample
from pairht.trl.config import RewardFailureWarning

__all__ = ["AuditCallback", "AutoWidthCallback", "collect_population", "default_score_block"]

_log = logging.getLogger("pairht.trl")


def default_score_block(model: torch.nn.Module) -> str:
    """Name of the final normalisation weight: the last parameter ending in ``norm.weight``."""
    names = [name for name, _ in model.named_parameters() if name.endswith("norm.weight")]
    if not names:
        raise ValueError(
            "the model has no parameter ending in 'norm.weight'; pass block= with the name of "
            "the parameter to take scores on"
        )
    return names[-1]


def _sequence_scores(
    model: torch.nn.Module,
    block: torch.nn.Parameter,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    temperature: float,
) -> np.ndarray:
    """``(rows, block.numel())`` float64 scores, one unpadded forward/backward per row."""
    device = block.device
    out = np.zeros((len(prompt_ids), block.numel()), dtype=np.float64)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        if not c:
            continue  # an empty completion has log-prob 0 and score 0
        ids = torch.tensor([list(p) + list(c)], device=device)
        # fused_lm_head=False: the plain forward (TRL patches a float32 fused head onto models)
        logits = model(input_ids=ids).logits[0, len(p) - 1 : -1].double() / temperature
        target = torch.tensor(list(c), device=device)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, target[:, None]).sum()
        (grad,) = torch.autograd.grad(logp, block)
        out[i] = grad.detach().double().cpu().numpy().reshape(-1)
    return out


def collect_population(
    trainer: Any,
    examples: Sequence[dict[str, Any]],
    path: str | os.PathLike[str] | None = None,
    *,
    block: str | None = None,
    head_labels: bool = False,
) -> Any:
    """Generate ``G`` full candidates for each example and build (and save) a Population.

    Parameters
    ----------
    trainer : PairGRPOTrainer
        Supplies the policy, two-phase generator, heads, reward functions and ``G``.
    examples : sequence of dataset rows (dicts with ``"prompt"`` and reward columns)
        One per audited prompt (``P = len(examples)``).
    path : path-like, optional
        Where to write the ``.npz`` (:func:`pairht.audit.population.save_population`).
    block : str, optional
        Parameter name the scores are taken on; default :func:`default_score_block`.
    head_labels : bool
        Also return the heads' labels of these complete groups (every candidate observed,
        ``pi = 1``): ``{"features", "rewards", "costs", "pi", "mask"}`` as numpy arrays, the
        arguments of the head trainer's ``add``.

    Returns
    -------
    pairht.audit.population.Population
        And the labels when ``head_labels``. Its ``meta["reward_failures"]`` counts the
        completions scored 0 because their reward function raised (``reward_failure="zero"``
        only; a ``RewardFailureWarning`` says so).

    Raises
    ------
    pairht.trl.config.RewardFunctionError
        A reward function raised, with ``reward_failure="raise"`` (the default); the message
        names the function and the example (the prompt index).
    """
    from trl.data_utils import is_conversational
    from trl.trainer.grpo_trainer import GRPOTrainer

    from pairht.audit.population import Population, save_population
    from pairht.torch.heads import score_norm_proxy
    from pairht.trl.gather import process_local_reward_gather

    if not examples:
        raise ValueError("examples must hold at least one prompt row; got none")
    g = trainer.pair_args.num_generations
    rows = [dict(x) for x in examples for _ in range(g)]
    prompts = [x["prompt"] for x in rows]
    prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
    model = trainer.accelerator.unwrap_model(trainer.model)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            prefix = trainer.generation_backend.generate_prefixes(model, prompt_ids)
            p_hat, c_hat = trainer.head_trainer.predict(trainer.head_inputs(prefix))
            full = trainer.generation_backend.continue_selected(
                model, prefix, list(range(len(rows)))
            )
        texts = trainer.processing_class.batch_decode(full, skip_special_tokens=True)
        if is_conversational({"prompt": prompts[0]}):
            completions: list[Any] = [[{"role": "assistant", "content": t}] for t in texts]
        else:
            completions = texts
        # The trainer's reward policy applies (reward_failure): "raise" names the prompt (row
        # // g is the example), "zero" scores 0; those zeros are the audit's, not training's,
        # so they are taken out of the trainer's count and recorded in the population's meta.
        before = trainer._pair_stats["reward_failures"]
        where = trainer._reward_rows
        where.rows, where.group_size = list(range(len(rows))), g
        try:
            with process_local_reward_gather():
                per_func = GRPOTrainer._calculate_rewards(trainer, rows, prompts, completions,
                                                          full)
        finally:
            where.rows = where.group_size = None
            n_failed = trainer._pair_stats["reward_failures"] - before
            trainer._pair_stats["reward_failures"] = before
        weights = trainer.reward_weights.to(per_func.device, per_func.dtype)
        rewards = (per_func * weights).nansum(dim=1).double().cpu().numpy()
        name = block or default_score_block(model)
        param = dict(model.named_parameters())[name]
        scores = _sequence_scores(model, param, prompt_ids, full, trainer.temperature)
    finally:
        model.train(was_training)
    prefix_len = np.array([len(x) for x in prefix.prefix_ids], dtype=np.int64)
    suffix = np.array([len(f) for f in full], dtype=np.int64) - prefix_len
    done = np.asarray(prefix.prefix_done.cpu(), dtype=bool)
    # c_hat > 0 by the format; a cost head that underflows is floored at a token's billionth.
    c_pred = np.maximum(np.asarray(c_hat, dtype=np.float64), 1e-9)
    shape = (len(examples), g)
    pop = Population(
        p_hat=np.asarray(p_hat, dtype=np.float64).reshape(shape),
        c_hat=c_pred.reshape(shape),
        rewards=rewards.reshape(shape),
        costs=np.maximum(suffix, 1).astype(np.float64).reshape(shape),
        prefix_len=prefix_len.reshape(shape),
        finished=done.reshape(shape),
        m_hat=score_norm_proxy(prefix_len, c_pred, done).reshape(shape),
        scores=scores.reshape(*shape, -1),
        meta={
            "source": "pairht.trl.audit_mode",
            "step": int(trainer.state.global_step),
            "score_block": name,
            "tau": trainer.pair_args.tau,
            "snap_window": trainer.pair_args.snap_window,
            "temperature": float(trainer.temperature),
            "n_cost_floored": int((suffix < 1).sum()),
            "reward_failures": int(n_failed),
            "model": getattr(model.config, "_name_or_path", "") or type(model).__name__,
        },
    )
    if n_failed:
        warnings.warn(
            f"audit population at step {int(trainer.state.global_step)}: {n_failed} "
            f"completion(s) scored 0 because their reward function raised "
            f"(reward_failure='zero'; meta['reward_failures'] records it)",
            RewardFailureWarning,
            stacklevel=2,
        )
    if path is not None:
        save_population(path, pop)
    if not head_labels:
        return pop
    # Every candidate completed: IPW weights 1. The success head predicts P(r = 1) (rewards
    # clipped to [0, 1]); a prefix that already ended has cost 0 ("success head only"), as in
    # the trainer's own labels.
    labels = {
        "features": trainer.head_inputs(prefix).detach().float().cpu().numpy(),
        "rewards": np.clip(np.nan_to_num(rewards, nan=0.0), 0.0, 1.0),
        "costs": np.where(done, 0.0, suffix).astype(np.float64),
        "pi": np.ones(len(rows)),
        "mask": np.ones(len(rows), dtype=bool),
    }
    return pop, labels


class AuditCallback(TrainerCallback):
    """Write an audit population at chosen global steps (main process only).

    Parameters
    ----------
    steps : iterable of int
        Global steps after which to audit (0 audits before training starts).
    n_prompts : int
        Prompts per population, the first ``n_prompts`` rows of ``dataset`` (default: the
        trainer's training set).
    output_dir : str, optional
        Folder for ``population-step{N}.npz``; default ``<args.output_dir>/audit``.
    block : str, optional
        Score block parameter name (default: the final norm weight).
    dataset : sequence of rows, optional
    advise : bool
        After writing a population, audit PAIR's prefix rules (``"pair"``, each prompt at its
        own budget, and ``"pair_batch"``, one budget for the batch) against small-group GRPO
        on it at the trainer's ``budget_ratio`` (:func:`pairht.audit.width_advice`, exact, a
        few seconds): log the verdict at INFO and the metrics ``pair/width_mse_ratio`` (the
        better prefix rule's exact MSE over GRPO's at the same generated tokens; above 1 the
        prefixes do not pay) and
        ``pair/width_grpo_group_size`` (the ``G'`` to use instead), and keep it in
        ``advice`` as ``(step, WidthAdvice)``. Default True.
    switch_width : bool
        Act on the advice (needs ``advise``): from the next generation batch on, train with
        ``width="whole"`` and ``whole_group_size = G'`` (small-group GRPO inside the trainer,
        no prefixes) when the verdict is small-group GRPO, with ``width="prefixes"`` and
        the verdict's rule as ``allocator`` (``"pair"``, ``"pair_batch"``, ...) when it is a
        prefix rule at full width, and with ``width="subset"``, the audit's width as
        ``prefix_group_size`` and the option's inner rule as ``allocator`` when it is a
        narrower width (``"pair_dr_narrow"``: ``"pair_dr"`` among a uniform subset;
        :meth:`pairht.trl.PairGRPOTrainer.set_width`; the main process decides, every
        process follows). A population with no reward contrast changes
        nothing. Default False: the callback only reports. ``G'`` is clipped to
        ``[2, num_generations]``.

    Notes
    -----
    Pass it in ``callbacks=[...]`` of :class:`~pairht.trl.PairGRPOTrainer`, which binds itself.
    """

    def __init__(
        self,
        steps: Iterable[int],
        n_prompts: int = 8,
        output_dir: str | None = None,
        block: str | None = None,
        dataset: Sequence[dict[str, Any]] | None = None,
        advise: bool = True,
        switch_width: bool = False,
    ) -> None:
        self.steps = sorted({int(s) for s in steps})
        if any(s < 0 for s in self.steps):
            raise ValueError(f"steps must be >= 0; got {self.steps}")
        if isinstance(n_prompts, bool) or not isinstance(n_prompts, int) or n_prompts < 1:
            raise ValueError(f"n_prompts must be a positive int; got {n_prompts!r}")
        self.n_prompts = n_prompts
        self.output_dir = output_dir
        self.block = block
        self.dataset = dataset
        self.advise = bool(advise)
        if switch_width and not advise:
            raise ValueError("switch_width=True acts on the audit's advice; it needs advise=True")
        self.switch_width = bool(switch_width)
        # the main process's decision from its latest audit: set_width's arguments (width,
        # whole_group_size, allocator, prefix_group_size); None: keep as is.
        self._decision: tuple[str, float | None, str | None, int | None] | None = None
        self.trainer: Any = None
        self.written: list[str] = []
        self.advice: list[tuple[int, Any]] = []

    def _audit(self, step: int) -> None:
        trainer = self.trainer
        if trainer is None:
            raise ValueError(
                "AuditCallback is not bound to a trainer; pass it in callbacks= of "
                "PairGRPOTrainer"
            )
        if not trainer.accelerator.is_main_process:
            return
        data = self.dataset if self.dataset is not None else trainer.train_dataset
        examples = [dict(data[i]) for i in range(min(self.n_prompts, len(data)))]
        folder = self.output_dir or os.path.join(trainer.args.output_dir, "audit")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"population-step{step}.npz")
        population = collect_population(trainer, examples, path, block=self.block)
        self.written.append(path)
        if self.advise and len(examples) >= 2:
            self._advise(step, population)

    def _advise(self, step: int, population: Any) -> None:
        """Do the prefixes pay on this population? (:func:`pairht.audit.width_advice`.)"""
        from pairht.audit import narrow_rule, width_advice
        from pairht.audit.width import NARROW_OPTIONS
        from pairht.trl.config import switchable_rules

        args = self.trainer.args
        # only rules the trainer can switch to under its weighting (pair_dr needs exact)
        adv = width_advice(population, args.budget_ratio, pi_min=args.pi_min, seed=step,
                           options=switchable_rules(args.weighting))
        self.advice.append((step, adv))
        if adv.choice == "grpo_small":
            g = self.trainer.pair_args.num_generations
            self._decision = ("whole", float(min(max(adv.group_size, 2.0), g)), None, None)
        elif adv.choice in NARROW_OPTIONS:  # prefixes for a uniform subset, the inner rule
            self._decision = ("subset", None, narrow_rule(adv.choice), adv.prefix_width)
        elif adv.choice != "none":  # a prefix rule (pairht.step.PREFIX_RULES)
            self._decision = ("prefixes", None, adv.choice, None)
        m = self.trainer._metrics["train"]
        m["pair/width_mse_ratio"].append(adv.ratio)
        m["pair/width_grpo_group_size"].append(adv.group_size)
        _log.info("audit at step %d: %s", step, adv.line())

    def _switch(self) -> None:
        """Every process takes the main process's width decision (``switch_width``)."""
        from pairht.torch.distributed import broadcast_from_main

        decision = broadcast_from_main(self.trainer.accelerator, self._decision)
        self._decision = None
        if decision is not None:
            self.trainer.set_width(*decision)
            a = self.trainer.pair_args
            _log.info("audit: training on with width=%r, whole_group_size=%r, allocator=%r, "
                      "prefix_group_size=%r", a.width, a.whole_group_size, a.allocator,
                      a.prefix_group_size)

    def on_train_begin(self, args, state, control, **kwargs):
        if 0 in self.steps and state.global_step == 0:
            self._audit(0)
            if self.switch_width:
                self._switch()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            self._audit(state.global_step)
            if self.switch_width:
                self._switch()


class AutoWidthCallback(AuditCallback):
    """PAIR's default (``width="auto"``): audit, decide the width, train on; added by the
    trainer itself.

    Before the first step (and on resuming), and every ``every`` optimizer steps, the main
    process draws ``n_prompts`` prompts of the training set at random (seeded by ``args.seed``
    and the step), generates every candidate to the end (:func:`collect_population`), and hands the
    population to the trainer's :class:`pairht.audit.AutoWidth`, which pools the newest audits
    and decides (small-group GRPO, or the difference estimator among a subset's or every
    candidate's prefixes); every process takes the decision
    (:meth:`~pairht.trl.PairGRPOTrainer.set_width`). The audited groups are complete, so their
    prefixes also become head labels (``pi = 1``) on every process and the heads refit: under
    a small-group GRPO verdict, which generates no prefixes, the heads still learn, and a later
    audit can leave GRPO once the prefixes pay. Tokens the audits generate are counted in the
    trainer's ``pair_audit_tokens`` and logged as ``pair/audit_tokens``; the option running is
    logged every step as ``pair/auto_option`` (its index in the trainer's
    ``auto_width.options``) and every decision at INFO with its reason (kept in
    ``decisions`` as ``(step, option, reason)``).

    The audit runs on the main process only, as :class:`AuditCallback`'s: a generation
    backend whose generation is a collective across processes (vLLM server mode) is not
    supported with it.
    """

    def __init__(self, every: int, n_prompts: int) -> None:
        super().__init__(steps=[0], n_prompts=n_prompts, advise=False)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive int; got {every!r}")
        self.every = every
        self.decisions: list[tuple[int, str, str]] = []

    def _examples(self, step: int) -> list[dict[str, Any]]:
        data = self.trainer.train_dataset
        n = min(self.n_prompts, len(data))
        gen = np.random.default_rng([int(self.trainer.args.seed), int(step), 59])
        pick = srswor_sample([n], np.ones((1, len(data)), dtype=bool), gen)[0]
        return [dict(data[int(i)]) for i in np.flatnonzero(pick)]

    def _decide(self, step: int) -> None:
        from pairht.torch.distributed import broadcast_from_main

        trainer = self.trainer
        if trainer is None:
            raise ValueError("AutoWidthCallback is not bound to a trainer; PairGRPOTrainer "
                             "adds it itself with width='auto'")
        found: tuple[Any, Any, int] | None = None
        if trainer.accelerator.is_main_process:
            pop, labels = collect_population(trainer, self._examples(step), None,
                                             block=self.block, head_labels=True)
            tokens = int(pop.prefix_len.sum()
                         + np.where(pop.finished, 0.0, pop.costs).sum())
            decision = trainer.auto_width.observe(pop, seed=step)
            found = (decision, labels, tokens)
        decision, labels, tokens = broadcast_from_main(trainer.accelerator, found)
        trainer.pair_audit_tokens += tokens
        heads = trainer.head_trainer
        heads.add(labels["features"], labels["rewards"], labels["costs"], labels["pi"],
                  labels["mask"], group_size=trainer.pair_args.num_generations)
        heads.update()
        m = trainer._metrics["train"]
        m["pair/audit_tokens"].append(float(tokens))
        m["pair/width_mse_ratio"].append(decision.advice.ratio)
        trainer.set_width(decision.width, decision.whole_group_size, decision.allocator,
                          decision.prefix_group_size)
        trainer.auto_option = decision.advice.choice
        self.decisions.append((step, decision.advice.choice, decision.reason))
        _log.info("width='auto' at step %d: %s", step, decision.reason)

    def on_train_begin(self, args, state, control, **kwargs):
        # before the first step, and on resuming from a checkpoint (the pooled audits are not
        # checkpointed: the resumed run decides afresh)
        self._decide(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        # none after the last step: no batch would run on its decision
        if state.global_step % self.every == 0 and state.global_step < state.max_steps:
            self._decide(state.global_step)
