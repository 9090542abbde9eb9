"""Small uint8 images read as grids of ids or as pictures: PPO's defaults for 50,000 steps on MiniGrid's DoorKey-5x5
(a Dict of its 7x7x3 ids and its direction) and on a camera-like target-reaching task (a 16x16x3 picture beside the
agent's position), each under both readings, several seeds, then 10 deterministic evaluation episodes::

    python benchmarks/small_images.py run --output runs/small-images --seeds 0 1 2 --jobs 2
    python benchmarks/small_images.py table --output runs/small-images

Readings: ``grid`` (the default for uint8 images smaller than 36 x 36: flattened, values as they are, normalised by
running statistics), ``picture`` (``wrapper=SmallPictures``: scaled to [0, 1], flattened, not normalised, the reading
before grids). Each run is a process with one thread; one already finished (its JSON file in OUTPUT) is not run again.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

import numpy as np

ENVS = {'doorkey': 'xagents.envs.unpreset:Own/DoorKey-5x5-v0', 'camera': 'xagents.envs.toy_envs:CameraReach-v0'}
READINGS = ('grid', 'picture')
PICK = {'grid': {}, 'picture': {'wrapper': 'xagents.envs.observations:SmallPictures'}}


def one(env: str, reading: str, seed: int, steps: int, output: str) -> None:
    """Train and evaluate one run in this process; its JSON line to OUTPUT/ENV-READING-SEED.json."""
    from xagents import PPO

    env_id = ENVS[env]
    start = time.time()
    agent = PPO.from_env(env_id, seed=seed, quiet=True, **PICK[reading])
    agent.fit(max_steps=steps)
    result = agent.evaluate(10, deterministic=True, seed=10_000 + seed)
    returns = [float(value) for value in result.returns]
    record = {'env': env, 'env_id': env_id, 'reading': reading, 'seed': seed, 'steps': agent.steps,
              'eval_mean': float(np.mean(returns)), 'eval_returns': returns, 'seconds': round(time.time() - start, 1)}
    with open(os.path.join(output, f'{env}-{reading}-{seed}.json'), 'w') as file:
        file.write(json.dumps(record) + '\n')


def run(args: argparse.Namespace) -> None:
    os.makedirs(args.output, exist_ok=True)
    todo = [(env, reading, seed) for env in args.envs for reading in args.readings for seed in args.seeds
            if not os.path.exists(os.path.join(args.output, f'{env}-{reading}-{seed}.json'))]
    threads = {name: '1' for name in ('OMP_NUM_THREADS', 'TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS',
                                      'MKL_NUM_THREADS')}

    def child(job):
        env, reading, seed = job
        command = [sys.executable, __file__, 'one', '--env', env, '--reading', reading, '--seed', str(seed),
                   '--steps', str(args.steps), '--output', args.output]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **threads})
        if done.returncode:
            raise RuntimeError(f'{" ".join(command)} failed: {(done.stderr.strip().splitlines() or ["?"])[-1]}')
        print(open(os.path.join(args.output, f'{env}-{reading}-{seed}.json')).read().strip(), flush=True)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for future in [pool.submit(child, job) for job in todo]:
            future.result()


def table(args: argparse.Namespace) -> None:
    """One markdown row per env and reading: each seed's mean deterministic return, their mean and spread."""
    records = [json.loads(open(os.path.join(args.output, name)).read()) for name in sorted(os.listdir(args.output))
               if name.endswith('.json')]
    print('| env | reading | seeds | eval per seed (10 deterministic episodes) | mean | std |')
    print('|---|---|---|---|---|---|')
    for env in ENVS:
        for reading in READINGS:
            rows = sorted((r for r in records if r['env'] == env and r['reading'] == reading), key=lambda r: r['seed'])
            if rows:
                values = [r['eval_mean'] for r in rows]
                print(f'| {env} | {reading} | {" ".join(str(r["seed"]) for r in rows)} | '
                      f'{" · ".join(f"{value:.2f}" for value in values)} | {np.mean(values):.2f} | '
                      f'{np.std(values):.2f} |')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('command', choices=('run', 'one', 'table'))
    parser.add_argument('--output', default='runs/small-images')
    parser.add_argument('--envs', nargs='+', choices=sorted(ENVS), default=sorted(ENVS))
    parser.add_argument('--readings', nargs='+', choices=READINGS, default=READINGS)
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--steps', type=int, default=50_000)  # PPO's rollouts round it up to 51,200
    parser.add_argument('--jobs', type=int, default=2)
    parser.add_argument('--env', choices=sorted(ENVS))
    parser.add_argument('--reading', choices=READINGS)
    parser.add_argument('--seed', type=int)
    args = parser.parse_args()
    if args.command == 'one':
        one(args.env, args.reading, args.seed, args.steps, args.output)
    else:
        (run if args.command == 'run' else table)(args)


if __name__ == '__main__':
    main()
