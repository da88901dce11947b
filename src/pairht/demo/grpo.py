"""The demo's GRPO arm: ``trl.GRPOTrainer`` decoding with the loop PAIR's backend uses.

PAIR's transformers backend (:class:`pairht.rollout.transformers_backend.TransformersTwoPhase`)
decodes with :func:`pairht.rollout.decode.decode_rows`, which drops each row from the batch the
step it ends. ``GRPOTrainer``'s own ``generate`` keeps every row until the longest ends, so
comparing the two would credit PAIR with a decoding loop rather than with its tokens. The
comparisons of :mod:`pairht.demo` (``pairht demo``, ``pairht experiment``) therefore run GRPO
through :class:`RowDropGRPOTrainer`: the same trainer with the same decoding loop, same
completions under greedy decoding and the same sampling distribution as ``generate``.
"""

from __future__ import annotations

from typing import Any

import torch
from trl.models import unwrap_model_for_generation

from pairht.rollout.decode import decode_rows
from pairht.rollout.features import left_pad
from trl import GRPOTrainer

__all__ = ["RowDropGRPOTrainer"]


class RowDropGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose plain-``transformers`` generation drops finished rows.

    Only the text-only ``transformers`` path changes (no vLLM, no continuous batching, no
    images or multimodal fields, no padding to a multiple); every other path is TRL's own.
    """

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ) -> tuple[list[list[int]], Any]:
        budget = self.max_completion_length
        if (self.use_vllm or self.use_transformers_continuous_batching or images is not None
                or multimodal_fields or self.pad_to_multiple_of is not None or budget is None):
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        ids, mask = left_pad(prompt_ids, self._tokenizer.pad_token_id, self.accelerator.device)
        args: Any = self.args  # a GRPOConfig (typed as TrainingArguments by transformers)
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as unwrapped,
            torch.no_grad(),
        ):
            completions = decode_rows(
                unwrapped, ids, mask, max_new_tokens=budget,
                generation_config=self.generation_config,
            )
        return completions, None  # TRL's transformers path reports no log-probabilities either
