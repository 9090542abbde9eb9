"""TensorFlow, JAX and PyTorch, side by side, as whole processes: launch time, time to a target, off-policy throughput.

Each case runs once per backend for every seed, the backends taking turns, on an otherwise idle machine::

    python benchmarks/backends.py [--cases launch ppo-cartpole sac-pendulum sac-pendulum-speed ...] [--seeds 0 1 2]

Cases:

- launch: ``xagents train ppo --env CartPole-v1`` from the process's start to its first env step, seconds, with JAX's
  compilation cache emptied first (a first run's launch), then again with what that run left in it.
- ppo-cartpole: PPO to a 100-episode training mean of 475 on CartPole-v1, whole-process wall seconds.
- sac-pendulum: SAC to a 20-episode training mean of -200 on Pendulum-v1, whole-process wall seconds.
- sac-pendulum-speed, td3-pendulum-speed, sac-hopper-speed, td3-hopper-speed: env steps/s after a 1,000-step random
  warm-up and the first update, with the preset's networks and one gradient step per env step (SAC 256-256, TD3
  400-300 on Hopper-v5).
- compile: seconds the first PPO CartPole round takes beyond the second (tracing and compiling its update), with an
  empty JAX cache, and with the one that filled.

The JAX cache (``JAX_COMPILATION_CACHE_DIR``) is a temporary folder, emptied before every launch and time-to-target
run, so that their times include compiling. Prints one line per run, then the medians and their ratios to
TensorFlow's.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import gymnasium as gym

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ('tensorflow', 'jax', 'torch')
TARGETS = {
    'ppo-cartpole': ['train', 'ppo', '--env', 'CartPole-v1', '--target-reward', '475', '--max-steps', '300000'],
    'sac-pendulum': ['train', 'sac', '--env', 'Pendulum-v1', '--target-reward', '-200', '--max-steps', '20000'],
}
THROUGHPUT = {'sac-pendulum-speed': ('sac', 'Pendulum-v1'), 'td3-pendulum-speed': ('td3', 'Pendulum-v1'),
              'sac-hopper-speed': ('sac', 'Hopper-v5'), 'td3-hopper-speed': ('td3', 'Hopper-v5')}
FIRST_STEP = 'first env step'


class AnnounceFirstStep(gym.Wrapper):
    """Print a line at the env's first step (``--wrapper backends:AnnounceFirstStep``): the end of the launch."""

    announced = False

    def step(self, action):
        if not AnnounceFirstStep.announced:
            AnnounceFirstStep.announced = True
            print(FIRST_STEP, flush=True)
        return super().step(action)


def environment(backend: str, cache: str) -> dict:
    return {**os.environ, 'KERAS_BACKEND': backend, 'JAX_COMPILATION_CACHE_DIR': cache, 'TF_CPP_MIN_LOG_LEVEL': '3',
            'PYTHONPATH': os.pathsep.join(filter(None, [HERE, os.environ.get('PYTHONPATH')]))}


def emptied(cache: str) -> str:
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    return cache


def launch(backend: str, seed: int, cache: str) -> dict:
    """Seconds from the process's start to the first env step of ``xagents train``: with JAX's compilation cache
    empty (a first run), then with what that run left in it (every later run)."""
    command = [sys.executable, '-m', 'xagents', 'train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '64',
               '--no-save', '--seed', str(seed), '--wrapper', 'backends:AnnounceFirstStep']
    times = []
    for folder in (emptied(cache), cache):
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=environment(backend, folder))
        seconds = None
        for line in child.stdout:
            if seconds is None and line.strip() == FIRST_STEP:
                seconds = time.perf_counter() - start
        if child.wait() or seconds is None:
            raise SystemExit(f'{" ".join(command)} failed: {child.stderr.read()[-2000:]}')
        times.append(seconds)
    return {'seconds': times[0], 'cached': times[1]}


