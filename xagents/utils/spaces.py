"""Which agents take which action spaces: the table an agent's refusal quotes (the tests check it against every
agent's ``supported_action_spaces``, so it cannot drift from them)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

ACTION_SPACE_AGENTS = {  # action space: the agents (class names) that take it
    'Discrete': ('PPO', 'A2C', 'TRPO', 'ACER', 'DQN', 'SAC'),
    'Box': ('PPO', 'A2C', 'TRPO', 'DDPG', 'TD3', 'SAC'),
    'MultiDiscrete': ('PPO', 'A2C', 'TRPO'),
    'MultiBinary': ('PPO', 'A2C', 'TRPO'),
}


def one_line(space: gym.Space) -> str:
    """``str(space)`` on one line (NumPy prints a 2-D ``nvec`` on several): ``MultiDiscrete([[2 3] [4 2]])``."""
    return ' '.join(str(space).split())


def agents_taking(space: gym.Space) -> str:
    """Which agents take ``space`` as their action space, as the end of a refusal: ``MultiDiscrete actions: PPO,
    A2C, TRPO`` (or that none does)."""
    kind = type(space).__name__
    agents = ACTION_SPACE_AGENTS.get(kind)
    return f'{kind} actions: {", ".join(agents)}' if agents else f'no agent takes {kind} actions'


def flat_actions(space: gym.Space) -> gym.Space:
    """The action space as agents store it: a Box flattened to a vector, MultiDiscrete and MultiBinary flattened
    to ``k`` choices from 0, anything else as it is."""
    if isinstance(space, gym.spaces.Box):
        return gym.spaces.Box(space.low.ravel(), space.high.ravel(), dtype=space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return gym.spaces.MultiDiscrete(space.nvec.ravel(), dtype=space.dtype)
    if isinstance(space, gym.spaces.MultiBinary):
        return gym.spaces.MultiBinary(int(np.prod(space.shape)))
    return space
