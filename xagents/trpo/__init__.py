from xagents.trpo.agent import TRPO

__all__ = ['TRPO']
