"""Prefix heads and their IPW trainer (pairht.torch.heads)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from pairht.calibration import fit_temperature, ipw_brier_loss, ipw_log_cost_loss
from pairht.heads_fit import reliability_slope
from pairht.torch.heads import HeadTrainer, PrefixHeads


def _mlp(*args, **kwargs):
    """The paper's MLP heads (``head="mlp"``), which the tests below pin down."""
    return HeadTrainer(*args, head="mlp", **kwargs)


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
    tr = _mlp(4, width=8, steps_per_update=0, cost_scale=100.0)
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


def test_torch_ipw_losses_equal_the_core_ipw_losses():
    """``HeadTrainer._losses`` is the one torch mirror of the core's IPW losses: on a window
    with unequal pi, partial rewards and zero costs (no cost label) it gives
    ``ipw_brier_loss / w_bar`` and ``ipw_log_cost_loss / w_bar`` to float32 rounding."""
    rng = np.random.default_rng(5)
    tr = _mlp(6, width=8, steps_per_update=0, cost_scale=30.0, seed=3)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        torch.nn.init.normal_(tr.heads.success[-1].weight)
        torch.nn.init.normal_(tr.heads.cost[-1].weight, std=0.3)
    n = 40
    u = rng.normal(size=(n, 6)).astype(np.float32)
    r = rng.uniform(size=n)
    c = np.where(rng.random(n) < 0.25, 0.0, rng.uniform(5.0, 80.0, size=n))
    pi = rng.uniform(0.1, 1.0, size=n)
    tr.add(u, r, c, pi, np.ones(n, dtype=bool))
    w_bar = float(np.mean(1.0 / pi))
    with torch.no_grad():
        loss_p, loss_c = tr._losses(torch.arange(n), w_bar)
        logits, c_hat = tr.heads(torch.as_tensor(u))
    p = 1.0 / (1.0 + np.exp(-logits.double().numpy()))
    every = np.ones(n, dtype=bool)
    want_p = ipw_brier_loss(p, r, pi, every) / w_bar
    want_c = ipw_log_cost_loss(c_hat.double().numpy(), c, pi, c > 0) / w_bar
    assert want_c > 0.1 and want_p > 0.01  # both terms carry signal
    assert float(loss_p) == pytest.approx(want_p, rel=1e-5)
    assert float(loss_c) == pytest.approx(want_c, rel=1e-5)


def test_cost_scale_defaults_to_the_ipw_mean_cost():
    tr = _mlp(4, width=8, steps_per_update=0)
    tr.add(np.zeros((3, 4)), [1.0, 0.0, 1.0], [30.0, 90.0, 0.0], [0.5, 1.0, 1.0], [True] * 3)
    tr.update()
    # (2 * 30 + 1 * 90) / 3; the zero-cost row carries no cost label
    np.testing.assert_allclose(tr.predict(np.zeros((1, 4)))[1], [50.0], rtol=1e-6)


# ----------------------------------------------------------------------------- learning


def test_heads_learn_a_separable_signal():
    rng = np.random.default_rng(0)
    tr = _mlp(8, width=64, lr=3e-3, steps_per_update=40, batch_size=128, seed=1)
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


