"""The agents' shared core: :class:`BaseAgent` and the families every algorithm subclasses."""
from xagents.agent.base import BaseAgent
from xagents.agent.off_policy import OffPolicy
from xagents.agent.on_policy import OnPolicy

__all__ = ['BaseAgent', 'OffPolicy', 'OnPolicy']
