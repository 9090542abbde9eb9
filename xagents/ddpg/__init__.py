from xagents.ddpg.agent import DDPG

__all__ = ['DDPG']
