"""The CrossQ agent: ``agent.py`` (the class), ``cli.py`` (its command-line face), ``models/`` (networks with batch
renormalisation), ``hyperparameters.json``."""


def __getattr__(name: str):
    """``from xagents.crossq import ...`` imports the agent (and TensorFlow) on first use: ``cli.py`` loads without."""
    import xagents.crossq.agent as agent

    return getattr(agent, name)


__all__ = ['CrossQ']
