"""The TQC agent: ``agent.py`` (the class), ``cli.py`` (its command-line face), ``models/``, ``hyperparameters.json``;
its actors are SAC's ``models/``."""


def __getattr__(name: str):
    """``from xagents.tqc import ...`` imports the agent (and TensorFlow) on first use: ``cli.py`` loads without."""
    import xagents.tqc.agent as agent

    return getattr(agent, name)


__all__ = ['TQC']
