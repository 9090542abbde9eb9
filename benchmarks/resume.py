"""What a resumed off-policy run costs: env steps to the target, uninterrupted against resumed from a save.

Prints figures, asserts nothing::

    python benchmarks/resume.py [--seeds 0 1 2] [--stop-at 15000]

DQN on CartPole-v1 with its tuned settings trains until its deterministic evaluation (every 2,500
steps, 10 episodes) reaches 475, three ways: uninterrupted; saved at ``--stop-at`` steps without its
replay buffer and loaded (learning waits while ``buffer_initial_size`` transitions refill an empty
buffer, and then replays only what the resumed run collected); and saved with the buffer
(``save(include_buffer=True)``, ``--save-replay-buffer``), which learns on at once.
"""
from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import numpy as np  # noqa: E402

from xagents.dqn import DQN  # noqa: E402

TARGET = dict(target_reward=475, stop_on='eval', eval_frequency=2500, eval_episodes=10)
LIMIT = 200_000


def steps_to_target(seed: int, stop_at: int | None = None, include_buffer: bool = False) -> int | None:
    """Env steps until eval 475 (None if not within LIMIT), optionally through a save and load at ``stop_at``."""
    agent = DQN.from_env('CartPole-v1', seed=seed, quiet=True)
    if stop_at:
        run = agent.fit(max_steps=stop_at, **TARGET)
        if run.reason and run.reason.startswith('Reward achieved'):
            return agent.steps
        with tempfile.TemporaryDirectory() as directory:
            agent.save(os.path.join(directory, 'saved'), include_buffer=include_buffer)
            agent.envs.close()
            agent = DQN.load(os.path.join(directory, 'saved'), quiet=True)
    run = agent.fit(max_steps=LIMIT, total=True, **TARGET)
    agent.envs.close()
    return agent.steps if run.reason.startswith('Reward achieved') else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--stop-at', type=int, default=15_000, help='steps at which the run is saved and loaded')
    args = parser.parse_args()
    rows = {'uninterrupted': {}, 'resumed without buffer': {}, 'resumed with buffer': {}}
    for seed in args.seeds:
        rows['uninterrupted'][seed] = steps_to_target(seed)
        rows['resumed without buffer'][seed] = steps_to_target(seed, args.stop_at)
        rows['resumed with buffer'][seed] = steps_to_target(seed, args.stop_at, include_buffer=True)
    print(f'DQN CartPole-v1 to eval 475, saved and loaded at step {args.stop_at:,} (seeds {args.seeds})')
    for name, found in rows.items():
        steps = [found[seed] for seed in args.seeds]
        shown = ' · '.join('—' if value is None else f'{value:,}' for value in steps)
        reached = [value for value in steps if value is not None]
        median = f'{int(np.median(reached)):,}' if reached else '—'
        print(f'{name:<24} {shown:<40} median {median}')


if __name__ == '__main__':
    main()
