from xagents.a2c.agent import A2C

__all__ = ['A2C']
