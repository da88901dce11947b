r"""Prefix heads: success probability and remaining-cost predictors on prefix hidden states.

PAIR paper, Eq. heads and appendix "Heads and calibration":

    p_hat_i = sigmoid(f(u_i) / T),        c_hat_i = softplus(g(u_i))

with ``u_i`` the detached mean of the last 16 prefix hidden states and ``T`` a scalar
temperature. Labels come only from completed candidates, so every loss weights a label by
``J_i / pi_i`` (Eq. head-losses; :mod:`pairht.calibration`).

Two head families, chosen by ``HeadTrainer(head=...)``:

* ``"linear"`` (default): the cross-validated L2 linear probe of :mod:`pairht.heads_fit`
  (logistic success head with a fitted temperature, ridge on ``log C`` for the cost), refitted
  on the replay window at every update. With a few hundred labels it is the one that beats a
  constant predictor on held-out data (``docs/real_model.md``: on SmolLM2-135M's population
  the paper's MLP has negative held-out Brier skill);
* ``"mlp"``: the paper's two-layer MLPs (width 256, SiLU, layer normalisation) trained by Adam,
  temperature on the newest quarter of a 2,048-label window (:class:`PrefixHeads`).

Whatever the family, :class:`HeadTrainer` measures its held-out skill prequentially (each label
is scored by the predictor in use *before* any fit has seen it) and exposes it as
``HeadTrainer.skill_success`` (Brier skill) and ``HeadTrainer.skill_cost`` (R^2 of log cost).
:func:`cross_fit_heads` fits heads on a stored population, cross-fitted by prompt.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from threadpoolctl import ThreadpoolController
from torch import nn

from pairht import calibration
from pairht._validation import check_probabilities, check_shape
from pairht.heads_fit import (
    LinearProbe,
    brier_skill,
    fit_linear_probe,
    group_folds,
    log_cost_r2,
    reliability_slope,
    skill_score,
)
from pairht.step.inputs import score_norm_proxy

__all__ = ["HEAD_KINDS", "SHRINK_MEASURES", "CrossFit", "HeadTrainer", "PrefixHeads",
           "cross_fit_heads", "score_norm_proxy"]

#: Head families of :class:`HeadTrainer` (``head=``); the first is the default.
HEAD_KINDS = ("linear", "mlp")

#: What the trainer shrinks the predictions toward their group mean by
#: (``PairGRPOConfig.shrink_by``), both measured held out by :meth:`HeadTrainer.skill`; the
#: first is the default. ``"slope"``: the reliability slope of the within-group deviations,
#: the least-squares shrinkage (1 for a calibrated head, 0 for an uninformative one);
#: ``"skill"``: the Brier skill / R^2, which is below 1 even for a perfect head.
SHRINK_MEASURES = ("slope", "skill")

# Columns of HeadTrainer._held_out, one row per label (NaN where not scored): squared errors of
# the heads and of the constant reference (success, then log cost), then the within-group
# deviations of the prediction and of the label from the group's mean prediction (success,
# then cost; see `pairht.heads_fit.reliability_slope`).
_HELD_OUT_COLUMNS = 8

# softplus(SOFTPLUS_ONE) = 1: the cost head starts by predicting exactly `cost_scale` tokens.
SOFTPLUS_ONE = math.log(math.e - 1.0)


def _mlp(hidden_size: int, width: int) -> nn.Sequential:
    # Layer norm after the first linear map: it keeps the pre-activations at unit scale whatever
    # the scale of the policy's hidden states, and, unlike a norm on the input, it loses no
    # information about u (an input norm would discard u's mean and length).
    return nn.Sequential(
        nn.Linear(hidden_size, width),
        nn.LayerNorm(width),
        nn.SiLU(),
        nn.Linear(width, 1),
    )


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """One :class:`threadpoolctl.ThreadpoolController` per process. Why: each
    ``threadpool_limits(...)`` scans the loaded libraries again (~7 ms, a sixth of a refit's
    cost on a small window); the controller scans once and only sets the limits after. It
    sees the libraries loaded when first called (at the first refit: numpy's BLAS, which the
    refit uses, is loaded with numpy)."""
    return ThreadpoolController()


def _as_numpy(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _as_features(features, hidden_size: int, device) -> torch.Tensor:
    u = torch.as_tensor(features) if not isinstance(features, torch.Tensor) else features
    if u.ndim < 1 or u.shape[-1] != hidden_size:
        raise ValueError(
            f"features must have shape (..., {hidden_size}) (hidden size of the heads); "
            f"got {tuple(u.shape)}"
        )
    u = u.detach().to(device=device, dtype=torch.float32)
    if not torch.isfinite(u).all():
        raise ValueError("features must be finite (no NaN or inf)")
    return u


class PrefixHeads(nn.Module):
    r"""Success and cost heads on prefix features.

    ``p_hat = sigmoid(f(u) / T)`` and ``c_hat = s * softplus(g(u))``, with ``f``, ``g`` two-layer
    MLPs ``Linear(hidden, width) -> LayerNorm(width) -> SiLU -> Linear(width, 1)``. The constant
    ``s = cost_scale`` (tokens) only re-parameterises the last layer of ``g``: predicted costs
    are hundreds of tokens, and a head that had to move its output bias to 500 at an Adam step
    of 1e-3 would need 10^5 steps. Both output layers start at zero (``p_hat = 1/2``,
    ``c_hat = s``): an uninformed but finite prior before any label arrives.

    Parameters
    ----------
    hidden_size : int        dimension of the features ``u``
    width : int              MLP hidden width (paper: 256)
    cost_scale : float > 0   token scale ``s`` of the cost head

    Examples
    --------
    >>> heads = PrefixHeads(8, width=16, cost_scale=300.0)
    >>> p, c = heads.predict(torch.zeros(2, 8))
    >>> p.tolist(), c.tolist()
    ([0.5, 0.5], [300.0, 300.0])
    """

    # buffers registered in __init__, declared so the type checker reads them as tensors
    temperature: torch.Tensor
    cost_scale: torch.Tensor

    def __init__(self, hidden_size: int, width: int = 256, cost_scale: float = 1.0):
        super().__init__()
        if hidden_size < 1 or width < 1:
            raise ValueError(
                f"hidden_size and width must be positive; got hidden_size = {hidden_size}, "
                f"width = {width}"
            )
        if not cost_scale > 0:
            raise ValueError(f"cost_scale must be > 0 tokens; got cost_scale = {cost_scale!r}")
        self.hidden_size, self.width = int(hidden_size), int(width)
        self.success = _mlp(hidden_size, width)
        self.cost = _mlp(hidden_size, width)
        for head, bias in ((self.success, 0.0), (self.cost, SOFTPLUS_ONE)):
            last = head[-1]
            assert isinstance(last, nn.Linear)  # _mlp ends in a Linear layer
            nn.init.zeros_(last.weight)
            nn.init.constant_(last.bias, bias)
        self.register_buffer("temperature", torch.tensor(1.0, dtype=torch.float64))
        self.register_buffer("cost_scale", torch.tensor(float(cost_scale), dtype=torch.float64))

    def forward(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(f(u), c_hat)``: untempered success logits and predicted costs, ``(...)``."""
        logits = self.success(u).squeeze(-1)
        c_hat = self.cost_scale.to(u.dtype) * nn.functional.softplus(self.cost(u).squeeze(-1))
        return logits, c_hat

    @torch.no_grad()
    def predict(self, features) -> tuple[np.ndarray, np.ndarray]:
        """``(p_hat, c_hat)`` as float64 arrays of shape ``features.shape[:-1]``."""
        device = self.temperature.device
        u = _as_features(features, self.hidden_size, device)
        logits, c_hat = self(u)
        p_hat = torch.sigmoid(logits.double() / self.temperature)
        return p_hat.cpu().numpy(), c_hat.double().cpu().numpy()


