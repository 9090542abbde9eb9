"""Deprecated location of the agents' core, kept importable for one release: use :mod:`xagents.agent`."""
from xagents.agent.base import BaseAgent
from xagents.envs.spaces import flat_actions
from xagents.agent.off_policy import OffPolicy, polyak_update
from xagents.agent.on_policy import OnPolicy
from xagents.utils.streams import random_stream

__all__ = ['BaseAgent', 'OffPolicy', 'OnPolicy', 'flat_actions', 'polyak_update', 'random_stream']
