"""The QR-DQN agent: ``agent.py`` (the class), ``cli.py`` (its command-line face), ``hyperparameters.json``; its
networks are DQN's ``models/``."""


def __getattr__(name: str):
    """``from xagents.qrdqn import ...`` imports the agent (and TensorFlow) on first use: ``cli.py`` loads without."""
    import xagents.qrdqn.agent as agent

    return getattr(agent, name)


__all__ = ['QRDQN']
