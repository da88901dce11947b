"""pairht.trl: PAIR on TRL's ``GRPOTrainer`` (the ``trl`` extra).

``from pairht.trl import PairGRPOConfig, PairGRPOTrainer``. The heavy names are loaded lazily
(module ``__getattr__``), so importing a light submodule such as ``pairht.trl.config``'s
rules never imports more than it needs.
"""

from __future__ import annotations

from pairht._extras import require
from pairht._lazy import lazy_exports

require("pairht.trl", "trl", "torch", "transformers", "trl")


# name -> submodule defining it
_EXPORTS: dict[str, str] = {
    "PairGRPOConfig": "pairht.trl.config",
    "PairGRPOTrainer": "pairht.trl.trainer",
    "pair_advantages_torch": "pairht.torch.advantages",
    "AuditCallback": "pairht.trl.audit_mode",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
