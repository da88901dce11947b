"""Prefix heads and their IPW trainer (pairht_trl.heads)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from pairht.calibration import fit_temperature
from pairht_trl.heads import HeadTrainer, PrefixHeads


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    # Small matrices: extra intra-op threads only add synchronisation on a loaded machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _nll(p, y):
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def _toy_round(rng, n=64, hidden=8):
    """Separable toy task: success iff u_0 > 0; cost = 40 exp(u_1) tokens; pi in [0.2, 1]."""
    u = rng.normal(size=(n, hidden)).astype(np.float32)
    r = (u[:, 0] > 0).astype(float)
    c = 40.0 * np.exp(u[:, 1])
    pi = rng.uniform(0.2, 1.0, size=n)
    mask = rng.random(n) < pi
    return u, r, c, pi, mask


# ----------------------------------------------------------------------------- heads


def test_heads_start_uninformed_and_predict_float64():
    heads = PrefixHeads(8, width=16, cost_scale=250.0)
    p, c = heads.predict(np.random.default_rng(0).normal(size=(3, 5, 8)))
    assert p.dtype == np.float64 and c.dtype == np.float64
    assert p.shape == (3, 5) and c.shape == (3, 5)
    np.testing.assert_array_equal(p, 0.5)
    np.testing.assert_allclose(c, 250.0, rtol=1e-6)


def test_heads_architecture_matches_the_paper():
    heads = PrefixHeads(12, width=256)
    for mlp in (heads.success, heads.cost):
        kinds = [type(m).__name__ for m in mlp]
        assert kinds == ["Linear", "LayerNorm", "SiLU", "Linear"]
        assert mlp[0].out_features == 256 and mlp[3].in_features == 256


def test_heads_predict_applies_temperature_and_softplus():
    torch.manual_seed(0)
    heads = PrefixHeads(4, width=8, cost_scale=3.0)
    torch.nn.init.normal_(heads.success[-1].weight)
    torch.nn.init.normal_(heads.cost[-1].weight)
    heads.temperature.fill_(2.5)
    u = torch.randn(6, 4)
    with torch.no_grad():
        f = heads.success(u).squeeze(-1).double()
        g = heads.cost(u).squeeze(-1).double()
    p, c = heads.predict(u)
    np.testing.assert_allclose(p, torch.sigmoid(f / 2.5).numpy(), rtol=1e-12)
    np.testing.assert_allclose(c, 3.0 * torch.nn.functional.softplus(g).numpy(), rtol=1e-6)


# ----------------------------------------------------------------------------- IPW losses


def test_ipw_losses_equal_hand_computed_values():
    # Untrained heads predict p = 1/2 and c = cost_scale = 100 for every row.
    tr = HeadTrainer(4, width=8, steps_per_update=0, cost_scale=100.0)
    u = np.zeros((5, 4), dtype=np.float32)
    r = np.array([1.0, 0.0, 0.3, 0.9, np.nan])
    c = np.array([100 * math.e, 100.0, 100 / math.e**2, 0.0, np.nan])
    pi = np.array([0.5, 0.25, 1.0, 1.0, 0.4])
    mask = np.array([True, True, True, True, False])
    tr.add(u, r, c, pi, mask)
    m = tr.update()
    # weights 1/pi = 2, 4, 1, 1; mean weight 2
    # loss_p = mean_b (w_b / 2) (1/2 - r_b)^2 = (2 * .25 + 4 * .25 + .04 + .16) / (4 * 2)
    assert m["loss_p"] == pytest.approx(1.70 / 8, rel=1e-6)
    # loss_c = mean_b (w_b / 2) [C_b > 0] (log 100 - log C_b)^2 = (2 * 1 + 0 + 1 * 4) / (4 * 2)
    # (row 4 has a finished prefix, cost 0: success head only)
    assert m["loss_c"] == pytest.approx(6.0 / 8, rel=1e-6)
    assert m["n_labels"] == 4 and m["n_new"] == 4
    # held-out diagnostics of the predictor in use (p = 1/2): IPW Brier (2*.25 + 4*.25 + .04 +
    # .16) / 8, MAPE over positive costs (2 (1 - 1/e) + 0 + (e^2 - 1)) / 7
    assert m["brier"] == pytest.approx(1.70 / 8, rel=1e-12)
    assert m["cost_mape"] == pytest.approx((2 * (1 - 1 / math.e) + math.e**2 - 1) / 7, rel=1e-6)


def test_cost_scale_defaults_to_the_ipw_mean_cost():
    tr = HeadTrainer(4, width=8, steps_per_update=0)
    tr.add(np.zeros((3, 4)), [1.0, 0.0, 1.0], [30.0, 90.0, 0.0], [0.5, 1.0, 1.0], [True] * 3)
    tr.update()
    # (2 * 30 + 1 * 90) / 3; the zero-cost row carries no cost label
    np.testing.assert_allclose(tr.predict(np.zeros((1, 4)))[1], [50.0], rtol=1e-6)


# ----------------------------------------------------------------------------- learning


def test_heads_learn_a_separable_signal():
    rng = np.random.default_rng(0)
    tr = HeadTrainer(8, width=64, lr=3e-3, steps_per_update=40, batch_size=128, seed=1)
    metrics = []
    for _ in range(12):
        u, r, c, pi, mask = _toy_round(rng)
        tr.add(u, r, c, pi, mask)
        metrics.append(tr.update())
    # Out-of-sample (labels scored before the heads trained on them): from chance to < 0.05.
    assert metrics[0]["brier"] == pytest.approx(0.25, abs=1e-9)
    assert np.mean([m["brier"] for m in metrics[-3:]]) < 0.05
    assert np.mean([m["cost_mape"] for m in metrics[-3:]]) < 0.15
    assert metrics[0]["cost_mape"] > 0.5
    u, r, c, _, _ = _toy_round(np.random.default_rng(99), n=500)
    p, c_hat = tr.predict(u)
    assert np.mean((p - r) ** 2) < 0.05
    assert np.mean(np.abs(c_hat - c) / c) < 0.12


def test_temperature_is_fitted_on_the_newest_quarter_and_reduces_nll():
    rng = np.random.default_rng(1)
    tr = HeadTrainer(4, width=8, steps_per_update=0, cost_scale=10.0, seed=0)
    # An overconfident success head: labels are drawn from sigmoid(z / 6) for its logits z.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        torch.nn.init.normal_(tr.heads.success[-1].weight, std=3.0)
    u = rng.normal(size=(400, 4)).astype(np.float32)
    with torch.no_grad():
        logits = tr.heads(torch.as_tensor(u))[0].double().numpy()
    y = (rng.random(400) < 1 / (1 + np.exp(-logits / 6))).astype(float)
    old = 1.0 - y[:300]  # flipped labels in the older three quarters must not matter
    pi = rng.uniform(0.3, 1.0, size=400)
    tr.add(u[:300], old, np.ones(300), pi[:300], np.ones(300, bool))
    tr.add(u[300:], y[300:], np.ones(100), pi[300:], np.ones(100, bool))
    m = tr.update()
    t_ref = fit_temperature(logits[300:], y[300:], weights=1 / pi[300:])
    assert m["temperature"] == pytest.approx(t_ref, rel=1e-9)
    assert m["temperature"] > 2.0
    p = tr.predict(u[300:])[0]
    assert _nll(p, y[300:]) < _nll(1 / (1 + np.exp(-logits[300:])), y[300:]) - 0.1


def test_a_single_class_window_keeps_the_previous_temperature():
    """All-zero labels make the likelihood monotone in 1/T: no fit (it would run to T = 0.05)."""
    rng = np.random.default_rng(2)
    tr = HeadTrainer(4, width=8, steps_per_update=0, cost_scale=10.0, seed=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        torch.nn.init.normal_(tr.heads.success[-1].weight, std=3.0)
    u = rng.normal(size=(200, 4)).astype(np.float32)
    tr.heads.temperature.fill_(1.7)
    tr.add(u, np.zeros(200), np.ones(200), np.full(200, 0.5), np.ones(200, bool))
    assert tr.update()["temperature"] == 1.7
    # with both classes present the fit runs and moves it
    y = (u[:, 0] > 0).astype(float)
    tr.add(u, y, np.ones(200), np.full(200, 0.5), np.ones(200, bool))
    assert tr.update()["temperature"] != 1.7


# ----------------------------------------------------------------------------- replay, lag, state


def test_replay_window_keeps_the_newest_labels():
    tr = HeadTrainer(3, width=8, replay=2048)
    ids = np.arange(3000)
    for chunk in np.array_split(ids, 7):
        mask = chunk % 5 != 0  # unselected rows never enter the window
        tr.add(
            np.zeros((len(chunk), 3)), chunk / 3000, np.ones(len(chunk)), np.ones(len(chunk)), mask
        )
    kept = ids[ids % 5 != 0][-2048:]
    assert tr.n_labels == 2048
    np.testing.assert_array_equal(tr.state_dict()["rewards"].numpy(), kept / 3000)


def test_lagged_predictor_uses_the_previous_checkpoint():
    rng = np.random.default_rng(2)
    rounds = [_toy_round(rng, hidden=6) for _ in range(3)]
    probe = rng.normal(size=(20, 6))
    now = HeadTrainer(6, width=16, steps_per_update=5, seed=3, cost_scale=40.0)
    lag = HeadTrainer(6, width=16, steps_per_update=5, seed=3, cost_scale=40.0, lagged=True)
    previous = now.predict(probe)
    for data in rounds:
        for tr in (now, lag):
            tr.add(*data)
            tr.update()
        for a, b in zip(lag.predict(probe), previous):
            np.testing.assert_array_equal(a, b)
        previous = now.predict(probe)
        assert not np.array_equal(previous[0], lag.predict(probe)[0])


@pytest.mark.parametrize("lagged", [False, True])
def test_state_dict_round_trip_gives_identical_predictions_and_next_update(lagged):
    rng = np.random.default_rng(4)
    kw = dict(width=16, steps_per_update=6, batch_size=32, lagged=lagged)
    a = HeadTrainer(6, seed=5, **kw)
    for _ in range(2):
        a.add(*_toy_round(rng, hidden=6))
        a.update()
    a.add(*_toy_round(rng, hidden=6))  # pending labels are part of the state
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = HeadTrainer(6, seed=123, **kw)  # different init and RNG, all overwritten
    b.load_state_dict(torch.load(buf, weights_only=True))
    probe = rng.normal(size=(10, 6))
    for x, y in zip(a.predict(probe), b.predict(probe)):
        np.testing.assert_array_equal(x, y)
    ma, mb = a.update(), b.update()
    assert ma == pytest.approx(mb, rel=0, abs=0, nan_ok=True)
    for x, y in zip(a.predict(probe), b.predict(probe)):
        np.testing.assert_array_equal(x, y)


def test_load_state_dict_rejects_a_different_lag_setting():
    sd = HeadTrainer(4, width=8, lagged=True).state_dict()
    with pytest.raises(ValueError, match="lagged = True"):
        HeadTrainer(4, width=8).load_state_dict(sd)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((np.zeros((2, 5)), [1, 0], [1, 1], [1, 1], [True, True]), r"features must have shape"),
        (
            (np.zeros((2, 4)), [1, 0], [1, 1], [0.0, 1], [True, True]),
            r"pi must be > 0.*pi\[0\] = 0.0",
        ),
        (
            (np.zeros((2, 4)), [1, 2], [1, 1], [1, 1], [True, True]),
            r"rewards must be in \[0, 1\].*rewards\[1\] = 2.0",
        ),
        (
            (np.zeros((2, 4)), [1, 0], [1, -1], [1, 1], [True, True]),
            r"costs must be finite and >= 0.*costs\[1\] = -1.0",
        ),
        ((np.zeros((2, 4)), [1, 0], [1, 1], [1, 1], [True]), r"mask must have shape \(2,\)"),
        ((np.full((2, 4), np.nan), [1, 0], [1, 1], [1, 1], [True, True]), "features must be"),
    ],
)
def test_add_rejects_bad_labels(args, match):
    with pytest.raises(ValueError, match=match):
        HeadTrainer(4, width=8).add(*args)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"replay": 0}, "replay must be >= 1"),
        ({"lr": 0.0}, "lr must be > 0"),
        ({"temperature_fraction": 0.0}, "temperature_fraction"),
        ({"cost_scale": -1.0}, "cost_scale must be > 0"),
    ],
)
def test_bad_trainer_arguments_raise(kw, match):
    with pytest.raises(ValueError, match=match):
        HeadTrainer(4, width=8, **kw)
