"""pairht.verl: PAIR as a verl plugin (the ``verl`` extra; verl pinned, see docs/verl.md).

* :mod:`pairht.verl.config` -- the ``pair:`` config section, checked (no verl needed);
* :mod:`pairht.verl.rows` -- the plan as per-row fields, and the one call of the estimator;
* :mod:`pairht.verl.advantage` -- ``pair_advantage(DataProto) -> DataProto``;
* :mod:`pairht.verl.trainer` -- the v1 trainer mode ``pair_sync``;
* :mod:`pairht.verl.agent_loop` -- the two-phase agent-loop worker;
* :mod:`pairht.verl.plugin` -- the ``verl.plugins`` entry point registering them.

The submodules are imported on demand (``import pairht.verl`` itself imports no verl module).
"""

from __future__ import annotations

from pairht._extras import require

require("pairht.verl", "verl", "torch", "verl")
