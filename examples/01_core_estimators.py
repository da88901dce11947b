"""PAIR's statistical core in ~60 lines of numpy: one prompt group, end to end, checked exactly.

    python examples/01_core_estimators.py

1. G candidates with rewards r_i and (toy) score vectors s_i.
2. The LOO gradient equals the complete pair average (PAIR paper, Theorem 1).
3. Prefix predictions p_hat, c_hat -> allocation pi under an expected suffix budget.
4. A Bernoulli and a conditional-Poisson design with those pi; one draw J; pair-HT gradient and
   sequence advantages A_i (sum_i A_i s_i equals the pair-HT gradient).
5. Design-unbiasedness, checked exactly by enumerating each design's support (Theorem 2).

Needs only the core install (numpy, scipy, numba): no torch.
"""

from __future__ import annotations

import numpy as np

import pairht
from pairht.allocation import allocate, design_for

rng = np.random.default_rng(0)
G, d = 8, 3

# 1. one group: binary rewards and score vectors (in training, s_i = grad log pi(o_i | q))
rewards = np.array([1, 0, 0, 1, 0, 1, 0, 0], dtype=float)
scores = rng.normal(size=(G, d))

# 2. Theorem 1: leave-one-out gradient == average of the G(G-1)/2 pair kernels
g_loo = pairht.loo_gradient(rewards, scores)
g_pair = pairht.pair_gradient(rewards, scores)
print("LOO gradient      ", np.round(g_loo, 6))
print("pair average      ", np.round(g_pair, 6))
assert np.allclose(g_loo, g_pair, atol=1e-12)

# 3. prefix heads would give these: success probabilities and remaining-token predictions
p_hat = np.array([0.9, 0.2, 0.5, 0.6, 0.1, 0.7, 0.4, 0.5])
c_hat = np.array([120.0, 300, 200, 150, 400, 100, 250, 220])
budget = 0.5 * c_hat.sum()  # half of the full group's predicted suffix cost
res = allocate(p_hat, c_hat, budget, pi_min=0.08)
print("pi (bernoulli)    ", np.round(res.pi, 3), " expected cost", round(float(res.pi @ c_hat), 1),
      "<= budget", budget)
fixed = allocate(p_hat, c_hat, budget, pi_min=0.08, size="auto")  # sum(pi) an integer
print("pi (fixed size)   ", np.round(fixed.pi, 3), " sum", round(float(fixed.pi.sum()), 6))

for name, pi, kind in [("bernoulli", res.pi, "bernoulli"),
                       ("conditional Poisson", fixed.pi, "conditional_poisson")]:
    design = design_for(pi, kind)
    joint = design.joint()  # rho_ij, logged before any reward exists

    # 4. one draw: complete only the selected candidates, estimate from the induced edges
    mask = design.sample(rng)
    g_ht = pairht.pair_ht_gradient(rewards, scores, mask, joint)
    adv = pairht.pair_advantages(rewards, mask, joint)
    assert np.allclose(adv @ scores, g_ht, atol=1e-12)  # advantages reproduce the gradient
    print(f"\n{name}: completed {int(mask.sum())}/{G}; pair-HT gradient {np.round(g_ht, 4)}")
    print("  advantages", np.round(adv, 4))

    # 5. Theorem 2, exactly: the design-weighted mean over every possible draw is g_pair
    masks, probs = design.support()
    expected = sum(p * pairht.pair_ht_gradient(rewards, scores, m, joint)
                   for m, p in zip(masks, probs))
    print(f"  E_design[pair-HT] over {len(probs)} support points = {np.round(expected, 10)}")
    assert np.allclose(expected, g_pair, atol=1e-10)

print("\nall identities hold exactly")
