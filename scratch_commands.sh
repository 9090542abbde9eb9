#!/usr/bin/env bash
# The README's example commands, runnable in order from an empty directory.
set -euo pipefail

xagents
xagents train
xagents train ppo

xagents train ppo --env CartPole-v1 --target-reward 250 --n-envs 16 --n-steps 1024 \
    --checkpoints ppo-cartpole.tf --history-checkpoint ppo-cartpole.parquet --seed 123
python -c "from xagents.utils.common import plot_history; plot_history(['ppo-cartpole.parquet'], ['PPO'], 'CartPole-v1', history_interval=100, output='ppo-cartpole.png')"
xagents play ppo --env CartPole-v1 --weights ppo-cartpole.tf --video-dir video
xagents play ppo --env CartPole-v1 --weights ppo-cartpole.tf --frame-dir frames --frame-frequency 10

xagents train ppo --env CartPole-v1 --target-reward 475
xagents train a2c --env CartPole-v1 --target-reward 475 --history-checkpoint a2c-cartpole.parquet
xagents plot ppo-cartpole.parquet a2c-cartpole.parquet --labels PPO A2C --env CartPole-v1 --output curves.png
xagents train ppo --env Pendulum-v1 --target-reward -250 --reward-buffer-size 20
xagents train ppo --env PongNoFrameskip-v4 --n-envs 8 --max-steps 20000
xagents train sac --env Pendulum-v1 --target-reward -200
xagents train dqn --env CartPole-v1 --target-reward 475 --eval-frequency 2500 --eval-episodes 10 --stop-on eval
xagents train trpo --env CartPole-v1 --target-reward 475

xagents tune ppo
xagents tune ppo --env CartPole-v1 --n-trials 6 --trial-steps 20000 --lr 1e-4 1e-2 --n-steps 32 64 128 --plot plots