def _probe_state(probe: LinearProbe | None) -> dict | None:
    """A :class:`LinearProbe` as tensors and floats (``torch.load(weights_only=True)``-safe)."""
    if probe is None:
        return None
    return {
        f.name: (torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else float(v))
        for f in fields(probe)
        for v in (getattr(probe, f.name),)
    }


def _probe_from_state(sd: dict | None) -> LinearProbe | None:
    if sd is None:
        return None
    values: dict[str, Any] = {
        k: v.numpy().copy() if isinstance(v, torch.Tensor) else float(v) for k, v in sd.items()
    }
    return LinearProbe(**values)


class HeadTrainer:
    r"""Trains prefix heads on delayed, inverse-probability-weighted labels, and measures them.

    Each RL step: ``predict`` (heads frozen) -> allocation and design -> completion ->
    ``add`` (labels of the completed candidates, with their inclusion probabilities) ->
    ``update`` (PAIR paper, Algorithm 1, last line).

    ``head="linear"`` (default): ``update`` refits the cross-validated L2 linear probe
    (:func:`pairht.heads_fit.fit_linear_probe`) on the replay window, every label weighted by
    ``w_b = 1 / pi_b``; the folds are contiguous blocks of the window (labels arrive a batch at
    a time). Before the first update it predicts ``p_hat = 1/2``, ``c_hat = cost_scale``.

    ``head="mlp"``: ``update`` runs ``steps_per_update`` Adam steps of :class:`PrefixHeads` on
    minibatches of the replay window minimising

        L = mean_b (w_b / w_bar) (sigmoid(f(u_b)) - r_b)^2
          + mean_b (w_b / w_bar) [C_b > 0] (log c_hat_b - log C_b)^2,        w_b = 1 / pi_b,

    the IPW losses of Eq. head-losses with ``w_bar`` the mean weight in the window, then fits
    the temperature ``T`` on the newest quarter of the window
    (:func:`pairht.calibration.fit_temperature`).

    Rows whose prefix already ended carry a cost of 0 and train only the success head.

    **Held-out skill** (prequential, IPW-corrected). ``add`` scores every new label with the
    predictor in use before appending it (no fit has seen it yet), against the constant
    predictor of the labels already in the window (``p_bar``: IPW mean reward; ``c_bar``: IPW
    geometric mean of the positive costs; the heads' own prior when the window is empty). Over
    the window's labels that a fitted predictor scored (labels predicted by the untrained prior,
    before the first update, or the second with ``lagged``, say nothing and are left out),

        skill_success = 1 - sum_b w_b (p_hat_b - r_b)^2 / sum_b w_b (p_bar_b - r_b)^2
        skill_cost    = 1 - sum_b w_b (log c_hat_b - log C_b)^2
                            / sum_b w_b (log c_bar_b - log C_b)^2          (over C_b > 0),

    read as :attr:`skill_success` and :attr:`skill_cost` (NaN until a label is scored). Positive:
    the heads beat the constant on labels they had not seen; 0 or below: they do not help.

    Parameters
    ----------
    hidden_size : int
        Feature dimension (the policy's hidden size).
    head : {"linear", "mlp"}
        Head family (see above).
    width : int
        MLP width (paper: 256); ``head="mlp"`` only.
    lr : float
        Adam learning rate; ``head="mlp"`` only.
    replay : int
        Replay window, in labels (paper: 2048).
    lagged : bool
        If True, ``predict`` uses the heads of the previous checkpoint (the heads as they were
        before the latest ``update``), to reduce adaptive overfitting.
    steps_per_update : int
        Adam steps per ``update``; ``head="mlp"`` only.
    batch_size : int
        Minibatch size (drawn without replacement from the window each step); ``"mlp"`` only.
    cost_scale : float, optional
        Prior cost prediction before the first update and token scale of the MLP cost head (see
        :class:`PrefixHeads`). ``None``: the IPW mean of the first cost labels seen by
        ``update``.
    temperature_fraction : float
        Newest fraction of the window the MLP temperature is fitted on (paper: 1/4).
    n_components : int or None
        Principal directions the linear probe keeps (:func:`~pairht.heads_fit.fit_linear_probe`).
    passthrough : int
        The last ``passthrough`` feature columns the linear probe keeps whole beside those
        principal directions (the trainer passes the two confidence features,
        :data:`pairht.rollout.features.CONFIDENCE_FEATURES`, here).
    refit_every, refit_growth, refit_below : int, float or None, int
        ``head="linear"``: when to refit the cross-validated probe. An ``update`` refits when
        the probe is older than ``refit_every - 1`` updates (default 4: at most three updates
        without a refit), or when the labels added since the last refit reach ``refit_growth``
        times the labels that refit saw (default 0.25; None: off), or while the window holds
        at most ``refit_below`` labels (default 0: never on this ground), and always at the
        first update. In between, new labels are added to the window and scored
        prequentially by the probe in use. Why: a refit is 45 Newton solves (4-fold
        cross-validation over 11 penalties) at any window size, the largest share of the
        heads' time in a PAIR step, while what it changes shrinks as the window grows; the
        growth rule refits on every update while each batch is a large share of the window
        (the first five updates at a constant batch size), then every second, third and
        fourth. ``refit_every=1`` refits on every update.
    device : str or torch.device
    seed : int
        Seeds head initialisation and minibatch draws (no global RNG is touched).

    Examples
    --------
    >>> tr = HeadTrainer(8)
    >>> u = np.random.default_rng(0).normal(size=(4, 8))
    >>> tr.add(u, rewards=[1.0, 0.0, 1.0, np.nan], costs=[120.0, 80.0, 100.0, np.nan],
    ...        pi=[0.5, 1.0, 1.0, 0.2], mask=[True, True, True, False])
    >>> metrics = tr.update()
    >>> metrics["n_labels"], sorted(metrics)[:4]
    (3, ['brier', 'cost_mape', 'ece', 'loss_c'])
    >>> tr.skill_success      # these labels were predicted by the untrained prior
    nan
    >>> p_hat, c_hat = tr.predict(u)
    >>> p_hat.shape, c_hat.dtype
    ((4,), dtype('float64'))
    """

    def __init__(
        self,
        hidden_size: int,
        *,
        head: str = HEAD_KINDS[0],
        width: int = 256,
        lr: float = 1e-3,
        replay: int = 2048,
        lagged: bool = False,
        steps_per_update: int = 32,
        batch_size: int = 256,
        cost_scale: float | None = None,
        temperature_fraction: float = 0.25,
        n_components: int | None = 64,
        passthrough: int = 0,
        refit_every: int = 4,
        refit_growth: float | None = 0.25,
        refit_below: int = 0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ):
        if isinstance(refit_every, bool) or not isinstance(refit_every, int) or refit_every < 1:
            raise ValueError(f"refit_every must be an int >= 1; got refit_every = {refit_every!r}")
        if isinstance(refit_below, bool) or not isinstance(refit_below, int) or refit_below < 0:
            raise ValueError(f"refit_below must be an int >= 0; got refit_below = {refit_below!r}")
        if refit_growth is not None and not (
            isinstance(refit_growth, (int, float)) and not isinstance(refit_growth, bool)
            and 0 < refit_growth < math.inf
        ):
            raise ValueError(
                f"refit_growth must be a finite number > 0 or None; got refit_growth = "
                f"{refit_growth!r}"
            )
        if head not in HEAD_KINDS:
            raise ValueError(f"head must be one of {HEAD_KINDS}; got head = {head!r}")
        if replay < 1:
            raise ValueError(f"replay must be >= 1 label; got replay = {replay}")
        if steps_per_update < 0 or batch_size < 1:
            raise ValueError(
                f"steps_per_update must be >= 0 and batch_size >= 1; got {steps_per_update}, "
                f"{batch_size}"
            )
        if not 0 < temperature_fraction <= 1:
            raise ValueError(
                f"temperature_fraction must lie in (0, 1]; got {temperature_fraction!r}"
            )
        if not lr > 0:
            raise ValueError(f"lr must be > 0; got lr = {lr!r}")
        if cost_scale is not None and not cost_scale > 0:
            raise ValueError(f"cost_scale must be > 0 tokens; got cost_scale = {cost_scale!r}")
        self.head = head
        self.hidden_size = int(hidden_size)
        self.replay = int(replay)
        self.lagged = bool(lagged)
        self.steps_per_update = int(steps_per_update)
        self.batch_size = int(batch_size)
        self.temperature_fraction = float(temperature_fraction)
        self.n_components = n_components
        if isinstance(passthrough, bool) or not isinstance(passthrough, int) or not (
            0 <= passthrough <= hidden_size
        ):
            raise ValueError(
                f"passthrough must be an int in [0, hidden_size = {hidden_size}]; got "
                f"passthrough = {passthrough!r}"
            )
        self.passthrough = passthrough
        self.refit_every = refit_every
        self.refit_growth = None if refit_growth is None else float(refit_growth)
        self.refit_below = refit_below
        self.device = torch.device(device)
        self._fixed_cost_scale = cost_scale is not None
        self._cost_scale = 1.0 if cost_scale is None else float(cost_scale)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.heads = PrefixHeads(hidden_size, width, self._cost_scale)
        self.heads.to(self.device)
        self.lagged_heads = copy.deepcopy(self.heads) if self.lagged else None
        self.optimizer = torch.optim.Adam(self.heads.parameters(), lr=lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.probe: LinearProbe | None = None
        self.lagged_probe: LinearProbe | None = None
        self._features = torch.zeros((0, self.hidden_size), dtype=torch.float32)
        self._rewards = torch.zeros(0, dtype=torch.float64)
        self._costs = torch.zeros(0, dtype=torch.float64)
        self._pi = torch.zeros(0, dtype=torch.float64)
        # prequential scores of each window label (see _HELD_OUT_COLUMNS)
        self._held_out = torch.zeros((0, _HELD_OUT_COLUMNS), dtype=torch.float64)
        self._n_new = 0
        self.n_updates = 0
        # the linear probe's refit schedule: labels the last refit saw, labels added since,
        # updates since (see `refit_every`, `refit_growth`)
        self._fitted_on = 0
        self._added_since_fit = 0
        self._updates_since_fit = 0
        #: Updates that refitted the linear probe (a refit-schedule diagnostic).
        self.n_refits = 0

    # ------------------------------------------------------------------ prediction
    @property
    def predictor(self) -> Any:
        """What ``predict`` uses: the lagged copy if ``lagged``, else the current heads (a
        :class:`PrefixHeads` for ``head="mlp"``, a :class:`~pairht.heads_fit.LinearProbe` or
        None before the first fit for ``head="linear"``)."""
        if self.head == "mlp":
            return self.lagged_heads if self.lagged else self.heads
        return self.lagged_probe if self.lagged else self.probe

    def _predict_with(self, predictor: Any, features) -> tuple[np.ndarray, np.ndarray]:
        if self.head == "mlp":
            return predictor.predict(features)
        u = _as_features(features, self.hidden_size, "cpu").double().numpy()
        if predictor is None:
            shape = u.shape[:-1]
            return np.full(shape, 0.5), np.full(shape, self._cost_scale)
        return predictor.predict(u)

    def predict(self, features) -> tuple[np.ndarray, np.ndarray]:
        """``(p_hat, c_hat)`` float64 arrays of shape ``features.shape[:-1]``."""
        return self._predict_with(self.predictor, features)

    # ------------------------------------------------------------------ skill
    def _constant_reference(self) -> tuple[float, float]:
        """The constant predictor of the labels now in the window (the prior if empty)."""
        if self.n_labels == 0:
            return 0.5, self._cost_scale
        w = 1.0 / self._pi.numpy()
        y, c = self._rewards.numpy(), self._costs.numpy()
        return (calibration.ipw_mean(y, w),
                calibration.ipw_geometric_mean(c, w, self._cost_scale))

    def skill(self) -> dict[str, float]:
        """Prequential held-out measures over the replay window (see the class docstring):
        ``skill_success``, ``skill_cost`` (Brier skill, R^2 of log cost) and ``slope_success``,
        ``slope_cost`` (:func:`reliability_slope` of the within-group deviations); NaN where no
        label was scored by a fitted predictor (or the reference error / the spread is 0)."""
        h = self._held_out.numpy()
        w = 1.0 / self._pi.numpy()
        scored = np.isfinite(h[:, 0])
        pos = scored & (self._costs.numpy() > 0)
        out = {}
        for key, (err, ref), rows in (("skill_success", (0, 1), scored),
                                      ("skill_cost", (2, 3), pos)):
            out[key] = skill_score(h[rows, err], h[rows, ref], w[rows])
        for key, (x, y) in (("slope_success", (4, 5)), ("slope_cost", (6, 7))):
            rows = np.isfinite(h[:, x])
            out[key] = reliability_slope(h[rows, x], h[rows, y], w[rows])
        return out

    @property
    def skill_success(self) -> float:
        """Held-out Brier skill of the success head (prequential, IPW; NaN before labels)."""
        return self.skill()["skill_success"]

    @property
    def skill_cost(self) -> float:
        """Held-out R^2 of the cost head on log cost (prequential, IPW; NaN before labels)."""
        return self.skill()["skill_cost"]

    # ------------------------------------------------------------------ labels
    @property
    def n_labels(self) -> int:
        """Labels in the replay window."""
        return int(self._rewards.numel())

    def add(self, features, rewards, costs, pi, mask, group_size: int | None = None) -> None:
        """Append the labels of completed candidates to the replay window (newest last).

        Each new label is first scored by the current predictor and by the constant reference
        (for :meth:`skill`), and its within-group deviations are recorded for the reliability
        slopes: with ``p_bar`` the mean prediction over the label's group (every candidate)
        and ``c_bar`` the mean predicted cost over the group's unfinished candidates (a
        candidate is finished when it was completed at cost 0), ``(p_hat - p_bar, r - p_bar)``
        and, for unfinished labels, ``(c_hat - c_bar, C - c_bar)``: the centring
        :func:`pairht.step.shrink_predictions` shrinks toward.

        Parameters
        ----------
        features : (..., hidden) tensor or array   prefix features of every candidate
        rewards : (...,) array in [0, 1]           read where ``mask`` (NaN elsewhere is fine)
        costs : (...,) array >= 0                  realised suffix tokens, read where ``mask``;
                                                    0 for a prefix that already ended
        pi : (...,) array                          inclusion probabilities, > 0 where ``mask``
        mask : (...,) bool                         ``J_i``: which candidates were completed
        group_size : int, optional                 candidates per group, consecutive in the
                                                    flattened rows (default: the last axis of
                                                    a batched ``(..., G)`` input; a 1-d input
                                                    is one group)
        """
        u = _as_features(features, self.hidden_size, "cpu")
        shape = tuple(u.shape[:-1])
        m = _as_numpy(mask)
        if m.dtype != bool:
            raise ValueError(f"mask must be a bool array (J_i); got dtype {m.dtype}")
        check_shape("mask", m, shape, what="features.shape[:-1]")
        p = check_probabilities("pi", _as_numpy(pi))
        check_shape("pi", p, shape, what="features.shape[:-1]")
        r = _as_numpy(rewards).astype(np.float64)
        c = _as_numpy(costs).astype(np.float64)
        check_shape("rewards", r, shape, what="features.shape[:-1]")
        check_shape("costs", c, shape, what="features.shape[:-1]")
        # Labels of unselected candidates do not exist (NaN is fine there): check observed ones.
        for name, x, ok, rule in (
            ("pi", p, p > 0, "> 0 for completed candidates (labels are weighted by 1/pi)"),
            ("rewards", r, (r >= 0) & (r <= 1), "in [0, 1] for completed candidates"),
            ("costs", c, c >= 0, "finite and >= 0 (suffix tokens) for completed candidates"),
        ):
            bad = m & ~ok
            if bad.any():
                k = tuple(int(i) for i in np.argwhere(bad)[0])
                raise ValueError(f"{name} must be {rule}; {name}{list(k)} = {float(x[k])!r}")
        keep = torch.as_tensor(m.reshape(-1))
        new_u = u.reshape(-1, self.hidden_size)[keep]
        new_r = torch.as_tensor(r.reshape(-1))[keep]
        new_c = torch.as_tensor(c.reshape(-1))[keep]
        # Labels predicted by the untrained prior measure nothing about the heads: NaN, skipped.
        held_out = torch.full((int(keep.sum()), _HELD_OUT_COLUMNS), math.nan,
                              dtype=torch.float64)
        if held_out.shape[0] and self.n_updates > int(self.lagged):
            g = _group_size(group_size, shape)
            p_all, c_all = self.predict(u.reshape(-1, self.hidden_size))
            kept = keep.numpy()
            p_hat, c_hat = p_all[kept], c_all[kept]
            p_bar, c_bar = self._constant_reference()
            y, cc = new_r.numpy(), new_c.numpy()
            # within-group deviations from the centre shrink_predictions uses
            finished = (m & (c == 0)).reshape(-1, g)
            p_mean = np.repeat(p_all.reshape(-1, g).mean(axis=1), g)[kept]
            unf = ~finished
            n_unf = np.maximum(unf.sum(axis=1), 1)
            c_mean = np.repeat((c_all.reshape(-1, g) * unf).sum(axis=1) / n_unf, g)[kept]
            label_unf = unf.reshape(-1)[kept]
            held_out = torch.from_numpy(np.stack([
                (p_hat - y) ** 2,
                (p_bar - y) ** 2,
                calibration.log_cost_error(np.maximum(c_hat, 1e-300), cc),
                calibration.log_cost_error(np.full(cc.shape, c_bar), cc),
                p_hat - p_mean,
                y - p_mean,
                np.where(label_unf, c_hat - c_mean, np.nan),
                np.where(label_unf, cc - c_mean, np.nan),
            ], axis=1))
        self._features = torch.cat([self._features, new_u])
        self._rewards = torch.cat([self._rewards, new_r])
        self._costs = torch.cat([self._costs, new_c])
        self._pi = torch.cat([self._pi, torch.as_tensor(p.reshape(-1))[keep]])
        self._held_out = torch.cat([self._held_out, held_out])
        self._n_new += int(keep.sum())
        self._added_since_fit += int(keep.sum())
        if self.n_labels > self.replay:
            drop = self.n_labels - self.replay
            self._features = self._features[drop:]
            self._rewards = self._rewards[drop:]
            self._costs = self._costs[drop:]
            self._pi = self._pi[drop:]
            self._held_out = self._held_out[drop:]
        self._n_new = min(self._n_new, self.n_labels)

    # ------------------------------------------------------------------ training
    def _diagnostics(self, predictor: Any, sl: slice) -> dict[str, float]:
        if self._rewards[sl].numel() == 0:
            return {"brier": math.nan, "ece": math.nan, "cost_mape": math.nan}
        p_hat, c_hat = self._predict_with(predictor, self._features[sl])
        y, c = self._rewards[sl].numpy(), self._costs[sl].numpy()
        w = 1.0 / self._pi[sl].numpy()
        pos = c > 0
        return {
            "brier": calibration.brier(p_hat, y, weights=w),
            "ece": calibration.ece(p_hat, y, n_bins=15, weights=w),
            "cost_mape": (
                calibration.cost_mape(c_hat[pos], c[pos], weights=w[pos]) if pos.any() else math.nan
            ),
        }

    def _losses(self, idx: torch.Tensor, w_bar: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The IPW losses of the MLP heads on rows ``idx``, differentiable: the one torch
        mirror of :func:`pairht.calibration.ipw_brier_loss` and
        :func:`~pairht.calibration.ipw_log_cost_loss` (divided by ``w_bar``), tested equal to
        them in ``tests/trl/test_heads.py``."""
        u = self._features[idx].to(self.device)
        y = self._rewards[idx].to(self.device, torch.float32)
        c = self._costs[idx].to(self.device, torch.float32)
        w = (1.0 / (self._pi[idx] * w_bar)).to(self.device, torch.float32)
        logits, c_hat = self.heads(u)
        loss_p = (w * (torch.sigmoid(logits) - y) ** 2).mean()
        pos = c > 0
        # clamp: a softplus that underflows to 0 would give log 0 = -inf and NaN gradients
        log_c_hat = torch.log(c_hat.clamp_min(torch.finfo(c_hat.dtype).tiny))
        log_err = log_c_hat - torch.log(torch.where(pos, c, torch.ones_like(c)))
        loss_c = (w * pos * log_err**2).mean()
        return loss_p, loss_c

    def _probe_losses(self, w_bar: float) -> tuple[float, float]:
        """The IPW losses of the class docstring for the linear probe, over the whole window:
        :func:`pairht.calibration.ipw_brier_loss` and
        :func:`~pairht.calibration.ipw_log_cost_loss` (the window holds completed labels only;
        a zero cost carries no cost label), divided by ``w_bar``."""
        y, c, pi = self._rewards.numpy(), self._costs.numpy(), self._pi.numpy()
        u = self._features.double().numpy()
        probe = self.probe
        assert probe is not None  # called after a fit
        logits, c_hat = probe.outputs(u)  # one projection of the window for both losses
        p = 1.0 / (1.0 + np.exp(-logits))
        every = np.ones(y.shape, dtype=bool)
        return (calibration.ipw_brier_loss(p, y, pi, every) / w_bar,
                calibration.ipw_log_cost_loss(c_hat, c, pi, c > 0) / w_bar)

    def update(self) -> dict[str, float]:
        """Train on the replay window and return diagnostics.

        Returns
        -------
        dict with
            ``brier``, ``ece`` (15 equal-mass bins), ``cost_mape``: IPW-weighted, on the labels
            added since the previous update, scored by the predictor that was in use when they
            were predicted (out of sample: it had not seen them);
            ``skill_success``, ``skill_cost``: :meth:`skill` over the window (held out);
            ``loss_p``, ``loss_c``: IPW losses over the whole window after training;
            ``temperature``; ``n_labels`` (window size); ``n_new`` (labels since last update).
        """
        n = self.n_labels
        n_new = self._n_new
        metrics = {**self._diagnostics(self.predictor, slice(n - n_new, n)), **self.skill()}
        if n == 0:
            return {
                **metrics,
                "loss_p": math.nan,
                "loss_c": math.nan,
                "temperature": float(self.heads.temperature),
                "n_labels": 0,
                "n_new": 0,
            }
        pos = self._costs > 0
        if not self._fixed_cost_scale and pos.any():
            self._cost_scale = calibration.ipw_mean(self._costs[pos].numpy(),
                                                    1.0 / self._pi[pos].numpy())
            self.heads.cost_scale.fill_(self._cost_scale)
            if self.lagged_heads is not None:
                self.lagged_heads.cost_scale.fill_(self._cost_scale)
            self._fixed_cost_scale = True
        w_bar = float((1.0 / self._pi).mean())
        if self.head == "linear" and self.probe is not None and not self._refit_due(n):
            loss_p, loss_c = self._probe_losses(w_bar)
            temperature = self.probe.temperature
            self._updates_since_fit += 1
        elif self.head == "linear":
            # One BLAS thread: the refit is many small solves, where OpenBLAS's per-core pool
            # only spins (10-30x slower on a busy two-core machine, docs/experiment.md).
            with _blas_controller().limit(limits=1, user_api="blas"):
                fitted = fit_linear_probe(
                    self._features.double().numpy(), self._rewards.numpy(),
                    self._costs.numpy(), 1.0 / self._pi.numpy(), n_components=self.n_components,
                    passthrough=self.passthrough,
                )
            if self.lagged:
                self.lagged_probe = self.probe
            self.probe = fitted
            loss_p, loss_c = self._probe_losses(w_bar)
            temperature = fitted.temperature
            self._fitted_on, self._added_since_fit, self._updates_since_fit = n, 0, 0
            self.n_refits += 1
        else:
            loss_p, loss_c, temperature = self._update_mlp(n, w_bar)
        self._n_new = 0
        self.n_updates += 1
        return {
            **metrics,
            "loss_p": float(loss_p),
            "loss_c": float(loss_c),
            "temperature": float(temperature),
            "n_labels": n,
            "n_new": n_new,
        }

    def _refit_due(self, n: int) -> bool:
        """Whether this ``update`` refits the linear probe (``n`` labels in the window).

        The cross-validated refit is 45 Newton solves whatever the window holds, so a small
        window is not cheap (measured at the demo's 64 features: 40-70 ms of CPU at 150
        labels, only 2-4x that at 1,500), and on a growing window most of it goes to probes
        that the next refit replaces: a batch that adds a quarter to the
        window moves the probe, one that adds a twentieth hardly does. So refit when the
        unseen labels are a large enough share (``refit_growth``), and at least every
        ``refit_every`` updates so that the probe follows the policy's drifting features
        (``tests/trl/test_heads.py`` checks the held-out skill against refitting on every
        update).
        """
        if self._updates_since_fit + 1 >= self.refit_every or n <= self.refit_below:
            return True
        growth = self.refit_growth
        return growth is not None and self._added_since_fit >= growth * self._fitted_on

    def _update_mlp(self, n: int, w_bar: float) -> tuple[float, float, float]:
        before = copy.deepcopy(self.heads.state_dict()) if self.lagged else None
        self.heads.train()
        for _ in range(self.steps_per_update):
            idx = torch.randperm(n, generator=self.generator)[: self.batch_size]
            loss_p, loss_c = self._losses(idx, w_bar)
            self.optimizer.zero_grad(set_to_none=True)
            (loss_p + loss_c).backward()
            self.optimizer.step()
        self.heads.eval()

        with torch.no_grad():
            newest = slice(n - max(1, math.ceil(self.temperature_fraction * n)), n)
            logits, _ = self.heads(self._features[newest].to(self.device))
            labels = self._rewards[newest].numpy()
            temperature = float(self.heads.temperature)
            # A window whose labels are all 0 (or all 1) carries no information on the scale:
            # its likelihood is monotone in 1/T and the fit would run to a bound (T = 0.05),
            # making every prediction extreme. Keep the previous temperature then.
            if labels.min() < labels.max():
                temperature = calibration.fit_temperature(
                    logits.double().cpu().numpy(), labels, weights=1.0 / self._pi[newest].numpy()
                )
            self.heads.temperature.fill_(temperature)
            loss_p, loss_c = self._losses(torch.arange(n), w_bar)
        if before is not None:
            assert self.lagged_heads is not None  # `before` is kept only when lagged
            self.lagged_heads.load_state_dict(before)
        return float(loss_p), float(loss_c), temperature

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict:
        """Everything ``update`` and ``predict`` depend on: heads (MLP or probe), lagged copy,
        optimizer, replay window with its held-out scores, minibatch RNG and counters (tensors
        and Python scalars only, so ``torch.load(weights_only=True)`` reads it)."""
        return {
            "head": self.head,
            "heads": copy.deepcopy(self.heads.state_dict()),
            "lagged_heads": (
                copy.deepcopy(self.lagged_heads.state_dict())
                if self.lagged_heads is not None
                else None
            ),
            "probe": _probe_state(self.probe),
            "lagged_probe": _probe_state(self.lagged_probe),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "features": self._features.clone(),
            "rewards": self._rewards.clone(),
            "costs": self._costs.clone(),
            "pi": self._pi.clone(),
            "held_out": self._held_out.clone(),
            "n_new": self._n_new,
            "n_updates": self.n_updates,
            "refit_schedule": [self._fitted_on, self._added_since_fit, self._updates_since_fit,
                               self.n_refits],
            "fixed_cost_scale": self._fixed_cost_scale,
            "cost_scale": self._cost_scale,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, sd: dict) -> None:
        """Restore a :meth:`state_dict` (same hidden size, head family, width and ``lagged``)."""
        if (sd["lagged_heads"] is not None) != self.lagged:
            raise ValueError(
                f"state_dict was saved with lagged = {sd['lagged_heads'] is not None}, but this "
                f"trainer has lagged = {self.lagged}"
            )
        saved_head = sd.get("head", "mlp")  # states written before head= existed are MLPs
        if saved_head != self.head:
            raise ValueError(
                f"state_dict was saved with head = {saved_head!r}, but this trainer has "
                f"head = {self.head!r}"
            )
        self.heads.load_state_dict(sd["heads"])
        if self.lagged_heads is not None:
            self.lagged_heads.load_state_dict(sd["lagged_heads"])
        self.probe = _probe_from_state(sd.get("probe"))
        self.lagged_probe = _probe_from_state(sd.get("lagged_probe"))
        self.optimizer.load_state_dict(sd["optimizer"])
        self._features = sd["features"].clone()
        self._rewards = sd["rewards"].clone()
        self._costs = sd["costs"].clone()
        self._pi = sd["pi"].clone()
        # Older states have no held-out scores (or no deviations): their labels are left out
        # of the skill (the slopes).
        held_out = torch.full((self._rewards.numel(), _HELD_OUT_COLUMNS), math.nan,
                              dtype=torch.float64)
        if "held_out" in sd:
            held_out[:, : sd["held_out"].shape[1]] = sd["held_out"]
        self._held_out = held_out
        self._n_new = int(sd["n_new"])
        self.n_updates = int(sd["n_updates"])
        # States written before the refit schedule existed: refit at the next update.
        fitted_on, added, since, refits = sd.get(
            "refit_schedule", [0, 0, self.refit_every, self.n_updates])
        self._fitted_on, self._added_since_fit = int(fitted_on), int(added)
        self._updates_since_fit, self.n_refits = int(since), int(refits)
        self._fixed_cost_scale = bool(sd["fixed_cost_scale"])
        self._cost_scale = float(sd.get("cost_scale", float(self.heads.cost_scale)))
        self.generator.set_state(sd["generator"])


def _group_size(group_size: int | None, shape: tuple[int, ...]) -> int:
    """Candidates per group for :meth:`HeadTrainer.add` (see its ``group_size``)."""
    rows = math.prod(shape)
    g = (shape[-1] if shape else 1) if group_size is None else group_size
    if isinstance(g, bool) or not isinstance(g, int) or g < 1 or rows % g:
        raise ValueError(f"group_size must be a positive int dividing the {rows} rows; got "
                         f"group_size = {group_size!r}")
    return g


# ---------------------------------------------------------------------- stored populations
@dataclass(frozen=True)
class CrossFit:
    """Out-of-fold head predictions on a population and their held-out skill.

    ``p_hat``, ``c_hat``, ``m_hat`` are ``(P, G)``; every prompt's values come from heads fitted
    on the other folds' prompts. ``skill_success = 1 - brier / brier_const`` and
    ``skill_cost = 1 - log_mse / log_mse_const`` (over unfinished candidates), with the constant
    fitted on the same training folds. ``n_train`` is the mean number of training labels per
    fold.

    What an allocation inside a group can use is the *within-prompt* part:
    ``within_success = 1 - sum (dp_i - dr_i)^2 / sum dr_i^2`` with ``dp_i = p_hat_i - mean_q
    p_hat``, ``dr_i = r_i - mean_q r`` (deviations from the prompt's mean), and
    ``within_cost`` the same on log suffix length over unfinished candidates (prompts with at
    least two). 0 for any predictor constant within a prompt.
    """

    p_hat: np.ndarray
    c_hat: np.ndarray
    m_hat: np.ndarray
    kind: str
    folds: int
    n_train: float
    brier: float
    brier_const: float
    skill_success: float
    log_mse: float
    log_mse_const: float
    skill_cost: float
    within_success: float
    within_cost: float


def _population_finished(population: Any) -> np.ndarray:
    f = getattr(population, "finished", None)
    if f is None:
        f = population.meta.get("finished")
    if f is None:
        return np.zeros(population.rewards.shape, dtype=bool)
    return np.asarray(f, dtype=bool).reshape(population.rewards.shape)


def cross_fit_heads(
    population: Any,
    features,
    *,
    finished=None,
    folds: int = 4,
    kind: str = "linear",
    seed: int = 0,
    mlp_updates: int = 8,
    **options: Any,
) -> CrossFit:
    r"""Fit prefix heads on a stored population, cross-fitted by prompt.

    The prompts are dealt into ``folds`` groups (:func:`pairht.heads_fit.group_folds`); each
    group's predictions come from heads fitted on the others, so every ``p_hat``, ``c_hat`` is
    out of fold, as the audit needs (heads never see the rewards they allocate on).

    Parameters
    ----------
    population : pairht.audit.population.Population
        Rewards (in [0, 1]), realised suffix tokens ``costs`` and ``prefix_len``.
    features : (P, G, H) array
        Prefix features of every candidate at the population's checkpoint.
    finished : (P, G) bool array, optional
        Whose prefix already ended (no suffix: success label only). Default: the population's
        ``finished`` field or ``meta["finished"]`` if present, else none.
    folds : int >= 2
    kind : {"linear", "mlp", "constant"}
        ``"linear"``: :func:`pairht.heads_fit.fit_linear_probe` (``options`` are passed on);
        ``"mlp"``: :class:`HeadTrainer` with ``head="mlp"`` (``options``: its keywords), trained
        for ``mlp_updates`` updates; ``"constant"``: the training folds' IPW mean reward and
        geometric mean cost.
    seed : int
        Fold assignment and MLP initialisation.

    Returns
    -------
    CrossFit
        with ``m_hat = score_norm_proxy(prefix_len, c_hat, finished)``.
    """
    kinds = ("linear", "mlp", "constant")
    if kind not in kinds:
        raise ValueError(f"kind must be one of {kinds}; got kind = {kind!r}")
    r = np.asarray(population.rewards, dtype=np.float64)
    P, G = r.shape
    u = np.asarray(features, dtype=np.float64)
    if u.ndim != 3 or u.shape[:2] != (P, G):
        raise ValueError(f"features must have shape (P, G, H) = ({P}, {G}, H); got {u.shape}")
    if ((r < 0) | (r > 1)).any():
        raise ValueError("population.rewards must lie in [0, 1] to train a success head")
    fin = _population_finished(population) if finished is None else np.asarray(finished, bool)
    if fin.shape != (P, G):
        raise ValueError(f"finished must have shape ({P}, {G}); got {fin.shape}")
    cost = np.where(fin, 0.0, np.asarray(population.costs, dtype=np.float64))
    fold = group_folds(np.repeat(np.arange(P), G), folds, rng=seed).reshape(P, G)
    p_hat, c_hat = np.zeros((P, G)), np.zeros((P, G))
    p_ref, c_ref = np.zeros((P, G)), np.zeros((P, G))
    n_train = []
    for f in range(folds):
        tr, te = fold != f, fold == f
        uf, yf, cf = u[tr], r[tr], cost[tr]
        n_train.append(int(tr.sum()))
        pos = cf > 0
        p_ref[te] = yf.mean()
        c_ref[te] = np.exp(np.log(cf[pos]).mean()) if pos.any() else 1.0
        if kind == "constant":
            p_hat[te], c_hat[te] = p_ref[te], c_ref[te]
        elif kind == "linear":
            probe = fit_linear_probe(uf, yf, cf, groups=np.nonzero(tr)[0], rng=seed,
                                     **options)
            p_hat[te], c_hat[te] = probe.predict(u[te])
        else:
            ht = HeadTrainer(u.shape[2], head="mlp", seed=seed, **options)
            ht.add(uf, yf, cf, np.ones(len(yf)), np.ones(len(yf), dtype=bool))
            for _ in range(mlp_updates):
                ht.update()
            p_hat[te], c_hat[te] = ht.predict(u[te])
    unf = ~fin & (cost > 0)
    brier = float(np.mean((p_hat - r) ** 2))
    brier_const = float(np.mean((p_ref - r) ** 2))
    lc = np.log(np.where(unf, cost, 1.0))
    log_mse, log_mse_const = (
        (float(np.mean(calibration.log_cost_error(x[unf], cost[unf]))) for x in (c_hat, c_ref))
        if unf.any() else (math.nan, math.nan))
    dr = r - r.mean(1, keepdims=True)
    dp = p_hat - p_hat.mean(1, keepdims=True)
    within_success = (1.0 - float(((dp - dr) ** 2).sum()) / float((dr**2).sum())
                      if (dr**2).sum() > 0 else math.nan)
    num = den = 0.0
    for q in range(P):
        m = unf[q]
        if m.sum() >= 2:
            dl = lc[q, m] - lc[q, m].mean()
            dh = np.log(c_hat[q, m]) - np.log(c_hat[q, m]).mean()
            num += float(((dh - dl) ** 2).sum())
            den += float((dl**2).sum())
    within_cost = 1.0 - num / den if den > 0 else math.nan
    return CrossFit(
        p_hat=p_hat, c_hat=c_hat,
        m_hat=score_norm_proxy(population.prefix_len, c_hat, fin),
        kind=kind, folds=int(folds), n_train=float(np.mean(n_train)),
        brier=brier, brier_const=brier_const,
        skill_success=brier_skill(p_hat, r, p_ref),
        log_mse=log_mse, log_mse_const=log_mse_const,
        skill_cost=(log_cost_r2(c_hat[unf], cost[unf], c_ref[unf]) if unf.any() else math.nan),
        within_success=within_success, within_cost=within_cost,
    )
