"""pairht.trl: PAIR on TRL's ``GRPOTrainer`` (the ``trl`` extra).

``from pairht.trl import PairGRPOConfig, PairGRPOTrainer``. The heavy names are loaded lazily
(module ``__getattr__``), so importing a light submodule such as ``pairht.trl.config``'s
rules never imports more than it needs.
"""

from __future__ import annotations

import importlib
from typing import Any

from pairht._extras import require

require("pairht.trl", "trl", "torch", "transformers", "trl")


# name -> submodule defining it
_EXPORTS: dict[str, str] = {
    "PairGRPOConfig": "pairht.trl.config",
    "PairGRPOTrainer": "pairht.trl.trainer",
    "pair_advantages_torch": "pairht.torch.advantages",
    "AuditCallback": "pairht.trl.audit_mode",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pairht.trl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
