from xagents.ppo.agent import PPO

__all__ = ['PPO']
