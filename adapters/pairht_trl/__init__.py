"""pairht_trl: PAIR on TRL's ``GRPOTrainer``.

``from pairht_trl import PairGRPOConfig, PairGRPOTrainer``. The heavy names are loaded lazily
(module ``__getattr__``), so importing a light submodule such as ``pairht_trl.config``'s
rules never imports more than it needs. The verifiers, the two-phase generation contract and the
demo moved to their own packages (``pairht_verifiers``, ``pairht_rollout``, ``pairht_demo``);
the old module paths still import, with a ``DeprecationWarning``, for one release.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> submodule defining it
_EXPORTS: dict[str, str] = {
    "PairGRPOConfig": "pairht_trl.config",
    "PairGRPOTrainer": "pairht_trl.trainer",
    "pair_advantages_torch": "pairht_trl.advantages",
    "AuditCallback": "pairht_trl.audit_mode",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pairht_trl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
