"""Training throughput of the off-policy agents, in env steps per second, after warm-up.

Prints figures, asserts nothing::

    python benchmarks/off_policy_speed.py [--steps 10000]

SAC runs on Pendulum-v1 with its tuned settings (50 env steps, then 50 gradient steps in one
graph call: one gradient step per env step); DQN on CartPole-v1 with its tuned settings (128
gradient steps every 256 env steps). Warm-up covers the random-action fill of the buffer and
the first (tracing, compiling) update, which are excluded from the figure.
"""
from __future__ import annotations

import argparse
import logging
import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from xagents.dqn import DQN  # noqa: E402
from xagents.sac import SAC  # noqa: E402

logger = logging.getLogger('benchmarks.off_policy_speed')


def throughput(agent_class, env_id: str, steps: int, seed: int = 0, **overrides) -> tuple[float, float]:
    """Env steps per second and gradient steps per env step over ``steps`` steps after warm-up
    (the tuned defaults of ``env_id``, with ``overrides``)."""
    agent = agent_class.from_env(env_id, seed=seed, quiet=True, **overrides)
    try:
        agent.fit(max_steps=agent.buffer_initial_size + 2 * agent.update_every)
        start_steps, start_updates = agent.steps, int(agent.gradient_updates.numpy())
        start = time.perf_counter()
        agent.fit(max_steps=steps)
        elapsed = time.perf_counter() - start
        env_steps = agent.steps - start_steps
        return env_steps / elapsed, (int(agent.gradient_updates.numpy()) - start_updates) / env_steps
    finally:
        agent.envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=10_000, help='env steps timed per agent')
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    logging.getLogger('xagents').setLevel(logging.WARNING)  # not the agents' stop lines
    for agent_class, env_id in ((SAC, 'Pendulum-v1'), (DQN, 'CartPole-v1')):
        speed, ratio = throughput(agent_class, env_id, args.steps)
        logger.info('%-4s %-12s %7.0f env steps/s  (%.2f gradient steps per env step, %d cores)',
                    agent_class.__name__, env_id, speed, ratio, os.cpu_count())


if __name__ == '__main__':
    main()
