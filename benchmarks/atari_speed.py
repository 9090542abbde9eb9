"""Where PPO's time goes on Atari on this CPU, and the ceiling that sets; prints figures, asserts nothing::

    python benchmarks/atari_speed.py [--env PongNoFrameskip-v4] [--rollouts 10]

With the tuned Atari settings (8 envs x 128 steps, 4 epochs of 4 minibatches of 256), for float32 and bf16:

- env stepping alone: ale-py's C++ vector env against Gymnasium's vector env with the Python wrappers;
- the Nature CNN's floating-point operations: a forward pass per sample (counted from its layers' shapes), and
  per env step of training: one acting pass plus ``epochs`` x (forward + backward, about 3 forward passes);
- whole rollouts: collection (acting + stepping) and the update, timed inside ``fit`` after a warm-up, with the
  update's rate in GFLOP/s beside the rate of a chain of matrix products of the same precision in one graph call;
- the ceiling: the env steps per second the update alone would allow at that rate, and what collection adds;
- whole bf16 training runs of ``--run-steps`` steps as processes: one alone, then two at once (the CPU time one run
  leaves idle, which a second run fills).
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from xagents.utils.console import load_keras  # noqa: E402

load_keras()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from update_flops import matmul_rate  # noqa: E402  (beside this script)

from xagents import PPO  # noqa: E402
from xagents.envs.creation import create_envs  # noqa: E402

logger = logging.getLogger('benchmarks.atari_speed')


def stepping_rate(env_id: str, n_envs: int, seconds: float, **settings) -> float:
    """Vector steps x envs per second with random actions."""
    envs = create_envs(env_id, n_envs=n_envs, seed=0, **settings)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, envs.single_action_space.n, (256, n_envs))
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(actions[steps % 256])
        steps += 1
    rate = steps * n_envs / (time.perf_counter() - start)
    envs.close()
    return rate


def forward_flops(model: tf.keras.Model) -> float:
    """Floating-point operations of one sample's forward pass through ``model``'s convolutions and dense layers."""
    flops = 0
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.Conv2D):
            _, height, width, filters = layer.output.shape
            kernel = layer.kernel.shape
            flops += 2 * height * width * filters * kernel[0] * kernel[1] * kernel[2]
        elif isinstance(layer, tf.keras.layers.Dense):
            flops += 2 * layer.kernel.shape[0] * layer.kernel.shape[1]
    return flops


def rollout_times(env_id: str, precision: str, rollouts: int) -> tuple[PPO, float, float]:
    """Seconds per rollout of collection and of the update, inside training, after a warm-up."""
    agent = PPO.from_env(env_id, seed=0, quiet=True, precision=precision)
    batch = agent.n_steps * agent.envs.num_envs
    agent.fit(max_steps=2 * batch)  # traces and starts the envs
    start = time.perf_counter()
    agent.fit(max_steps=rollouts * batch)
    whole = (time.perf_counter() - start) / rollouts
    start = time.perf_counter()
    for _ in range(rollouts):
        agent.collect()
    collection = (time.perf_counter() - start) / rollouts
    return agent, collection, whole - collection


def runs_rate(env_id: str, steps: int, processes: int) -> float:
    """Env steps per second of ``processes`` whole bf16 PPO runs of ``steps`` steps at once (seeds 0, 1, ...), from
    their launch to the exit of the last, all of them counted."""
    command = [sys.executable, '-m', 'xagents', 'train', 'ppo', '--env', env_id, '--precision', 'bf16', '--max-steps',
               str(steps), '--quiet']
    start = time.perf_counter()
    runs = [subprocess.Popen([*command, '--seed', str(seed)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for seed in range(processes)]
    for run in runs:
        _, error = run.communicate()
        if run.returncode:
            raise SystemExit(f'{" ".join(run.args)} failed: {error.decode()[-2000:]}')
    return processes * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--env', default='PongNoFrameskip-v4')
    parser.add_argument('--rollouts', type=int, default=10, help='timed rollouts per precision (default: 10)')
    parser.add_argument('--seconds', type=float, default=10.0, help='seconds of each env stepping test')
    parser.add_argument('--run-steps', type=int, default=40_960, help='steps of each whole run (default: 40,960)')
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    logging.getLogger('xagents').setLevel(logging.WARNING)
    logger.info('%s, 8 envs, random actions, %d cores:', args.env, os.cpu_count())
    for label, settings in (('ale-py C++ vector env', {}), ('Gymnasium sync + Python wrappers', {'ale_vector': False}),
                            ('Gymnasium async + Python wrappers', {'async_envs': True})):
        logger.info('  %-36s %6.0f env steps/s', label, stepping_rate(args.env, 8, args.seconds, **settings))
    for precision, dtype in (('float32', 'float32'), ('bf16', 'bfloat16')):
        agent, collection, update = rollout_times(args.env, precision, args.rollouts)
        batch = agent.n_steps * agent.envs.num_envs
        forward = forward_flops(agent.model)
        per_step = forward * (1 + 3 * agent.ppo_epochs)
        rate = batch * forward * 3 * agent.ppo_epochs / update
        peak = matmul_rate(1024, products=100, dtype=dtype)
        logger.info('%s: forward %.1f MFLOP a sample; %.0f MFLOP of training per env step', precision, forward / 1e6,
                    per_step / 1e6)
        logger.info('  a rollout of %d steps: collection %.2f s, update %.2f s (%.0f GFLOP/s; a %s matmul chain: %.0f '
                    'GFLOP/s) -> %.0f env steps/s', batch, collection, update, rate / 1e9, dtype, peak / 1e9,
                    batch / (collection + update))
        logger.info('  ceiling: the update alone allows %.0f env steps/s at its rate, %.0f at the matmul rate',
                    batch / update, peak / per_step)
        agent.envs.close()
    alone, two = runs_rate(args.env, args.run_steps, 1), runs_rate(args.env, args.run_steps, 2)
    logger.info('whole bf16 runs of %d steps: one alone %.0f env steps/s, two at once %.0f together (%.2fx)',
                args.run_steps, alone, two, two / alone)


if __name__ == '__main__':
    main()