def _overconfident_heads(rng, n):
    """MLP heads whose success logits are spread wide (an overconfident head), and ``n``
    random 4-d features."""
    tr = _mlp(4, width=8, steps_per_update=0, cost_scale=10.0, seed=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        torch.nn.init.normal_(tr.heads.success[-1].weight, std=3.0)
    return tr, rng.normal(size=(n, 4)).astype(np.float32)


def test_temperature_is_fitted_on_the_newest_quarter_and_reduces_nll():
    rng = np.random.default_rng(1)
    # labels are drawn from sigmoid(z / 6) for the heads' logits z
    tr, u = _overconfident_heads(rng, 400)
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
    tr, u = _overconfident_heads(np.random.default_rng(2), 200)
    tr.heads.temperature.fill_(1.7)
    tr.add(u, np.zeros(200), np.ones(200), np.full(200, 0.5), np.ones(200, bool))
    assert tr.update()["temperature"] == 1.7
    # with both classes present the fit runs and moves it
    y = (u[:, 0] > 0).astype(float)
    tr.add(u, y, np.ones(200), np.full(200, 0.5), np.ones(200, bool))
    assert tr.update()["temperature"] != 1.7


# ----------------------------------------------------------------------------- replay, lag, state


def test_replay_window_keeps_the_newest_labels():
    tr = _mlp(3, width=8, replay=2048)
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
    now = _mlp(6, width=16, steps_per_update=5, seed=3, cost_scale=40.0)
    lag = _mlp(6, width=16, steps_per_update=5, seed=3, cost_scale=40.0, lagged=True)
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
    a = _mlp(6, seed=5, **kw)
    for _ in range(2):
        a.add(*_toy_round(rng, hidden=6))
        a.update()
    a.add(*_toy_round(rng, hidden=6))  # pending labels are part of the state
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = _mlp(6, seed=123, **kw)  # different init and RNG, all overwritten
    b.load_state_dict(torch.load(buf, weights_only=True))
    probe = rng.normal(size=(10, 6))
    for x, y in zip(a.predict(probe), b.predict(probe)):
        np.testing.assert_array_equal(x, y)
    ma, mb = a.update(), b.update()
    assert ma == pytest.approx(mb, rel=0, abs=0, nan_ok=True)
    for x, y in zip(a.predict(probe), b.predict(probe)):
        np.testing.assert_array_equal(x, y)


def test_load_state_dict_rejects_a_different_lag_setting():
    sd = _mlp(4, width=8, lagged=True).state_dict()
    with pytest.raises(ValueError, match="lagged = True"):
        _mlp(4, width=8).load_state_dict(sd)


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
        _mlp(4, width=8).add(*args)


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
        _mlp(4, width=8, **kw)


# ----------------------------------------------------------------------------- linear probe


def test_logistic_fit_is_the_penalised_optimum():
    from scipy.optimize import minimize

    from pairht.heads_fit import fit_logistic

    rng = np.random.default_rng(5)
    X = rng.normal(size=(80, 6))
    y = (rng.random(80) < 1 / (1 + np.exp(-X[:, 0]))).astype(float)
    w = rng.uniform(1.0, 4.0, 80)
    lam = 0.05
    a, b = fit_logistic(X, y, w, lam)

    def objective(theta):
        z = X @ theta[:6] + theta[6]
        return w @ (np.logaddexp(0, z) - y * z) / w.sum() + 0.5 * lam * theta[:6] @ theta[:6]

    ref = minimize(objective, np.zeros(7), method="BFGS", options={"gtol": 1e-12}).x
    # Newton converges quadratically; BFGS to gtol 1e-12: both at the unique optimum.
    np.testing.assert_allclose(np.append(a, b), ref, atol=1e-6)


def test_logistic_fit_from_a_warm_start_reaches_the_same_optimum():
    """The cross-validation path starts each penalty from the previous one's solution; the
    line search along ``dz`` (no recomputed ``X a + b``) must still land on the optimum, and
    a separable sample (intercept Hessian -> 0) must stay finite."""
    from pairht.heads_fit import fit_logistic

    rng = np.random.default_rng(8)
    X = rng.normal(size=(300, 12))
    y = (rng.random(300) < 1 / (1 + np.exp(-2 * X[:, 0] + X[:, 1]))).astype(float)
    w = rng.uniform(1.0, 3.0, 300)
    cold = fit_logistic(X, y, w, 0.01)
    warm = fit_logistic(X, y, w, 0.01, init=fit_logistic(X, y, w, 1.0))
    np.testing.assert_allclose(np.append(*warm), np.append(*cold), atol=1e-7)
    sep = (X[:, 0] > 0).astype(float)
    a, b = fit_logistic(X, sep, w, 1e-4)
    assert np.isfinite(a).all() and math.isfinite(b)
    assert np.mean((X @ a + b > 0) == (sep > 0)) == 1.0


def test_ridge_path_solves_the_weighted_normal_equations():
    from pairht.heads_fit import fit_ridge

    rng = np.random.default_rng(6)
    X, t, w = rng.normal(size=(40, 5)), rng.normal(size=40), rng.uniform(0.5, 2.0, 40)
    for lam, (a, b) in zip([1e-3, 0.3], fit_ridge(X, t, w, [1e-3, 0.3])):
        # d/d(a, b) of sum w (t - Xa - b)^2 / sum w + lam ||a||^2 = 0, solved directly
        X1 = np.hstack([X, np.ones((40, 1))])
        A = X1.T @ (X1 * (w / w.sum())[:, None]) + np.diag([lam] * 5 + [0.0])
        ref = np.linalg.solve(A, X1.T @ (w / w.sum() * t))
        np.testing.assert_allclose(np.append(a, b), ref, rtol=1e-9, atol=1e-12)


def test_group_folds_never_split_a_group():
    from pairht.heads_fit import group_folds

    groups = np.repeat(np.arange(10), 7)
    f = group_folds(groups, 4, rng=1)
    for g in range(10):
        assert np.unique(f[groups == g]).size == 1
    assert sorted(np.unique(f).tolist()) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="n_folds must be <= the number of groups"):
        group_folds([0, 0, 1], 3)


