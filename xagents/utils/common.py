"""The helpers users reach for, in one place: environments, cfg models and training histories."""
from xagents.utils.envs import create_envs, make_env
from xagents.utils.history import plot_history, read_history
from xagents.utils.models import Output, build_model

__all__ = ['Output', 'build_model', 'create_envs', 'make_env', 'plot_history', 'read_history']
