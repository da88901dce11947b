#!/usr/bin/env bash
# PAIR on verl, one node: verl's GRPO example command plus the PAIR lines (marked). Untested on
# a GPU here (docs/verl.md says what was and was not run). Data: verl's gsm8k preprocessing
# (python -m verl.examples.data_preprocess.gsm8k --local_save_dir ~/data/gsm8k, or your own).
# Several nodes: start Ray (`ray start --head` on one, `ray start --address=HEAD:6379` on the
# others), run this on the head with trainer.nnodes set to the node count.
set -euo pipefail
NNODES=${NNODES:-1}
GPUS=${GPUS:-8}
MODEL=${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$HOME/data/gsm8k/train.parquet" \
    data.val_files="$HOME/data/gsm8k/test.parquet" \
    data.train_batch_size=256 \
    data.max_prompt_length=512 \
    data.max_response_length=1024 \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    trainer.n_gpus_per_node="$GPUS" \
    trainer.nnodes="$NNODES" \
    trainer.total_epochs=1 \
    trainer.logger='["console"]' \
    `# --- PAIR: the lines below ---` \
    trainer.use_v1=true \
    trainer.v1.trainer_mode=pair_sync \
    algorithm.use_kl_in_reward=false \
    ++actor_rollout_ref.rollout.agent.agent_loop_manager_class=pairht.verl.agent_loop.PairAgentLoopManager \
    ++pair.rule=pair \
    ++pair.budget_ratio=0.5 \
    ++pair.tau=128 \
    "$@"
