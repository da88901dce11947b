"""Shared test configuration.

Hypothesis runs derandomized in CI (``CI`` set) so a green run is reproducible; locally the
"dev" profile explores more examples with fresh randomness.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "dev",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
_default_profile = "ci" if os.environ.get("CI") else "dev"
settings.load_profile(os.environ.get("PAIRHT_HYPOTHESIS_PROFILE", _default_profile))

# Tiny-model torch tests are dominated by thread start-up on a 2-core machine shared with other
# work: one intra-op thread makes them 30-80x faster and their timings stable.
try:  # torch is optional for the core's tests
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - the core installs without torch
    pass
