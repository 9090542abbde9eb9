"""CartPole made as slow as a simulator: every step sleeps first (2 ms by default), the stand-in for robotics
or game engines in ``distributed.py``'s scaling figures. Importing this module registers
``SlowCartPole-v1``; workers import it by the env id ``slow_envs:SlowCartPole-v1`` (with this directory
on ``PYTHONPATH``)."""
from __future__ import annotations

import os
import time

import gymnasium as gym

DELAY_VARIABLE = 'XAGENTS_SLOW_STEP_SECONDS'  # read by every process that makes the env: workers too


class SlowStep(gym.Wrapper):
    """Sleep ``delay`` seconds before each step."""

    def __init__(self, env: gym.Env, delay: float) -> None:
        super().__init__(env)
        self.delay = delay

    def step(self, action):
        time.sleep(self.delay)
        return self.env.step(action)


def make_slow_cartpole(**kwargs) -> gym.Env:
    return SlowStep(gym.make('CartPole-v1', **kwargs), float(os.environ.get(DELAY_VARIABLE, '0.002')))


if 'SlowCartPole-v1' not in gym.registry:
    gym.register('SlowCartPole-v1', entry_point=make_slow_cartpole)
