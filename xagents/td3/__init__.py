from xagents.td3.agent import TD3

__all__ = ['TD3']
