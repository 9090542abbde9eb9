"""Which agents take which action spaces: the table an agent's refusal quotes (the tests check it against every
agent's ``supported_action_spaces``, so it cannot drift from them)."""
from __future__ import annotations

import gymnasium as gym

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
