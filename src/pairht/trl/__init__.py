"""pairht.trl: PAIR on TRL's ``GRPOTrainer`` (the ``trl`` extra).

``from pairht.trl import PairGRPOConfig, PairGRPOTrainer``. The heavy names are loaded lazily
(module ``__getattr__``), so importing a light submodule such as ``pairht.trl.config``'s
rules never imports more than it needs.
"""

from __future__ import annotations

from pairht._extras import require
from pairht._lazy import lazy_exports

require("pairht.trl", "trl", "torch", "transformers", "trl")


# defining module -> the names exported from it
_EXPORTS: dict[str, tuple[str, ...]] = {
    "pairht.trl.config": ("PairGRPOConfig",),
    "pairht.trl.trainer": ("PairGRPOTrainer",),
    "pairht.torch.advantages": ("pair_advantages_torch",),
    "pairht.trl.audit_mode": ("AuditCallback",),
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
