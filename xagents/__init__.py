"""xagents: deep reinforcement learning agents on Keras 3 (TensorFlow, JAX or PyTorch), from Python or one command."""
from xagents.version import __version__  # noqa: F401

from xagents.registry import AGENTS as _AGENTS  # noqa: E402

from xagents.utils.console import use_backend  # noqa: E402

__all__ = [entry.partition(':')[2] for entry in _AGENTS.values()] + ['evaluate', 'check_env', 'use_backend']


def __getattr__(name: str):
    """Import agents (and Keras with its backend, quietly) only when one is asked for, keeping ``xagents --help`` fast."""
    if name == 'check_env':  # no TensorFlow
        from xagents.envs.check_env import check_env
        return check_env
    if name in __all__:
        from xagents.registry import agent_class
        from xagents.utils.console import load_keras

        load_keras()
        if name == 'evaluate':
            from xagents.training.evaluation import evaluate
            return evaluate
        return agent_class(next(agent for agent, entry in _AGENTS.items() if entry.endswith(f':{name}')))
    from xagents.utils.names import SB3_FUNCTIONS

    how = SB3_FUNCTIONS.get(name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}' + (f': {how}' if how else ''))
