"""Whole-process speed of `xagents train` to a target reward: env steps and wall seconds per seed.

Each run is a fresh `xagents train <agent> --env <env> --target-reward <target> --seed <seed>` process,
timed from launch to exit, so TensorFlow's import, model building and graph tracing are included.
Prints one line per run and the medians. Run it on an otherwise idle machine:

    python benchmarks/train_speed.py ppo CartPole-v1 475 --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time


def run(agent: str, env: str, target: float, seed: int, extra: list[str]) -> tuple[int | None, float]:
    command = [sys.executable, '-m', 'xagents', 'train', agent, '--env', env, '--target-reward',
               str(target), '--seed', str(seed), '--log-frequency', '1000', *extra]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    match = re.search(r'Reward achieved in (\d+) steps', result.stdout + result.stderr)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-2000:])
    return (int(match.group(1)) if match else None), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('agent')
    parser.add_argument('env')
    parser.add_argument('target', type=float)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    args, extra = parser.parse_known_args()  # anything else is passed on to xagents train
    results = []
    for seed in args.seeds:
        steps, seconds = run(args.agent, args.env, args.target, seed, extra)
        results.append((steps, seconds))
        print(f'{args.agent} {args.env} seed {seed}: {steps if steps else "not reached"} steps, {seconds:.1f} s',
              flush=True)
    reached = [(steps, seconds) for steps, seconds in results if steps]
    if reached:
        print(f'median of {len(results)} seeds ({len(reached)} reached {args.target}): '
              f'{statistics.median(s for s, _ in reached):.0f} steps, '
              f'{statistics.median(t for _, t in reached):.1f} s')


if __name__ == '__main__':
    main()
