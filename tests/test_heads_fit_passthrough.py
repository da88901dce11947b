"""fit_linear_probe(passthrough=k): the last k feature columns are kept whole beside the
principal directions of the others (the trainer's confidence features)."""

from __future__ import annotations

import numpy as np
import pytest

from pairht.heads_fit import brier_skill, fit_linear_probe


def _data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    # 20 "hidden" columns dominated by one strong direction that carries no signal, then two
    # weak-variance columns of which the first decides success
    hidden = np.outer(rng.normal(size=n), rng.normal(size=20)) * 10 + rng.normal(size=(n, 20))
    conf = rng.normal(size=(n, 2)) * 0.1
    y = (conf[:, 0] > 0).astype(float)
    c = 30.0 * np.exp(rng.normal(size=n) * 0.1)
    return np.c_[hidden, conf], y, c


def test_passthrough_columns_survive_a_projection_that_drops_them():
    u, y, c = _data()
    groups = np.arange(len(y)) // 8
    kept = fit_linear_probe(u, y, c, groups=groups, n_components=1, passthrough=2)
    dropped = fit_linear_probe(u, y, c, groups=groups, n_components=1, passthrough=0)
    ut, yt, _ = _data(seed=1)
    p_kept, _ = kept.predict(ut)
    p_dropped, _ = dropped.predict(ut)
    const = np.full(len(yt), yt.mean())
    # the signal lies only in the passthrough column: kept whole it is found, projected away not
    assert brier_skill(p_kept, yt, const) > 0.5
    assert brier_skill(p_dropped, yt, const) < 0.05
    # block-diagonal basis: one principal direction of the 20 hidden columns, then the identity
    assert kept.basis.shape == (22, 3)
    np.testing.assert_array_equal(kept.basis[20:, 1:], np.eye(2))
    np.testing.assert_array_equal(kept.basis[:20, 1:], 0.0)
    np.testing.assert_array_equal(kept.basis[20:, :1], 0.0)


def test_passthrough_of_every_column_projects_nothing():
    u, y, c = _data(n=120)
    probe = fit_linear_probe(u, y, c, passthrough=u.shape[1])
    np.testing.assert_array_equal(probe.basis, np.eye(u.shape[1]))


@pytest.mark.parametrize("bad", [-1, 23, True, 1.5])
def test_a_bad_passthrough_is_refused_by_name(bad):
    u, y, c = _data(n=40)
    with pytest.raises(ValueError, match=r"passthrough must be an int in \[0, H = 22\]"):
        fit_linear_probe(u, y, c, passthrough=bad)


def test_outputs_logits_and_predict_are_the_probe_formula():
    """``outputs`` is the class docstring's formula on the projected standardised features;
    ``logits`` and ``predict`` (tempered) read it, in any batch shape."""
    u, y, c = _data()
    probe = fit_linear_probe(u, y, c, n_components=3, passthrough=2)
    batch = u[:12].reshape(3, 4, -1)
    x = ((batch - probe.mean) / probe.scale) @ probe.basis
    want_logits = x @ probe.coef_success + probe.intercept_success
    want_c = np.exp(x @ probe.coef_cost + probe.intercept_cost)
    logits, c_hat = probe.outputs(batch)
    assert logits.shape == c_hat.shape == (3, 4)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(c_hat, want_c, rtol=1e-12)
    np.testing.assert_array_equal(probe.logits(batch), logits)
    p, c2 = probe.predict(batch)
    np.testing.assert_allclose(p, 1.0 / (1.0 + np.exp(-want_logits / probe.temperature)),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(c2, c_hat)
    with pytest.raises(ValueError, match="features must have shape"):
        probe.outputs(u[:, :5])
