"""Old module paths of code that moved out of ``pairht_trl`` (kept for one release).

``pairht_trl.verifiers`` is now :mod:`pairht_verifiers`, ``pairht_trl.generation`` is
:mod:`pairht_rollout.transformers_backend`, ``pairht_trl.toy`` / ``pairht_trl.demo`` are
:mod:`pairht_demo.toy` / :mod:`pairht_demo.demo`. Each old path is a module object that is the new
one (so ``isinstance`` checks and monkeypatching keep working), reached with a
``DeprecationWarning`` naming the new path.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType


def alias(old: str, new: str) -> ModuleType:
    """Import ``new``, warn that ``old`` moved there, and register it under ``old`` too."""
    warnings.warn(
        f"{old} moved to {new}; import it from there ({old} will be removed in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module
