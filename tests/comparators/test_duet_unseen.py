"""DUET's surrogate per prompt: the history's posterior mean where the prompt was tried, the
group's mean p_hat where it was not (a trainer passes zeros for unseen prompts)."""

from __future__ import annotations

import numpy as np

from pairht.comparators import informativeness


def test_unseen_prompts_fall_back_to_the_heads_mean_prediction():
    p_hat = np.array([[0.2, 0.4], [0.9, 0.7], [0.5, 0.5]])
    u = informativeness([3.0, 0.0, 0.0], [4.0, 0.0, 0.0], p_hat)
    expected = [(4 / 6) * (2 / 6), 0.8 * 0.2, 0.5 * 0.5]  # (s+1)/(t+2); mean p_hat; mean p_hat
    np.testing.assert_allclose(u, expected, rtol=1e-15, atol=0)