def _signal_round(rng, n, hidden=64, noise=1.0):
    """Success drawn from a logistic model on a few feature directions; log-normal cost."""
    u = rng.normal(size=(n, hidden))
    logit = 1.5 * u[:, 0] - 1.0 * u[:, 1] + 0.5 * u[:, 2]
    r = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    c = 50.0 * np.exp(0.6 * u[:, 3] + 0.3 * noise * rng.normal(size=n))
    return u, r, c


def test_linear_heads_beat_the_constant_on_held_out_data_with_few_labels():
    rng = np.random.default_rng(7)
    tr = HeadTrainer(64)
    for _ in range(5):  # 5 x 64 = 320 labels, all observed (pi = 1)
        u, r, c = _signal_round(rng, 64)
        tr.add(u, r, c, np.ones(64), np.ones(64, dtype=bool))
        tr.update()
    u, r, c = _signal_round(np.random.default_rng(70), 2000)
    p_hat, c_hat = tr.predict(u)
    from pairht.heads_fit import brier_skill, log_cost_r2

    # Bayes Brier skill of this model is about 0.35; log-cost R^2 about 0.8.
    assert brier_skill(p_hat, r, np.full(2000, r.mean())) > 0.25
    assert log_cost_r2(c_hat, c, np.full(2000, np.exp(np.log(c).mean()))) > 0.6
    # The prequential estimate saw the same: labels scored before any fit had seen them.
    assert tr.skill_success > 0.1 and tr.skill_cost > 0.4


def test_prequential_skill_equals_its_formula():
    rng = np.random.default_rng(8)
    tr = HeadTrainer(16, cost_scale=40.0)
    u1, r1, c1 = _signal_round(rng, 48, hidden=16)
    c1[:5] = 0.0  # finished prefixes: success labels only
    pi1 = rng.uniform(0.3, 1.0, 48)
    tr.add(u1, r1, c1, pi1, np.ones(48, dtype=bool))
    # Labels predicted by the untrained prior say nothing about the heads: no skill yet.
    assert math.isnan(tr.skill_success) and math.isnan(tr.skill_cost)
    tr.update()
    u2, r2, c2 = _signal_round(rng, 32, hidden=16)
    pi2 = rng.uniform(0.3, 1.0, 32)
    mask2 = rng.random(32) < 0.8
    p2, ch2 = tr.predict(u2)
    w1, w2 = 1 / pi1, 1 / pi2[mask2]
    p_bar = w1 @ r1 / w1.sum()
    pos1 = c1 > 0
    c_bar = np.exp(w1[pos1] @ np.log(c1[pos1]) / w1[pos1].sum())
    tr.add(u2, r2, c2, pi2, mask2)
    # scored rows: the selected rows of batch 2 only (batch 1 met the untrained prior)
    y2, cc2, ph, chh = r2[mask2], c2[mask2], p2[mask2], ch2[mask2]
    num = w2 @ (ph - y2) ** 2
    den = w2 @ (p_bar - y2) ** 2
    assert tr.skill_success == pytest.approx(1 - num / den, rel=1e-12)
    num_c = w2 @ (np.log(chh) - np.log(cc2)) ** 2
    den_c = w2 @ (np.log(c_bar) - np.log(cc2)) ** 2
    assert tr.skill_cost == pytest.approx(1 - num_c / den_c, rel=1e-12)
    metrics = tr.update()
    assert metrics["skill_success"] == tr.skill_success
    assert metrics["skill_cost"] == tr.skill_cost


def test_skill_of_heads_on_pure_noise_features_is_not_positive():
    rng = np.random.default_rng(9)
    tr = HeadTrainer(64)
    for _ in range(6):
        u = rng.normal(size=(64, 64))
        r = (rng.random(64) < 0.3).astype(float)
        c = 50.0 * np.exp(rng.normal(size=64))
        tr.add(u, r, c, np.ones(64), np.ones(64, dtype=bool))
        tr.update()
    # No signal: cross-validated shrinkage keeps the probe at (about) the constant, and the
    # prequential skill says the heads do not help.
    assert tr.skill_success < 0.02 and tr.skill_cost < 0.02


