"""Ray workers on this machine: throughput against the number of workers on a slow env, and learning
parity with local runs. Prints figures, asserts nothing::

    python benchmarks/distributed.py scaling [--workers 1 2 4 8] [--n-envs 4] [--delay 0.002] [--agents ppo dqn]
    python benchmarks/distributed.py parity [--seeds 0 1 2] [--agents ppo dqn]

scaling: PPO and DQN (CartPole's tuned settings) on ``SlowCartPole-v1``, CartPole whose every step sleeps
``--delay`` seconds first (a latency-bound simulator: sleeping needs no core, so 2 cores can show how far
collection spreads). Each worker steps ``--n-envs`` envs; env steps per second are counted from the end of
the third round (workers started, graphs traced) to the end of the run. A local run with ``--n-envs`` envs
is the first row.

parity: env steps PPO needs to reach a mean reward of 475 on CartPole-v1 with 2 workers x 4 envs and
locally with 8 envs, per seed; DQN with 2 Ape-X actors: env steps until 10 deterministic evaluation
episodes score 475 or more (evaluations every 2,500 steps, as the DQN command of the command-line guide).
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ['PYTHONPATH'] = os.pathsep.join(filter(None, [HERE, os.environ.get('PYTHONPATH')]))  # workers: slow_envs

import slow_envs  # noqa: E402
from xagents import DQN, PPO  # noqa: E402
from xagents.training.callbacks import Callback  # noqa: E402

logger = logging.getLogger('benchmarks.distributed')
SLOW_ENV = 'slow_envs:SlowCartPole-v1'
AGENTS = {'ppo': PPO, 'dqn': DQN}


class Clock(Callback):
    """(time, env steps) at the end of every round."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, int]] = []

    def on_round(self, run) -> None:
        self.marks.append((time.perf_counter(), run.agent.steps))


def steps_per_second(agent_class, workers: int | None, n_envs: int, seconds: float) -> float:
    """Steady env steps per second of ``agent_class`` on the slow env, over about ``seconds`` seconds."""
    settings = {**agent_class.default_hyperparameters('CartPole-v1'), 'n_envs': n_envs}
    if workers:
        settings.update(workers=workers)
    agent = agent_class.from_env(SLOW_ENV, seed=0, quiet=True, **settings)
    clock = Clock()
    expected = (workers or 1) / float(os.environ[slow_envs.DELAY_VARIABLE])  # a worker steps its envs one by one
    agent.fit(max_steps=int(expected * seconds), callbacks=[clock])
    agent.envs.close()
    (start, first), (end, last) = clock.marks[2], clock.marks[-1]
    return (last - first) / (end - start)


def scaling(args) -> None:
    os.environ[slow_envs.DELAY_VARIABLE] = str(args.delay)
    for agent_class in (AGENTS[name] for name in args.agents):
        base = steps_per_second(agent_class, None, args.n_envs, args.seconds)
        logger.info('%s on %s (%.0f ms per step), %d envs per worker', agent_class.__name__, SLOW_ENV,
                    args.delay * 1000, args.n_envs)
        logger.info('  local      %7.0f env steps/s', base)
        one = None
        for workers in args.workers:
            speed = steps_per_second(agent_class, workers, args.n_envs, args.seconds)
            one = one or speed
            logger.info('  %d worker%s %7.0f env steps/s  (%.2fx one worker)', workers, ' ' if workers == 1 else 's',
                        speed, speed / one)


def parity(args) -> None:
    runs = {'local, 8 envs': {'n_envs': 8}, '2 workers x 4 envs': {'n_envs': 4, 'workers': 2}}
    medians = {}
    for name, settings in runs.items() if 'ppo' in args.agents else ():
        steps = []
        for seed in args.seeds:
            agent = PPO.from_env('CartPole-v1', seed=seed, quiet=True, **settings)
            start = time.perf_counter()
            run = agent.fit(target_reward=475, max_steps=500_000)
            steps.append(agent.steps if run.mean_reward >= 475 else float('nan'))
            logger.info('PPO CartPole-v1 %-20s seed %d: %s after %d steps, %.1f s', name, seed,
                        'reached 475' if run.mean_reward >= 475 else 'missed 475', agent.steps,
                        time.perf_counter() - start)
            agent.envs.close()
        medians[name] = statistics.median(steps)
        logger.info('PPO CartPole-v1 %-20s median %d steps', name, medians[name])
    if medians:
        local, distributed = medians.values()
        logger.info('PPO: 2 workers need %.0f%% of the local median', 100 * distributed / local)
    for seed in args.seeds if 'dqn' in args.agents else ():
        agent = DQN.from_env('CartPole-v1', workers=2, seed=seed, quiet=True)
        run = agent.fit(target_reward=475, max_steps=200_000, eval_frequency=2500, eval_episodes=10, stop_on='eval')
        logger.info('DQN CartPole-v1 2 actors seed %d: evaluation %.1f after %d steps', seed, run.eval_reward,
                    agent.steps)
        agent.envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest='command', required=True)
    scale = commands.add_parser('scaling', help='env steps/s against workers on a slow env')
    scale.add_argument('--workers', type=int, nargs='+', default=[1, 2, 4, 8])
    scale.add_argument('--n-envs', type=int, default=4, help='envs per worker')
    scale.add_argument('--delay', type=float, default=0.002, help='seconds each env step sleeps')
    scale.add_argument('--seconds', type=float, default=12.0, help='about how long each run lasts')
    same = commands.add_parser('parity', help='steps to solve CartPole with workers and locally')
    same.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    for command in (scale, same):
        command.add_argument('--agents', nargs='+', choices=list(AGENTS), default=list(AGENTS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    logging.getLogger('xagents').setLevel(logging.WARNING)
    scaling(args) if args.command == 'scaling' else parity(args)


if __name__ == '__main__':
    main()
