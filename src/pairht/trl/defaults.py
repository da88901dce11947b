"""The TRL defaults PAIR changes, their one announcement, and ``args`` as TRL users pass it.

``PairGRPOTrainer(model, reward_funcs, args=...)`` takes what ``trl.GRPOTrainer`` takes:
``None`` (TRL's default output folder ``"<model name>-GRPO"``), a plain ``GRPOConfig``
(converted field by field, :func:`as_pair_config`) or a ``PairGRPOConfig``. Wherever TRL's
default would make the update something other than PAIR's estimator, the default is changed
for the user (:data:`CHANGED_DEFAULTS`, the table of docs/trl.md) and the change is announced
once per process at WARNING on the logger ``"pairht.trl"`` (:func:`announce_changed_defaults`).
A value the user chose explicitly is never changed: exact mode refuses it with the rule instead.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from trl import GRPOConfig

if TYPE_CHECKING:
    from pairht.trl.config import PairGRPOConfig

__all__ = ["CHANGED_DEFAULTS", "ChangedDefault", "announce_changed_defaults", "as_pair_config",
           "trl_default"]

logger = logging.getLogger("pairht.trl")


class ChangedDefault(NamedTuple):
    """One TRL default PAIR changes: the field, PAIR's value per mode, and why."""

    field: str
    exact: Any
    practical: Any
    why: str
    #: the change matters only with ``use_vllm=True`` (announced only then)
    vllm_only: bool = False


#: Every ``GRPOConfig`` default PAIR changes when the user leaves the field unset.
CHANGED_DEFAULTS: tuple[ChangedDefault, ...] = (
    ChangedDefault(
        "loss_type", "dr_grpo", "dr_grpo",
        "constant, mask-independent loss normaliser, so masking the unselected rows leaves "
        "the update a multiple of the pair-HT estimate"),
    ChangedDefault(
        "scale_rewards", "none", "group",
        "dividing by a random reward std biases the pair-HT update (exact mode)"),
    ChangedDefault(
        "num_iterations", 1, 2,
        "one epoch keeps every PPO ratio at 1 (exact); practical mode takes two clipped "
        "epochs (paper)"),
    ChangedDefault(
        "vllm_importance_sampling_correction", False, False,
        "PAIR's vLLM backend returns no sampling log-probabilities, and the truncated "
        "importance correction would reweight the pair-HT update away from the estimator",
        vllm_only=True),
)

_ANNOUNCED: set[str] = set()


def trl_default(name: str) -> Any:
    """The default of ``GRPOConfig``'s field ``name`` (TRL's own, before any ``__post_init__``)."""
    return next(f.default for f in dataclasses.fields(GRPOConfig) if f.name == name)


def announce_changed_defaults(mode: str, changed: dict[str, Any]) -> str | None:
    """Log, once per process, the TRL defaults a config changed; return the line (or ``None``).

    Parameters
    ----------
    mode : {"exact", "practical"}
        The config's mode (named in the line).
    changed : dict
        ``field -> PAIR's value`` for every field of :data:`CHANGED_DEFAULTS` the config left
        unset and resolved to a value other than TRL's default.

    Returns
    -------
    str or None
        The WARNING line, ``None`` when nothing changed or the same line was already logged
        by this process (a sweep building many configs says it once).

    Examples
    --------
    >>> line = announce_changed_defaults("exact", {"loss_type": "dr_grpo"})
    >>> "loss_type='dapo' -> 'dr_grpo'" in line
    True
    >>> announce_changed_defaults("exact", {"loss_type": "dr_grpo"}) is None
    True
    """
    if not changed:
        return None
    why = {c.field: c.why for c in CHANGED_DEFAULTS}
    line = (f"PairGRPOConfig(mode={mode!r}) changes TRL's GRPOConfig defaults: "
            + "; ".join(f"{name}={trl_default(name)!r} -> {value!r} ({why[name]})"
                        for name, value in changed.items())
            + ". Pass a field explicitly to choose it (see docs/trl.md, 'TRL defaults').")
    if line in _ANNOUNCED:
        return None
    _ANNOUNCED.add(line)
    logger.warning("%s", line)
    return line


def _model_name(model: Any) -> str:
    """TRL's name for the default output folder: the last path part of the model's id."""
    from trl.trainer.utils import get_config_model_id

    name = model if isinstance(model, str) else get_config_model_id(model.config)
    return str(name).split("/")[-1]


def device_defaults() -> dict[str, Any]:
    """TRL's defaults train in bf16 on a GPU and are refused where there is none; without a
    GPU, ``args=None`` trains on the CPU in float32 instead (``use_cpu=True, bf16=False``)."""
    import torch

    return {} if torch.cuda.is_available() else {"use_cpu": True, "bf16": False}


def as_pair_config(args: Any, model: Any) -> PairGRPOConfig:
    """``args`` as ``trl.GRPOTrainer`` accepts it, as a :class:`PairGRPOConfig`.

    Parameters
    ----------
    args : None, GRPOConfig or PairGRPOConfig
        ``None``: PAIR's defaults with TRL's output folder ``"<model name>-GRPO"`` (on a
        machine without a GPU, where TRL's bf16 default is refused, ``use_cpu=True`` and
        ``bf16=False``). A plain
        ``GRPOConfig``: every field copied; a field of :data:`CHANGED_DEFAULTS` still at TRL's
        default is left for PAIR to resolve (announced), any other value is kept, so a choice
        exact mode cannot run (e.g. ``beta=0.04``) is refused with its rule. A
        ``PairGRPOConfig`` is returned as it is.
    model : str or PreTrainedModel
        The trainer's model (names the output folder when ``args`` is ``None``).

    Returns
    -------
    PairGRPOConfig

    Raises
    ------
    ValueError
        ``args`` of any other type.

    Examples
    --------
    >>> from trl import GRPOConfig
    >>> plain = GRPOConfig(output_dir="out", report_to=[], use_cpu=True, num_generations=4,
    ...                    per_device_train_batch_size=4, learning_rate=3e-6)
    >>> cfg = as_pair_config(plain, "org/model")
    >>> (type(cfg).__name__, cfg.learning_rate, cfg.loss_type, cfg.scale_rewards)
    ('PairGRPOConfig', 3e-06, 'dr_grpo', 'none')
    >>> as_pair_config(None, "org/model").output_dir
    'model-GRPO'
    """
    from pairht.trl.config import PairGRPOConfig

    if isinstance(args, PairGRPOConfig):
        return args
    if args is None:
        return PairGRPOConfig(output_dir=f"{_model_name(model)}-GRPO", **device_defaults())
    if not isinstance(args, GRPOConfig):
        raise ValueError(
            f"args must be None, a trl.GRPOConfig or a PairGRPOConfig (PAIR's knobs live "
            f"there); got {type(args).__name__}")
    kwargs = {f.name: getattr(args, f.name) for f in dataclasses.fields(GRPOConfig) if f.init}
    for c in CHANGED_DEFAULTS:
        if kwargs[c.field] == trl_default(c.field):
            kwargs[c.field] = None  # left to PAIR (resolved from the mode, announced)
    # GRPOConfig derives one of the two from the other; passing both back is refused
    kwargs["generation_batch_size"] = None
    return PairGRPOConfig(**kwargs)