@pytest.mark.parametrize("lagged", [False, True])
def test_linear_state_dict_round_trip_gives_identical_predictions_and_skill(lagged):
    rng = np.random.default_rng(10)
    a = HeadTrainer(12, lagged=lagged)
    for _ in range(2):
        a.add(*_toy_round(rng, hidden=12))
        a.update()
    a.add(*_toy_round(rng, hidden=12))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = HeadTrainer(12, lagged=lagged)
    b.load_state_dict(torch.load(buf, weights_only=True))
    probe = rng.normal(size=(10, 12))
    for x, y in zip(a.predict(probe), b.predict(probe)):
        np.testing.assert_array_equal(x, y)
    assert a.skill() == b.skill()
    assert a.update() == pytest.approx(b.update(), rel=0, abs=0, nan_ok=True)


def test_load_state_dict_rejects_another_head_family():
    with pytest.raises(ValueError, match="head = 'mlp'"):
        HeadTrainer(4).load_state_dict(_mlp(4, width=8).state_dict())
    with pytest.raises(ValueError, match="head must be one of"):
        HeadTrainer(4, head="forest")


# ----------------------------------------------------------------------------- cross-fitting


def _population_with_features(P=12, G=8, hidden=16, seed=11):
    from pairht.audit.population import Population

    rng = np.random.default_rng(seed)
    u, r, c = _signal_round(rng, P * G, hidden=hidden)
    finished = rng.random(P * G) < 0.25
    pop = Population(
        p_hat=np.full((P, G), 0.5), c_hat=np.ones((P, G)), rewards=r.reshape(P, G),
        costs=np.where(finished, 1.0, np.maximum(c, 1.0)).reshape(P, G),
        prefix_len=np.full((P, G), 8), scores=rng.normal(size=(P, G, 3)),
    )
    return pop, u.reshape(P, G, hidden), finished.reshape(P, G)


@pytest.mark.parametrize("kind", ["linear", "constant"])
def test_cross_fit_predictions_are_out_of_fold(kind):
    from pairht.audit.population import Population
    from pairht.heads_fit import group_folds
    from pairht.torch.heads import cross_fit_heads

    pop, u, fin = _population_with_features()
    fit = cross_fit_heads(pop, u, finished=fin, folds=3, kind=kind)
    # Flip every reward and cost of fold 0's prompts: fold 0's predictions must not move.
    fold = group_folds(np.repeat(np.arange(12), 8), 3, rng=0).reshape(12, 8)[:, 0]
    r = pop.rewards.copy()
    r[fold == 0] = 1 - r[fold == 0]
    costs = pop.costs.copy()
    costs[fold == 0] *= 7.0
    flipped = Population(p_hat=pop.p_hat, c_hat=pop.c_hat, rewards=r, costs=costs,
                         prefix_len=pop.prefix_len, scores=pop.scores)
    fit2 = cross_fit_heads(flipped, u, finished=fin, folds=3, kind=kind)
    np.testing.assert_array_equal(fit.p_hat[fold == 0], fit2.p_hat[fold == 0])
    np.testing.assert_array_equal(fit.c_hat[fold == 0], fit2.c_hat[fold == 0])
    assert not np.array_equal(fit.p_hat[fold != 0], fit2.p_hat[fold != 0])


def test_cross_fit_constant_has_zero_skill_and_linear_finds_the_signal():
    from pairht.torch.heads import cross_fit_heads, score_norm_proxy

    pop, u, fin = _population_with_features(P=40, G=8)
    const = cross_fit_heads(pop, u, finished=fin, folds=4, kind="constant")
    assert const.skill_success == 0.0 and const.skill_cost == 0.0
    assert const.within_success == 0.0 and const.within_cost == 0.0
    lin = cross_fit_heads(pop, u, finished=fin, folds=4, kind="linear")
    assert lin.skill_success > 0.15 and lin.skill_cost > 0.5
    # the signal here is per candidate (no prompt effect), so it is all within prompts
    assert lin.within_success > 0.1 and lin.within_cost > 0.4
    np.testing.assert_array_equal(lin.m_hat, score_norm_proxy(pop.prefix_len, lin.c_hat, fin))
    assert lin.n_train == 30 * 8


