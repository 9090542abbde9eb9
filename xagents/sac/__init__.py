from xagents.sac.agent import SAC

__all__ = ['SAC']
