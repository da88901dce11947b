"""pairht.torch: the framework-neutral torch layer every training integration shares.

Prefix heads and their trainer (:mod:`pairht.torch.heads`), the run's history
(:mod:`pairht.torch.history`), advantages as tensors (:mod:`pairht.torch.advantages`), dropping
the rows nobody completed (:mod:`pairht.torch.row_drop`) and the collectives a multi-process
step needs (:mod:`pairht.torch.distributed`). It imports torch and the core, never TRL or verl:
the TRL trainer (:mod:`pairht.trl`) and the verl plugin (:mod:`pairht.verl`) both stand on it.
Needs the ``trl`` extra's torch (``pip install 'pairht[trl]'``).
"""

from pairht._extras import require

require("pairht.torch", "trl", "torch")