def test_collect_population_marks_finished_prefixes_and_writes_m_hat(tmp_path):
    from pair_helpers import RecordingReward, make_trainer

    from pairht.torch.heads import score_norm_proxy
    from pairht.trl.audit_mode import collect_population

    reward = RecordingReward()
    trainer = make_trainer(tmp_path, reward=reward, num_generations=4,
                           per_device_train_batch_size=8)
    pop = collect_population(trainer, [dict(trainer.train_dataset[i]) for i in range(4)])
    lengths = np.array([len(ids) for ids in reward.seen]).reshape(4, 4)
    eos = set(trainer.generation_backend.eos_token_ids.tolist())
    ended = np.array([ids[-1] in eos for ids in reward.seen]).reshape(4, 4)
    # finished <=> the completion ended (EOS) inside the prefix: nothing left to generate
    np.testing.assert_array_equal(pop.finished, ended & (lengths == pop.prefix_len))
    assert pop.finished.any() and not pop.finished.all()  # both kinds occur in this toy
    # Finished candidates keep the heads' (positive) c_hat, no 1e-6 sentinel.
    assert np.all(pop.c_hat > 1e-3)
    np.testing.assert_array_equal(
        pop.m_hat, score_norm_proxy(pop.prefix_len, pop.c_hat, pop.finished)
    )


def test_linear_probe_is_refit_on_every_kth_update_only():
    rng = np.random.default_rng(11)
    tr = HeadTrainer(16, refit_every=3, refit_growth=None)  # the age rule alone
    fitted_at = []
    for k in range(7):
        u, r, c = _signal_round(rng, 32, hidden=16)
        tr.add(u, r, c, np.ones(32), np.ones(32, dtype=bool))
        before = tr.probe
        tr.update()
        if tr.probe is not before:
            fitted_at.append(k)
    assert fitted_at == [0, 3, 6]
    assert tr.n_labels == 7 * 32  # labels between refits still enter the window


def test_amortised_refit_keeps_the_held_out_skill():
    """Refitting every 4th update (from the first) gives held-out skill within 0.05 of
    refitting every update (same labels, same model), and both clearly beat the constant."""
    skills = {}
    for every in (1, 4):
        rng = np.random.default_rng(12)
        tr = HeadTrainer(64, refit_every=every, refit_growth=None)
        for _ in range(9):
            u, r, c = _signal_round(rng, 64)
            tr.add(u, r, c, np.ones(64), np.ones(64, dtype=bool))
            tr.update()
        u, r, c = _signal_round(np.random.default_rng(120), 2000)
        p_hat, _ = tr.predict(u)
        from pairht.heads_fit import brier_skill

        skills[every] = brier_skill(p_hat, r, np.full(2000, r.mean()))
    assert skills[1] > 0.25 and skills[4] > 0.25
    assert abs(skills[1] - skills[4]) < 0.05


def test_refit_every_must_be_a_positive_int():
    with pytest.raises(ValueError, match="refit_every must be an int >= 1"):
        HeadTrainer(4, refit_every=0)
    with pytest.raises(ValueError, match="refit_below must be an int >= 0"):
        HeadTrainer(4, refit_below=-1)
    for bad in (0, -0.5, math.inf, True, "0.25"):
        with pytest.raises(ValueError, match="refit_growth must be a finite number > 0"):
            HeadTrainer(4, refit_growth=bad)


def _refits(tr, sizes, rng, hidden=16):
    """Feed batches of the given sizes; the updates (0-based) that refitted the probe."""
    fitted_at = []
    for k, n in enumerate(sizes):
        u, r, c = _signal_round(rng, n, hidden=hidden)
        tr.add(u, r, c, np.ones(n), np.ones(n, dtype=bool))
        before = tr.probe
        tr.update()
        if tr.probe is not before:
            fitted_at.append(k)
    return fitted_at


def test_default_refit_schedule_follows_the_window_growth_then_every_fourth_update():
    """Constant batches b: a refit while a batch adds >= 1/4 to what the last refit saw (the
    first five updates), then when the unseen labels reach 1/4 again (updates 6, 8, 11, 14),
    and at least every 4th update (18, 22, ...)."""
    tr = HeadTrainer(16)
    fitted_at = _refits(tr, [20] * 30, np.random.default_rng(13))
    assert fitted_at == [0, 1, 2, 3, 4, 6, 8, 11, 14, 18, 22, 26]
    assert tr.n_refits == len(fitted_at)
    # refit_every=1 refits on every update; refit_below keeps every update below its size
    assert _refits(HeadTrainer(16, refit_every=1), [20] * 8,
                   np.random.default_rng(13)) == list(range(8))
    assert _refits(HeadTrainer(16, refit_below=100), [20] * 8,
                   np.random.default_rng(13)) == [0, 1, 2, 3, 4, 6]