def to_target(case: str, backend: str, seed: int, cache: str) -> dict:
    """Whole-process wall seconds to the case's target, and the steps it took."""
    start = time.perf_counter()
    child = subprocess.run([sys.executable, '-m', 'xagents', *TARGETS[case], '--no-save', '--seed', str(seed)],
                           capture_output=True, text=True, env=environment(backend, emptied(cache)))
    if child.returncode:
        raise SystemExit(f'{case} on {backend} failed: {child.stderr[-2000:]}')
    reached = re.search(r'Reward achieved in (\d+) steps', child.stdout)
    return {'seconds': time.perf_counter() - start, 'reached': int(reached.group(1)) if reached else None}


def throughput(case: str, backend: str, seed: int, cache: str, steps: int, warmup: int) -> dict:
    agent, env = THROUGHPUT[case]
    child = subprocess.run([sys.executable, __file__, '--throughput', agent, env, str(seed), str(steps), str(warmup)],
                           capture_output=True, text=True, env=environment(backend, cache))
    if child.returncode:
        raise SystemExit(f'{case} on {backend} failed: {child.stderr[-2000:]}')
    return json.loads(child.stdout.strip().splitlines()[-1])


def compile_seconds(backend: str, seed: int, cache: str) -> dict:
    """The first PPO CartPole update's seconds, with an empty JAX cache and then with the one it filled."""
    times = []
    for empty in (True, False):
        child = subprocess.run([sys.executable, __file__, '--first-update', str(seed)], capture_output=True, text=True,
                               env=environment(backend, emptied(cache) if empty else cache))
        if child.returncode:
            raise SystemExit(f'compile on {backend} failed: {child.stderr[-2000:]}')
        times.append(json.loads(child.stdout.strip().splitlines()[-1])['seconds'])
    return {'seconds': times[0], 'cached': times[1]}


def in_this_process(argv: list[str]) -> None:
    """The child's side of the throughput and compile cases."""
    from xagents.registry import agent_class

    if argv[0] == '--throughput':
        from off_policy_speed import throughput as measured  # beside this script

        agent, env, seed, steps, warmup = argv[1:6]
        speed, ratio = measured(agent_class(agent), env, int(steps) - int(warmup), int(seed),
                                buffer_initial_size=int(warmup))
        print(json.dumps({'steps_per_second': speed, 'gradient_steps_per_env_step': ratio}))
        return
    agent = agent_class('ppo').from_env('CartPole-v1', seed=int(argv[1]), quiet=True)
    agent.start_envs()
    rounds = []
    for _ in range(2):  # a round collects a rollout and updates; the second one's time is what is not compiling
        start = time.perf_counter()
        agent.train_once()
        rounds.append(time.perf_counter() - start)
    print(json.dumps({'seconds': rounds[0] - rounds[1]}))


def main() -> None:
    if sys.argv[1:2] in (['--throughput'], ['--first-update']):
        return in_this_process(sys.argv[1:])
    cases = ['launch', 'compile', *TARGETS, *THROUGHPUT]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cases', nargs='+', choices=cases, default=cases)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--steps', type=int, default=6000, help='throughput cases: env steps in all (default: 6000)')
    parser.add_argument('--warmup', type=int, default=1000, help='throughput cases: random steps first (default: 1000)')
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix='xagents-jax-cache-')
    try:
        for case in args.cases:
            runs = {backend: [] for backend in BACKENDS}
            for seed in args.seeds:
                for backend in BACKENDS:
                    if case == 'launch':
                        run = launch(backend, seed, cache)
                    elif case == 'compile':
                        run = compile_seconds(backend, seed, cache)
                    elif case in TARGETS:
                        run = to_target(case, backend, seed, cache)
                    else:
                        run = throughput(case, backend, seed, cache, args.steps, args.warmup)
                    runs[backend].append(run)
                    print(f'{case} seed {seed} {backend}: {json.dumps(run)}', flush=True)
            for key in ('steps_per_second',) if case in THROUGHPUT else ('seconds', 'cached')[:1 + (case in (
                    'launch', 'compile'))]:
                medians = {backend: statistics.median(run[key] for run in runs[backend]) for backend in BACKENDS}
                print(f'{case}: median {key} ' + ', '.join(f'{backend} {value:,.2f}' for backend, value in medians.items())
                      + ''.join(f'; {backend} / tensorflow {medians[backend] / medians["tensorflow"]:.2f}'
                                for backend in BACKENDS[1:]), flush=True)
            print(flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == '__main__':
    main()
