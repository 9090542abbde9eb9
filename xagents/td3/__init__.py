"""The TD3 agent: ``agent.py`` (the class), ``cli.py`` (its command-line face), ``models/``, ``hyperparameters.json``."""


def __getattr__(name: str):
    """``from xagents.td3 import ...`` imports the agent (and TensorFlow) on first use: ``cli.py`` loads without."""
    import xagents.td3.agent as agent

    return getattr(agent, name)


__all__ = ['TD3']
