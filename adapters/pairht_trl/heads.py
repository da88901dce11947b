r"""Prefix heads: success probability and remaining-cost predictors on prefix hidden states.

PAIR paper, Eq. heads and appendix "Heads and calibration":

    p_hat_i = sigmoid(f(u_i) / T),        c_hat_i = softplus(g(u_i))

with ``u_i`` the detached mean of the last 16 prefix hidden states, ``f``, ``g`` two-layer MLPs
(width 256, SiLU, layer normalisation) and ``T`` a scalar temperature fitted on the newest
quarter of a 2,048-label replay window. Labels come only from completed candidates, so both
losses weight a label by ``J_i / pi_i`` (Eq. head-losses; :mod:`pairht.calibration`).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn

from pairht import calibration
from pairht._validation import check_probabilities, check_shape

__all__ = ["HeadTrainer", "PrefixHeads"]

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
            nn.init.zeros_(head[-1].weight)
            nn.init.constant_(head[-1].bias, bias)
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


class HeadTrainer:
    r"""Trains :class:`PrefixHeads` on delayed, inverse-probability-weighted labels.

    Each RL step: ``predict`` (heads frozen) -> allocation and design -> completion ->
    ``add`` (labels of the completed candidates, with their inclusion probabilities) ->
    ``update`` (PAIR paper, Algorithm 1, last line).

    ``update`` runs ``steps_per_update`` Adam steps on minibatches of the replay window (the
    newest ``replay`` labels) minimising

        L = mean_b (w_b / w_bar) (sigmoid(f(u_b)) - r_b)^2
          + mean_b (w_b / w_bar) [C_b > 0] (log c_hat_b - log C_b)^2,        w_b = 1 / pi_b,

    the IPW losses of Eq. head-losses with ``w_bar`` the mean weight in the window (a constant,
    so each minibatch is an unbiased estimate of the window loss up to one scale factor). Rows
    whose prefix already ended carry a cost of 0 and train only the success head. It then fits
    the temperature ``T`` on the newest quarter of the window
    (:func:`pairht.calibration.fit_temperature`).

    Parameters
    ----------
    hidden_size : int
        Feature dimension (the policy's hidden size).
    width : int
        MLP width (paper: 256).
    lr : float
        Adam learning rate.
    replay : int
        Replay window, in labels (paper: 2048).
    lagged : bool
        If True, ``predict`` uses the heads of the previous checkpoint (the heads as they were
        before the latest ``update``), to reduce adaptive overfitting.
    steps_per_update : int
        Adam steps per ``update``.
    batch_size : int
        Minibatch size (drawn without replacement from the window each step).
    cost_scale : float, optional
        Token scale of the cost head (see :class:`PrefixHeads`). ``None``: the IPW mean of the
        first cost labels seen by ``update``.
    temperature_fraction : float
        Newest fraction of the window the temperature is fitted on (paper: 1/4).
    device : str or torch.device
    seed : int
        Seeds head initialisation and minibatch draws (no global RNG is touched).

    Examples
    --------
    >>> tr = HeadTrainer(8, width=16, steps_per_update=2)
    >>> u = np.zeros((4, 8), dtype=np.float32)
    >>> tr.add(u, rewards=[1.0, 0.0, 1.0, np.nan], costs=[120.0, 80.0, 100.0, np.nan],
    ...        pi=[0.5, 1.0, 1.0, 0.2], mask=[True, True, True, False])
    >>> metrics = tr.update()
    >>> metrics["n_labels"], sorted(metrics)
    (3, ['brier', 'cost_mape', 'ece', 'loss_c', 'loss_p', 'n_labels', 'n_new', 'temperature'])
    >>> p_hat, c_hat = tr.predict(u)
    >>> p_hat.shape, c_hat.dtype
    ((4,), dtype('float64'))
    """

    def __init__(
        self,
        hidden_size: int,
        *,
        width: int = 256,
        lr: float = 1e-3,
        replay: int = 2048,
        lagged: bool = False,
        steps_per_update: int = 32,
        batch_size: int = 256,
        cost_scale: float | None = None,
        temperature_fraction: float = 0.25,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ):
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
        self.hidden_size = int(hidden_size)
        self.replay = int(replay)
        self.lagged = bool(lagged)
        self.steps_per_update = int(steps_per_update)
        self.batch_size = int(batch_size)
        self.temperature_fraction = float(temperature_fraction)
        self.device = torch.device(device)
        self._fixed_cost_scale = cost_scale is not None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.heads = PrefixHeads(hidden_size, width, 1.0 if cost_scale is None else cost_scale)
        self.heads.to(self.device)
        self.lagged_heads = copy.deepcopy(self.heads) if self.lagged else None
        self.optimizer = torch.optim.Adam(self.heads.parameters(), lr=lr)
        self.generator = torch.Generator().manual_seed(seed)
        self._features = torch.zeros((0, self.hidden_size), dtype=torch.float32)
        self._rewards = torch.zeros(0, dtype=torch.float64)
        self._costs = torch.zeros(0, dtype=torch.float64)
        self._pi = torch.zeros(0, dtype=torch.float64)
        self._n_new = 0
        self.n_updates = 0

    # ------------------------------------------------------------------ prediction
    @property
    def predictor(self) -> PrefixHeads:
        """The heads ``predict`` uses: the lagged copy if ``lagged``, else the current heads."""
        return self.lagged_heads if self.lagged else self.heads

    def predict(self, features) -> tuple[np.ndarray, np.ndarray]:
        """``(p_hat, c_hat)`` float64 arrays of shape ``features.shape[:-1]``."""
        return self.predictor.predict(features)

    # ------------------------------------------------------------------ labels
    @property
    def n_labels(self) -> int:
        """Labels in the replay window."""
        return int(self._rewards.numel())

    def add(self, features, rewards, costs, pi, mask) -> None:
        """Append the labels of completed candidates to the replay window (newest last).

        Parameters
        ----------
        features : (..., hidden) tensor or array   prefix features of every candidate
        rewards : (...,) array in [0, 1]           read where ``mask`` (NaN elsewhere is fine)
        costs : (...,) array >= 0                  realised suffix tokens, read where ``mask``;
                                                    0 for a prefix that already ended
        pi : (...,) array                          inclusion probabilities, > 0 where ``mask``
        mask : (...,) bool                         ``J_i``: which candidates were completed
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
        self._features = torch.cat([self._features, u.reshape(-1, self.hidden_size)[keep]])
        self._rewards = torch.cat([self._rewards, torch.as_tensor(r.reshape(-1))[keep]])
        self._costs = torch.cat([self._costs, torch.as_tensor(c.reshape(-1))[keep]])
        self._pi = torch.cat([self._pi, torch.as_tensor(p.reshape(-1))[keep]])
        self._n_new += int(keep.sum())
        if self.n_labels > self.replay:
            drop = self.n_labels - self.replay
            self._features = self._features[drop:]
            self._rewards = self._rewards[drop:]
            self._costs = self._costs[drop:]
            self._pi = self._pi[drop:]
        self._n_new = min(self._n_new, self.n_labels)

    # ------------------------------------------------------------------ training
    def _diagnostics(self, heads: PrefixHeads, sl: slice) -> dict[str, float]:
        if self._rewards[sl].numel() == 0:
            return {"brier": math.nan, "ece": math.nan, "cost_mape": math.nan}
        p_hat, c_hat = heads.predict(self._features[sl])
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

    def update(self) -> dict[str, float]:
        """Train on the replay window, refit the temperature, and return diagnostics.

        Returns
        -------
        dict with
            ``brier``, ``ece`` (15 equal-mass bins), ``cost_mape``: IPW-weighted, on the labels
            added since the previous update, scored by the predictor that was in use when they
            were predicted (out of sample: it had not seen them);
            ``loss_p``, ``loss_c``: IPW losses over the whole window after training;
            ``temperature``; ``n_labels`` (window size); ``n_new`` (labels since last update).
        """
        n = self.n_labels
        n_new = self._n_new
        metrics = self._diagnostics(self.predictor, slice(n - n_new, n))
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
            w = 1.0 / self._pi[pos]
            scale = float((w * self._costs[pos]).sum() / w.sum())
            self.heads.cost_scale.fill_(scale)
            if self.lagged_heads is not None:
                self.lagged_heads.cost_scale.fill_(scale)
            self._fixed_cost_scale = True
        before = copy.deepcopy(self.heads.state_dict()) if self.lagged else None

        w_bar = float((1.0 / self._pi).mean())
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
            self.lagged_heads.load_state_dict(before)
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

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict:
        """Everything ``update`` and ``predict`` depend on: heads, lagged copy, optimizer, replay
        window, minibatch RNG and counters (tensors and Python scalars only, so
        ``torch.load(weights_only=True)`` reads it)."""
        return {
            "heads": copy.deepcopy(self.heads.state_dict()),
            "lagged_heads": (
                copy.deepcopy(self.lagged_heads.state_dict())
                if self.lagged_heads is not None
                else None
            ),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "features": self._features.clone(),
            "rewards": self._rewards.clone(),
            "costs": self._costs.clone(),
            "pi": self._pi.clone(),
            "n_new": self._n_new,
            "n_updates": self.n_updates,
            "fixed_cost_scale": self._fixed_cost_scale,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, sd: dict) -> None:
        """Restore a :meth:`state_dict` (same hidden size, width and ``lagged`` setting)."""
        if (sd["lagged_heads"] is not None) != self.lagged:
            raise ValueError(
                f"state_dict was saved with lagged = {sd['lagged_heads'] is not None}, but this "
                f"trainer has lagged = {self.lagged}"
            )
        self.heads.load_state_dict(sd["heads"])
        if self.lagged_heads is not None:
            self.lagged_heads.load_state_dict(sd["lagged_heads"])
        self.optimizer.load_state_dict(sd["optimizer"])
        self._features = sd["features"].clone()
        self._rewards = sd["rewards"].clone()
        self._costs = sd["costs"].clone()
        self._pi = sd["pi"].clone()
        self._n_new = int(sd["n_new"])
        self.n_updates = int(sd["n_updates"])
        self._fixed_cost_scale = bool(sd["fixed_cost_scale"])
        self.generator.set_state(sd["generator"])
