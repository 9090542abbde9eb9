"""xagents: deep reinforcement learning agents on TensorFlow 2, from Python or one command."""
__version__ = '1.0.0'

_AGENTS = {'A2C': 'xagents.a2c', 'PPO': 'xagents.ppo', 'TRPO': 'xagents.trpo', 'ACER': 'xagents.acer', 'DQN': 'xagents.dqn', 'DDPG': 'xagents.ddpg', 'TD3': 'xagents.td3', 'SAC': 'xagents.sac'}


def __getattr__(name: str):
    """Import agents (and TensorFlow) only when one is asked for, keeping ``xagents --help`` fast."""
    if name in _AGENTS:
        import importlib

        from xagents.utils.console import load_tensorflow

        load_tensorflow()  # without its start-up noise
        return getattr(importlib.import_module(_AGENTS[name]), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__all__ = list(_AGENTS)
