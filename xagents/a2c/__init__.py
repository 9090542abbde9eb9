"""The A2C agent: ``agent.py`` (the class), ``cli.py`` (its command-line face), ``models/``, ``hyperparameters.json``."""


def __getattr__(name: str):
    """``from xagents.a2c import ...`` imports the agent (and TensorFlow) on first use: ``cli.py`` loads without."""
    import xagents.a2c.agent as agent

    return getattr(agent, name)


__all__ = ['A2C']
