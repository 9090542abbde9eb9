"""The helpers users reach for, in one place: environments, cfg models and training histories."""
from xagents.envs.creation import create_envs, make_env
from xagents.storage.history import plot_history, read_history
from xagents.networks.models import Output, build_model

__all__ = ['Output', 'build_model', 'create_envs', 'make_env', 'plot_history', 'read_history']
