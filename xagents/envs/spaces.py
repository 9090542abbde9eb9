"""Which agents take which action spaces: the table an agent's refusal quotes (the tests check it against every
agent's ``supported_action_spaces``, so it cannot drift from them)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

ACTION_SPACE_AGENTS = {  # action space: the agents (class names) that take it
    'Discrete': ('PPO', 'A2C', 'TRPO', 'ACER', 'DQN', 'QRDQN', 'SAC'),
    'Box': ('PPO', 'A2C', 'TRPO', 'DDPG', 'TD3', 'SAC', 'TQC', 'CrossQ'),
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


def empty_dimension(space: gym.Space) -> str | None:
    """What leaves ``space`` without a value to take, or None: no dimension at all (``MultiDiscrete([])``,
    ``MultiBinary(0)``, a Box of no entries) or a dimension of no option (``MultiDiscrete([3, 0])``). A dimension of
    one option is taken: its choice is fixed, as Gymnasium allows."""
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec)
        if nvec.size == 0:
            return f'{one_line(space)} has no dimension (nvec of shape {nvec.shape})'
        empty = np.argwhere(nvec < 1)
        if len(empty):
            where = ', '.join(map(str, empty[0])) if nvec.ndim > 1 else str(int(empty[0][0]))
            options = int(nvec[tuple(empty[0])])
            return f'dimension {where} of {one_line(space)} has {options} options: expected 1 or more'
    elif isinstance(space, (gym.spaces.MultiBinary, gym.spaces.Box)) and int(np.prod(space.shape)) == 0:
        return f'{one_line(space)} has no dimension (shape {space.shape})'
    return None


def check_action_space(space: gym.Space, owner: str) -> None:
    """Refuse, in one line, action spaces with nothing to choose (:func:`empty_dimension`)."""
    problem = empty_dimension(space)
    if problem:
        raise ValueError(f'{owner} cannot act in this action space: {problem}')


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
