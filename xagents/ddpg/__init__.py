"""The DDPG agent: ``agent.py`` (the class), ``cli.py`` (its command-line face), ``models/``, ``hyperparameters.json``."""
from xagents.registry import exports

__getattr__ = exports(__name__)
__all__ = ['DDPG']
