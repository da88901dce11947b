"""pairht.demo: the built-in verifiable toy task and the PAIR-vs-GRPO demo (``pairht demo``).

Kept out of :mod:`pairht.trl` so that the trainer package holds only the trainer, its config,
heads and audit mode. :mod:`pairht.demo.toy` builds a tiny Llama and tokenizer locally (no hub);
:mod:`pairht.demo.demo` trains it with TRL's ``GRPOTrainer`` and ``PairGRPOTrainer``.
"""

from pairht._extras import require

require("pairht.demo", "trl", "torch", "transformers")  # the toy task needs no TRL
