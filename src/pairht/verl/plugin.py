"""The ``verl.plugins`` entry point: importing this module registers pairht with verl.

``import verl`` loads every entry point of the group (driver and Ray workers alike), which
imports this module; its imports run the registrations: the trainer mode ``pair_sync``
(:mod:`pairht.verl.trainer`) and the agent-loop worker and manager
(:mod:`pairht.verl.agent_loop`, selected by its class path). verl logs a failure here only at
debug level, so tests/verl/test_plugin.py checks the registration.
"""

from __future__ import annotations

from pairht.verl import agent_loop, trainer  # noqa: F401  (their imports register them)

__all__: list[str] = []
