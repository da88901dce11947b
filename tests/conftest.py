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
settings.load_profile(os.environ.get("PAIRHT_HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
