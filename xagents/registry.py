"""The agents xagents ships: the one table that the command line, tuning and ``xagents.PPO`` read.

Adding an agent is its own package (``agent.py`` with the class, ``cli.py`` with its command-line
face, ``models/*.cfg``, ``hyperparameters.json``) and one line in :data:`AGENTS`. Nothing below
this module (``xagents.agent``, ``xagents.training``, ``xagents.utils``) imports an agent.
"""
from __future__ import annotations

import importlib
from types import ModuleType

AGENTS = {  # command-line name: 'module:Class'
    'a2c': 'xagents.a2c.agent:A2C',
    'ppo': 'xagents.ppo.agent:PPO',
    'trpo': 'xagents.trpo.agent:TRPO',
    'acer': 'xagents.acer.agent:ACER',
    'dqn': 'xagents.dqn.agent:DQN',
    'qrdqn': 'xagents.qrdqn.agent:QRDQN',
    'ddpg': 'xagents.ddpg.agent:DDPG',
    'td3': 'xagents.td3.agent:TD3',
    'sac': 'xagents.sac.agent:SAC',
    'tqc': 'xagents.tqc.agent:TQC',
    'crossq': 'xagents.crossq.agent:CrossQ',
}


def location(agent: str) -> tuple[str, str]:
    """``(module, class name)`` of a command-line name, or a ValueError listing the names."""
    if agent not in AGENTS:
        raise ValueError(f'expected an agent ({", ".join(AGENTS)}), got {agent!r}')
    module, _, name = AGENTS[agent].partition(':')
    return module, name


def agent_class(agent: str) -> type:
    """The class of a command-line name (``ppo`` -> ``PPO``), imported now (with TensorFlow)."""
    module, name = location(agent)
    return getattr(importlib.import_module(module), name)


def agent_package(agent: str) -> str:
    """The package of an agent's files (``xagents.ppo``), importable without TensorFlow."""
    return location(agent)[0].rsplit('.', 1)[0]


def agent_cli(agent: str) -> ModuleType | None:
    """An agent's ``cli.py`` (its tunable flags, examples, flag types), or None if it has none."""
    try:
        return importlib.import_module(f'{agent_package(agent)}.cli')
    except ModuleNotFoundError as error:
        if error.name != f'{agent_package(agent)}.cli':
            raise
        return None