def test_refit_growth_counts_labels_not_updates_once_the_window_is_full():
    """A full window keeps its size: the growth rule then reads the labels added since the
    refit (here 1/4 of 64 = 16, two batches of 10), not the window's size."""
    tr = HeadTrainer(16, replay=64, refit_every=100)
    fitted_at = _refits(tr, [64] + [10] * 6, np.random.default_rng(14))
    assert fitted_at == [0, 2, 4, 6]


def _drifting_round(rng, n, drift, hidden=64):
    # the demo's regime: a few dozen labels per update, and a success direction that moves
    # as the policy trains (so a stale probe pays)
    u = rng.normal(size=(n, hidden))
    logit = 1.5 * u[:, 0] - 1.0 * u[:, 1] + 0.5 * u[:, 2] + drift * u[:, 4]
    r = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    c = 50.0 * np.exp(0.6 * u[:, 3] + 0.3 * rng.normal(size=n))
    return u, r, c


@pytest.mark.parametrize("seed", [0, 1])
def test_default_refit_schedule_keeps_the_skill_of_refitting_every_update(seed):
    """The default schedule (about 15 refits in 40 updates of 35 labels, as in ``pairht
    demo``) against a refit on every update, on the same drifting label stream: held-out
    Brier skill on fresh data after the last update, and the prequential skills the trainer
    shrinks its predictions by, each within 0.02; the earlier rule (every update up to 1,024
    labels, then every 4th) is shown for scale and does no better."""
    from pairht.heads_fit import brier_skill

    out = {}
    for name, kw in (("every", dict(refit_every=1)), ("default", {}),
                     ("earlier", dict(refit_growth=None, refit_below=1024))):
        rng = np.random.default_rng(seed)
        tr = HeadTrainer(64, **kw)
        for k in range(40):
            u, r, c = _drifting_round(rng, 35, drift=k / 40)
            tr.add(u, r, c, np.ones(35), np.ones(35, dtype=bool))
            tr.update()
        u, r, c = _drifting_round(np.random.default_rng(100 + seed), 4000, drift=1.0)
        p_hat, _ = tr.predict(u)
        out[name] = (brier_skill(p_hat, r, np.full(r.size, r.mean())), tr.skill(), tr.n_refits)
    (every, every_skill, n_every), (dflt, dflt_skill, n_dflt) = out["every"], out["default"]
    assert n_every == 40 and n_dflt <= 16
    assert every > 0.25 and abs(dflt - every) < 0.02
    for key in ("skill_success", "skill_cost"):
        assert abs(dflt_skill[key] - every_skill[key]) < 0.02
    assert dflt >= out["earlier"][0] - 0.01


def test_refit_schedule_survives_a_state_dict_round_trip():
    rng = np.random.default_rng(15)
    a = HeadTrainer(16)
    _refits(a, [20] * 6, rng)
    b = HeadTrainer(16)
    b.load_state_dict(a.state_dict())
    assert b.n_refits == a.n_refits
    later = [20] * 10
    assert _refits(a, later, np.random.default_rng(16)) == _refits(b, later,
                                                                   np.random.default_rng(16))


# ------------------------------------------------------------------ reliability slope
def _scored_trainer(predict):
    """A HeadTrainer past its first update (so new labels are scored) predicting ``predict``."""
    tr = HeadTrainer(4)
    u = np.zeros((2, 4))
    tr.add(u, [1.0, 0.0], [10.0, 20.0], [1.0, 1.0], [True, True])
    tr.update()
    tr.predict = predict
    return tr


