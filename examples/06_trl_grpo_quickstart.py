"""TRL's GRPO quick start, on a local model folder and a local JSONL file.

Run as TRL's ``GRPOTrainer`` would run it; the PAIR version of this script differs in the two
class names only (``GRPOConfig`` -> ``PairGRPOConfig``, ``GRPOTrainer`` -> ``PairGRPOTrainer``,
imported from ``pairht.trl``; tests/trl/test_drop_in.py makes exactly that change and trains)::

    python examples/06_trl_grpo_quickstart.py MODEL_DIR DATA.jsonl OUTPUT_DIR
"""

import sys

from datasets import load_dataset

from trl import GRPOConfig, GRPOTrainer

model_dir, data_file, output_dir = sys.argv[1:4]
dataset = load_dataset("json", data_files=data_file, split="train")


# Reward completions that are close to 20 characters (TRL's quick start reward)
def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]


training_args = GRPOConfig(
    output_dir=output_dir,
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=24,
    max_steps=2,
    logging_steps=1,
    report_to="tensorboard",
    use_cpu=True,
    bf16=False,
)
trainer = GRPOTrainer(
    model=model_dir,
    reward_funcs=reward_len,
    args=training_args,
    train_dataset=dataset,
)
trainer.train()
