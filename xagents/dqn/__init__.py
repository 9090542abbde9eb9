from xagents.dqn.agent import DQN

__all__ = ['DQN']
