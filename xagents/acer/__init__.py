from xagents.acer.agent import ACER

__all__ = ['ACER']
