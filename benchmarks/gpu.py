"""Accelerator check: which backend and device xagents computes on, and how fast it trains there; prints
figures, asserts nothing::

    KERAS_BACKEND=jax python benchmarks/gpu.py [--output results.json] [--atari-steps 50000] [--seed 0]

Self-contained: it runs from a checkout (no install) wherever Keras, Gymnasium (with ale-py for the Atari run) and
one backend are importable, JAX or PyTorch with a GPU included, and TensorFlow absent. It trains, with the presets'
settings and one seed:

- PPO on CartPole-v1 to a training mean reward of 475, and SAC on Pendulum-v1 to -200: steps, time to target
  (building the agent and compiling included) and steps/s;
- PPO on Pong (``PongNoFrameskip-v4``, 8 envs) for a fixed number of steps: steps/s.

Acting and updates stay on the device: an agent acts in NumPy only on a CPU (``backend.gpu_available()``), and
each update is one compiled call on JAX and TensorFlow (eager on PyTorch). Env stepping runs on the host, as it
does in every library here.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

RUNS = (('ppo', 'CartPole-v1', 475.0, 200_000), ('sac', 'Pendulum-v1', -200.0, 20_000))
ATARI = ('ppo', 'PongNoFrameskip-v4')


def device() -> dict:
    """The Keras backend and the devices it computes on."""
    import keras

    backend = keras.backend.backend()
    if backend == 'jax':
        import jax

        devices = [f'{item.platform}:{item.device_kind}' for item in jax.devices()]
        version = jax.__version__
    elif backend == 'torch':
        import torch

        devices = ([f'cuda:{torch.cuda.get_device_name(i)}' for i in range(torch.cuda.device_count())]
                   or [f'cpu ({torch.get_num_threads()} threads)'])
        version = torch.__version__
    else:
        import tensorflow as tf

        devices = [f'{item.device_type}:{item.name}' for item in tf.config.list_logical_devices()]
        version = tf.__version__
    from xagents import backend as xagents_backend

    return {'backend': backend, 'backend_version': version, 'keras': keras.__version__, 'devices': devices,
            'gpu': xagents_backend.gpu_available(), 'python': platform.python_version(), 'cpus': os.cpu_count()}


def train(agent_name: str, env: str, seed: int, target: float | None, max_steps: int) -> dict:
    """Build the preset agent and train it to ``target`` (a training mean reward) or for ``max_steps``."""
    from xagents.envs.creation import close_envs
    from xagents.registry import agent_class

    started = time.perf_counter()
    agent = agent_class(agent_name).from_env(env, seed=seed, quiet=True)
    built = time.perf_counter()
    run = agent.fit(target_reward=target, max_steps=max_steps)
    ended = time.perf_counter()
    result = {'agent': agent_name, 'env': env, 'seed': seed, 'steps': int(run.steps), 'build_s': built - started,
              'fit_s': ended - built, 'steps_per_s': run.steps / (ended - built),
              'mean_reward': float(run.mean_reward) if math.isfinite(run.mean_reward) else None}
    if target is not None:
        result.update(target=target, reached=bool(run.mean_reward >= target), time_to_target_s=ended - started)
    close_envs(agent.envs)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--output', help='also write the results to this JSON file')
    parser.add_argument('--atari-steps', type=int, default=50_000, help='steps of the Atari run (0: skip it)')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    from xagents.utils.console import load_keras

    load_keras()
    results = {'device': device(), 'runs': []}
    print(json.dumps(results['device']), flush=True)
    jobs = [(name, env, target, steps) for name, env, target, steps in RUNS]
    if args.atari_steps:
        jobs.append((*ATARI, None, args.atari_steps))
    for name, env, target, steps in jobs:
        result = train(name, env, args.seed, target, steps)
        results['runs'].append(result)
        reached = '' if target is None else (f", target {target:g} {'reached' if result['reached'] else 'MISSED'} "
                                              f"in {result['time_to_target_s']:.1f} s")
        mean = 'n/a (no episode ended)' if result['mean_reward'] is None else f"{result['mean_reward']:.1f}"
        print(f"{name} {env}: {result['steps']:,} steps, {result['steps_per_s']:,.0f} steps/s, mean reward "
              f"{mean}{reached} (build {result['build_s']:.1f} s)", flush=True)
    if args.output:
        with open(args.output, 'w') as file:
            json.dump(results, file, indent=1)


if __name__ == '__main__':
    main()
