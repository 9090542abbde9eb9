"""xagents against Stable-Baselines3 + RL Zoo settings, side by side, seed by seed; prints the figures.

Each case runs both libraries in turn for every seed as whole processes (imports, graph tracing
and all), on an otherwise idle machine; a case says whether both sides have the same settings::

    python benchmarks/versus_sb3.py --sb3-python sb3/bin/python [--cases ppo-cartpole ...] [--seeds 0 1 2]
        [--backends tensorflow jax torch]

(`benchmarks/sb3_baseline.py` says how to make the SB3 environment.) Cases:

- ppo-cartpole: PPO to a 100-episode training mean of 475 on CartPole-v1, wall seconds, each library with its own
  tuned preset: xagents' (8 epochs at a constant lr 3e-3) against RL Zoo's (20 epochs, lr 1e-3 and clip range 0.2
  both decayed linearly to 0 over 100k steps).
- ppo-cartpole-same: the same with identical settings and networks on both sides: RL Zoo's, with the clip range
  kept at 0.2 on both (xagents' clip range has no schedule), and SB3's Adam epsilon (1e-5) in xagents.
- sac-pendulum: SAC to a 20-episode training mean of -200 on Pendulum-v1, wall seconds, each with its own preset:
  xagents' 64-64 networks, 1,000 random steps and 50 gradient steps every 50 env steps, against RL Zoo's 256-256
  networks, 100 random steps and one gradient step per env step.
- sac-pendulum-same: the same with identical settings and networks: RL Zoo's on both sides (256-256, one gradient
  step per env step, a 1M buffer, PyTorch's Adam epsilon 1e-8), but 256 random steps first on both, not 100
  (xagents samples a batch of 256 only from a buffer that holds one).
- ppo-pong: PPO on PongNoFrameskip-v4, 8 envs, 10,240 env steps, wall seconds (ppo-pong-bf16: xagents with
  ``--precision bf16``, against the same SB3 run).
- sac-hopper, td3-hopper: env steps/s on Hopper-v5 after a 1,000-step random warm-up and the first
  update, at the same network sizes (SAC 256-256, TD3 400-300) and one gradient step per env step.
- qrdqn-lunar: the same for QR-DQN on LunarLander-v3 with RL Zoo's settings (256-256, 170 quantiles, 256 gradient
  steps every 256 env steps) against SB3-contrib's QRDQN; tqc-hopper for TQC on Hopper-v5 (256-256, 2 critics of
  25 quantiles, one gradient step per env step) against SB3-contrib's TQC; crossq-pendulum and crossq-hopper for
  CrossQ with RL Zoo's settings (Pendulum: 256-256, actor every 2 gradient steps; Hopper: a 256-256 actor, 2048-2048
  critics, actor every 3), one gradient step per env step, against SB3-contrib's CrossQ.

Ratios are of the medians over the seeds: xagents / SB3 for seconds, SB3 / xagents for steps/s. With several
``--backends`` xagents runs once on each (``KERAS_BACKEND``) for every seed, beside the same SB3 run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
XAGENTS = {
    'ppo-cartpole': ['train', 'ppo', '--env', 'CartPole-v1', '--target-reward', '475', '--max-steps', '300000'],
    'sac-pendulum': ['train', 'sac', '--env', 'Pendulum-v1', '--target-reward', '-200', '--max-steps', '20000'],
    'ppo-cartpole-same': ['train', 'ppo', '--env', 'CartPole-v1', '--target-reward', '475', '--max-steps', '300000',
                          '--ppo-epochs', '20', '--lr', '0.001', '--lr-decay-steps', '100000', '--opt-epsilon', '1e-5'],
    'sac-pendulum-same': ['train', 'sac', '--env', 'Pendulum-v1', '--target-reward', '-200', '--max-steps', '20000',
                          '--actor-model', 'ann-actor-256.cfg', '--critic-model', 'ann-critic-256.cfg',
                          '--buffer-initial-size', '256', '--update-every', '1', '--gradient-steps', '1',
                          '--buffer-max-size', '1000000', '--opt-epsilon', '1e-8'],
    'ppo-pong': ['train', 'ppo', '--env', 'PongNoFrameskip-v4', '--n-envs', '8', '--max-steps', '10240'],
    'ppo-pong-bf16': ['train', 'ppo', '--env', 'PongNoFrameskip-v4', '--n-envs', '8', '--max-steps', '10240',
                      '--precision', 'bf16'],
}
THROUGHPUT = {'sac-hopper': ('sac', 'Hopper-v5'), 'td3-hopper': ('td3', 'Hopper-v5'),
              'qrdqn-lunar': ('qrdqn', 'LunarLander-v3'), 'tqc-hopper': ('tqc', 'Hopper-v5'),
              'crossq-pendulum': ('crossq', 'Pendulum-v1'), 'crossq-hopper': ('crossq', 'Hopper-v5')}


def timed(command: list[str], backend: str | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env={
        **os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3', **({'KERAS_BACKEND': backend} if backend else {})})
    if result.returncode != 0:
        raise SystemExit(f'{" ".join(command)} failed: {result.stderr.strip()[-2000:]}')
    return time.perf_counter() - start, result.stdout


def xagents_run(case: str, seed: int, steps: int, warmup: int, backend: str | None = None) -> dict:
    if case in THROUGHPUT:
        agent, env = THROUGHPUT[case]
        _, out = timed([sys.executable, __file__, '--xagents-throughput', agent, env, str(seed), str(steps), str(warmup)],
                       backend)
        return json.loads(out.strip().splitlines()[-1])
    seconds, out = timed([sys.executable, '-m', 'xagents', *XAGENTS[case], '--seed', str(seed)], backend)
    reached = re.search(r'Reward achieved in (\d+) steps', out)
    return {'seconds': seconds, 'reached': int(reached.group(1)) if reached else None}


# The SB3 run each xagents case stands beside, where it has another name.
SB3_CASE = {'ppo-pong-bf16': 'ppo-pong', 'ppo-cartpole-same': 'ppo-cartpole-constant-clip'}


def sb3_run(python: str, case: str, seed: int, steps: int, warmup: int) -> dict:
    seconds, out = timed([python, os.path.join(HERE, 'sb3_baseline.py'), SB3_CASE.get(case, case), '--seed', str(seed),
                          '--steps', str(steps), '--warmup', str(warmup)])
    return {'seconds': seconds, **json.loads(out.strip().splitlines()[-1])}


def xagents_throughput(agent: str, env: str, seed: int, steps: int, warmup: int) -> None:
    """In this process: the preset with a short warm-up and one gradient step per env step; print steps/s after it."""
    from off_policy_speed import throughput  # beside this script

    from xagents.registry import agent_class

    speed, ratio = throughput(agent_class(agent), env, steps - warmup, seed, buffer_initial_size=warmup)
    print(json.dumps({'steps_per_second': speed, 'gradient_steps_per_env_step': ratio}))


def main() -> None:
    if sys.argv[1:2] == ['--xagents-throughput']:
        agent, env, seed, steps, warmup = sys.argv[2:7]
        return xagents_throughput(agent, env, int(seed), int(steps), int(warmup))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sb3-python', required=True, help='python of a virtual environment with stable-baselines3')
    parser.add_argument('--cases', nargs='+', choices=[*XAGENTS, *THROUGHPUT], default=[*XAGENTS, *THROUGHPUT])
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--steps', type=int, default=6000, help='throughput cases: env steps in all (default: 6000)')
    parser.add_argument('--warmup', type=int, default=1000, help='throughput cases: random steps first (default: 1000)')
    parser.add_argument('--backends', nargs='+', choices=['tensorflow', 'jax', 'torch'], default=[None],
                        help="xagents' Keras backends, each run in turn (default: KERAS_BACKEND's)")
    args = parser.parse_args()
    for case in args.cases:
        ours, theirs = {backend: [] for backend in args.backends}, []
        for seed in args.seeds:
            for backend in args.backends:
                ours[backend].append(xagents_run(case, seed, args.steps, args.warmup, backend))
            theirs.append(sb3_run(args.sb3_python, case, seed, args.steps, args.warmup))
            print(f'{case} seed {seed}: ' + '; '.join(f'xagents{" " + backend if backend else ""} {describe(runs[-1])}'
                                                      for backend, runs in ours.items())
                  + f'; SB3 {describe(theirs[-1])}', flush=True)
        for backend, runs in ours.items():
            name = f'xagents{" " + backend if backend else ""}'
            if case in THROUGHPUT:
                mine, base = (statistics.median(run['steps_per_second'] for run in group) for group in (runs, theirs))
                print(f'{case}: median env steps/s {name} {rate(mine)}, SB3 {rate(base)}: {mine / base:.1f}x SB3',
                      flush=True)
            else:
                mine, base = (statistics.median(run['seconds'] for run in group) for group in (runs, theirs))
                print(f'{case}: median wall {name} {mine:.1f} s, SB3 {base:.1f} s: {mine / base:.2f}x SB3', flush=True)
        print(flush=True)


def rate(steps_per_second: float) -> str:
    """Steps per second to three figures at least: CrossQ's MuJoCo update runs at a few a second."""
    return f'{steps_per_second:,.0f}' if steps_per_second >= 100 else f'{steps_per_second:.3g}'


def describe(run: dict) -> str:
    if 'steps_per_second' in run:
        return f'{rate(run["steps_per_second"])} env steps/s'
    reached = f', target at {run["reached"]:,} steps' if run.get('reached') else ''
    return f'{run["seconds"]:.1f} s{reached}'


if __name__ == '__main__':
    main()