def test_add_records_deviations_from_the_group_mean_prediction_shrinkage_centres_on():
    """Columns 4-7 of the held-out record: p_hat - p_bar and r - p_bar with p_bar the mean
    prediction of the label's whole group; c_hat - c_bar and C - c_bar over unfinished
    labels with c_bar the mean predicted cost of the group's unfinished candidates (a
    completed candidate of cost 0 is finished): pairht.step.shrink_predictions' centres."""
    p = np.array([0.2, 0.4, 0.9, 0.5, 0.5, 0.8])
    c = np.array([10.0, 30.0, 50.0, 7.0, 9.0, 11.0])
    tr = _scored_trainer(lambda u: (p[: len(u)], c[: len(u)]))
    before = tr.n_labels
    r = np.array([1.0, np.nan, 0.0, 1.0, 1.0, np.nan])
    cost = np.array([12.0, np.nan, 0.0, 5.0, 8.0, np.nan])  # row 2 finished at its prefix
    mask = np.array([True, False, True, True, True, False])
    tr.add(np.zeros((6, 4)), r, cost, np.array([0.5, 0.5, 1.0, 0.5, 0.5, 0.5]), mask,
           group_size=3)
    h = tr._held_out.numpy()[before:]
    pbar = np.array([0.5, 0.5, 0.6, 0.6])
    np.testing.assert_allclose(h[:, 4], [0.2, 0.9, 0.5, 0.5] - pbar, rtol=0, atol=1e-15)
    np.testing.assert_allclose(h[:, 5], [1.0, 0.0, 1.0, 1.0] - pbar, rtol=0, atol=1e-15)
    cbar = np.array([20.0, np.nan, 9.0, 9.0])  # group 0: (10 + 30) / 2 unfinished
    np.testing.assert_allclose(h[:, 6], np.array([10.0, np.nan, 7.0, 9.0]) - cbar,
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(h[:, 7], np.array([12.0, np.nan, 5.0, 8.0]) - cbar,
                               rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="group_size must be a positive int dividing the 6"):
        tr.add(np.zeros((6, 4)), r, cost, np.full(6, 0.5), mask, group_size=4)


def _simulated(transform, seed=0, groups=1500, g=4):
    """HeadTrainer.skill() for a head predicting ``transform(p_true)``, labels r ~ Bern(p)."""
    gen = np.random.default_rng(seed)
    p_true = 1.0 / (1.0 + np.exp(-gen.normal(0.0, 1.2, (groups, g))))
    r = (gen.random((groups, g)) < p_true).astype(float)
    pred = transform(p_true).reshape(-1)
    tr = _scored_trainer(lambda u: (pred[: len(u)], np.full(len(u), 10.0)))
    tr.replay = 10 ** 6
    tr.add(np.zeros((groups * g, 4)), r.reshape(-1), np.full(groups * g, 10.0),
           np.ones(groups * g), np.ones(groups * g, dtype=bool), group_size=g)
    x = pred.reshape(groups, g) - pred.reshape(groups, g).mean(axis=1, keepdims=True)
    # standard error of the least-squares slope with Bernoulli noise
    se = np.sqrt(np.sum(x ** 2 * p_true * (1 - p_true))) / np.sum(x ** 2)
    return tr.skill(), se


def test_reliability_slope_of_a_calibrated_head_is_one_while_its_brier_skill_is_low():
    """The reason shrink_by defaults to the slope: an oracle head (p_hat = P(r = 1)) has
    slope 1 (no shrinkage needed) but a Brier skill far below 1, so shrinking by skill would
    discard most of what it knows."""
    out, se = _simulated(lambda p: p)
    assert abs(out["slope_success"] - 1.0) < 5 * se
    assert out["skill_success"] < 0.4


def test_reliability_slope_measures_overconfidence_and_no_information():
    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    over, se = _simulated(lambda p: 1.0 / (1.0 + np.exp(-2.5 * logit(p))), seed=1)
    assert over["slope_success"] < 1.0 - 5 * se  # overconfident: shrink
    noise, se = _simulated(lambda p: np.random.default_rng(9).uniform(0.1, 0.9, p.shape),
                           seed=2)
    assert abs(noise["slope_success"]) < 5 * se  # uninformative: shrink to the group mean


def test_reliability_slope_is_the_least_squares_shrinkage():
    gen = np.random.default_rng(3)
    x, y, w = gen.normal(size=50), gen.normal(size=50), gen.uniform(0.5, 2.0, 50)
    beta = reliability_slope(x, y, w)
    loss = lambda b: np.sum(w * (b * x - y) ** 2)  # noqa: E731
    assert loss(beta) <= min(loss(beta - 1e-6), loss(beta + 1e-6))
    assert np.isnan(reliability_slope(np.zeros(3), y[:3], w[:3]))
