"""Accelerator check: which backend and device xagents computes on, and how fast it trains there; prints
figures, asserts nothing::

    KERAS_BACKEND=jax python benchmarks/gpu.py [--runs NAME ...] [--max-steps N] [--atari-steps 50000]
                                               [--mujoco-steps 15000] [--eval-frequency N] [--eval-episodes 10]
                                               [--act-on-device] [--seed 0] [--output results.json]

Every flag is checked before anything loads: a bad one, or a backend that cannot load, is one line, exit status 2.

Self-contained: it runs from a checkout (no install) wherever Keras, Gymnasium (with ale-py for the Atari run and
mujoco for Hopper) and one backend are importable, JAX or PyTorch with a GPU included, and TensorFlow absent. Each
run builds an agent with its preset's settings, one seed, and trains:

- to a target (a training mean reward): PPO on CartPole-v1 to 475, SAC, TQC and CrossQ on Pendulum-v1 to -200,
  QR-DQN on CartPole-v1 to 475: steps, time to target (building the agent and compiling included) and steps/s;
- for a fixed number of steps: PPO on Pong (``PongNoFrameskip-v4``, 8 envs, ``--atari-steps``), CrossQ on
  Hopper-v5 and HalfCheetah-v5 with the paper's 2048-2048 critics and TQC on them with RL Zoo's settings
  (``--mujoco-steps``, 15,000 by default, the first 5,000 or 10,000 without updates): steps/s.

``--eval-frequency`` adds deterministic evaluations (``--eval-episodes`` each) as ``xagents train`` makes them:
with ``--mujoco-steps 300000`` a MuJoCo run is one seed of the papers' 300k-step comparison. Each evaluation is
written to the JSON file as it is made, so a run cut short keeps its curve.

Every run also splits ``fit``'s time between the first update (tracing and compiling), the other updates and
the rest: collection (acting and env stepping) and bookkeeping. ``--max-steps`` caps every run, its target dropped
(a quick check that each agent trains on the device, for the slower backends; 0, the default, caps nothing).
Updates stay on the device, each one compiled call on JAX and TensorFlow (eager on PyTorch). A small dense policy acts in NumPy on the host, on every device, from a copy
of its weights taken after each update; ``--act-on-device`` makes it act through the compiled model instead, as a
CNN does. Env stepping runs on the host, as it does in every library here. The JSON file is rewritten after every
run, so a run cut short keeps what finished.
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

# name: (agent, env, target or None, steps)
RUNS = {
    'ppo-cartpole': ('ppo', 'CartPole-v1', 475.0, 200_000),
    'sac-pendulum': ('sac', 'Pendulum-v1', -200.0, 20_000),
    'tqc-pendulum': ('tqc', 'Pendulum-v1', -200.0, 20_000),
    'crossq-pendulum': ('crossq', 'Pendulum-v1', -200.0, 20_000),
    'qrdqn-cartpole': ('qrdqn', 'CartPole-v1', 475.0, 50_000),
    'ppo-pong': ('ppo', 'PongNoFrameskip-v4', None, 50_000),
    'crossq-hopper': ('crossq', 'Hopper-v5', None, 15_000),
    'crossq-halfcheetah': ('crossq', 'HalfCheetah-v5', None, 15_000),
    'tqc-hopper': ('tqc', 'Hopper-v5', None, 15_000),
    'tqc-halfcheetah': ('tqc', 'HalfCheetah-v5', None, 15_000),
}
MUJOCO = {name for name, (_, env, _, _) in RUNS.items() if env.endswith('-v5')}


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


def timed(agent) -> dict:
    """Wrap ``agent``'s update (one compiled call: off-policy agents' ``update``, on-policy agents' ``train_step``)
    to add up its seconds, waiting for its results; the rest of ``fit`` is collection and bookkeeping."""
    import keras

    seconds = {'first_update_s': 0.0, 'update_s': 0.0, 'updates': 0}
    name = 'update' if hasattr(agent, 'update') else 'train_step'
    update = getattr(agent, name)

    def timed_update(*args, **kwargs):
        start = time.perf_counter()
        result = update(*args, **kwargs)
        for value in result.values():
            keras.ops.convert_to_numpy(value)
        key = 'update_s' if seconds['updates'] else 'first_update_s'  # the first one traces and compiles
        seconds[key] += time.perf_counter() - start
        seconds['updates'] += 1
        return result

    setattr(agent, name, timed_update)
    return seconds


def evaluations(record: dict, save, started: float):
    """A callback that adds each deterministic evaluation to ``record`` as ``[step, mean reward]``, prints it
    and calls ``save``."""
    from xagents.training.callbacks import Callback

    class Evaluations(Callback):
        def on_metrics(self, run, metrics: dict[str, float]) -> None:
            if 'eval_reward' in metrics:
                record['evaluations'].append([int(run.steps), float(metrics['eval_reward'])])
                print(f"{record['agent']} {record['env']} seed {record['seed']}: step {run.steps:,} evaluation "
                      f"{metrics['eval_reward']:.1f} ({time.perf_counter() - started:.0f} s)", flush=True)
                save()

    return Evaluations()


def train(agent_name: str, env: str, seed: int, target: float | None, max_steps: int,
          eval_frequency: int | None = None, eval_episodes: int = 10, save=lambda record: None) -> dict:
    """Build the preset agent and train it to ``target`` (a training mean reward) or for ``max_steps``, evaluating
    every ``eval_frequency`` steps; ``save`` gets the record so far after each evaluation."""
    from xagents.envs.creation import close_envs
    from xagents.registry import agent_class

    started = time.perf_counter()
    agent = agent_class(agent_name).from_env(env, seed=seed, quiet=True)
    built = time.perf_counter()
    seconds = timed(agent)
    record = {'agent': agent_name, 'env': env, 'seed': seed, 'evaluations': []}
    callbacks = [evaluations(record, lambda: save(record), started)] if eval_frequency else []
    run = agent.fit(target_reward=target, max_steps=max_steps, eval_frequency=eval_frequency,
                    eval_episodes=eval_episodes, callbacks=callbacks)
    ended = time.perf_counter()
    result = {**record, 'steps': int(run.steps), 'build_s': built - started,
              'fit_s': ended - built, 'steps_per_s': run.steps / (ended - built), **seconds,
              'collect_s': ended - built - seconds['first_update_s'] - seconds['update_s'],
              'mean_reward': float(run.mean_reward) if math.isfinite(run.mean_reward) else None}
    if target is not None:
        result.update(target=target, reached=bool(run.mean_reward >= target), time_to_target_s=ended - started)
    close_envs(agent.envs)
    return result


def parse_flags(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, every one checked before any agent is built: a bad one is one line, exit status 2."""
    from xagents.app.flags import ArgumentParser, fail

    parser = ArgumentParser(prog='benchmarks/gpu.py', description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument('--runs', nargs='+', choices=sorted(RUNS), default=list(RUNS), help='which runs (all)')
    parser.add_argument('--max-steps', type=int, default=0,
                        help='cap every run at this many steps, its target dropped: a quick check (default: 0, no cap)')
    parser.add_argument('--atari-steps', type=int, default=RUNS['ppo-pong'][3], help="steps of 'ppo-pong'")
    parser.add_argument('--mujoco-steps', type=int, default=RUNS['crossq-hopper'][3],
                        help='steps of the MuJoCo runs (300000: the papers\' comparison)')
    parser.add_argument('--eval-frequency', type=int, help='evaluate every this many steps (default: never)')
    parser.add_argument('--eval-episodes', type=int, default=10, help='deterministic episodes per evaluation')
    parser.add_argument('--seed', type=int, default=0, help='seed of every run (default: 0)')
    parser.add_argument('--act-on-device', action='store_true',
                        help='act through the compiled model on the device, as agents do with a CNN (to compare)')
    parser.add_argument('--output', help='also write the results to this JSON file')
    args = parser.parse_args(argv)
    least = {'max_steps': 0, 'atari_steps': 1, 'mujoco_steps': 1, 'eval_frequency': 1, 'eval_episodes': 1, 'seed': 0}
    for name, minimum in least.items():
        value = getattr(args, name)
        if value is not None and value < minimum:
            fail(f'{parser.prog}: error: expected --{name.replace("_", "-")} >= {minimum}, got {value}'
                 + (' (0: no cap)' if name == 'max_steps' else ''))
    if args.output:
        from xagents.storage.atomic import check_writable

        try:
            check_writable(args.output)
        except ValueError as error:
            fail(f'{parser.prog}: error: --output: {error}')
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_flags(argv)
    from xagents.app.flags import fail
    from xagents.utils.console import BackendError, load_keras

    try:
        load_keras()
    except BackendError as error:
        fail(f'benchmarks/gpu.py: error: {error}')
    results = {'device': device(), 'act_on_device': args.act_on_device, 'runs': []}
    print(json.dumps(results['device']), flush=True)
    if args.act_on_device:
        from xagents.networks import models

        class OnDevice(models.NumpyForward):
            supports = staticmethod(lambda model: False)

        models.NumpyForward = OnDevice  # Forward's choice; updates are compiled as before
    for name in args.runs:
        agent_name, env, target, steps = RUNS[name]
        steps = args.atari_steps if name == 'ppo-pong' else args.mujoco_steps if name in MUJOCO else steps
        if args.max_steps:
            target, steps = None, min(steps, args.max_steps)

        def save(record: dict) -> None:  # a run's evaluations so far, beside the finished runs
            write(args.output, {**results, 'runs': [*results['runs'], {'run': name, **record, 'finished': False}]})

        result = {'run': name, **train(agent_name, env, args.seed, target, steps, args.eval_frequency,
                                       args.eval_episodes, save), 'finished': True}
        results['runs'].append(result)
        reached = '' if target is None else (f", target {target:g} {'reached' if result['reached'] else 'MISSED'} "
                                              f"in {result['time_to_target_s']:.1f} s")
        mean = 'n/a (no episode ended)' if result['mean_reward'] is None else f"{result['mean_reward']:.1f}"
        print(f"{agent_name} {env}: {result['steps']:,} steps, {result['steps_per_s']:,.0f} steps/s, mean reward "
              f"{mean}{reached} (build {result['build_s']:.1f} s; collection and the rest {result['collect_s']:.1f} s, "
              f"first update {result['first_update_s']:.1f} s, {max(result['updates'] - 1, 0)} more {result['update_s']:.1f} s)",
              flush=True)
        write(args.output, results)


def write(path: str | None, results: dict) -> None:
    """Rewrite the JSON file whole, never half-written (none: nothing)."""
    from xagents.storage.atomic import atomic_write

    if path:
        with atomic_write(path) as file:
            file.write(json.dumps(results, indent=1).encode())


if __name__ == '__main__':
    main()
