"""How an agent's constructor and ``fit`` take their arguments: parameters given by an old name, run settings given
to a constructor (they belong to ``fit`` now), the envs a user brings, and the record of the arguments that
``save`` writes and ``load`` builds from."""
from __future__ import annotations

import functools
import inspect
import logging
from typing import Iterable

from xagents.envs.creation import as_vector_env

logger = logging.getLogger('xagents')


def constructor(init):
    """Wrap an agent's ``__init__``: a parameter given by its old name (:data:`RENAMED`) is passed by its
    new one, and a run setting (a parameter of ``fit``, as ``checkpoints`` was of constructors) becomes
    fit's default for the agent, each with a one-line notice; a ``gym.Env`` or vector env of the user's is
    taken as agents take envs (:func:`as_vector_env`); and the outermost call records the arguments it was
    given as the agent's ``hyperparameters`` (what :meth:`BaseAgent.save` writes and ``load`` builds from)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def construct(self, envs, *args, **kwargs):
        cls, outermost, moved = type(self), 'hyperparameters' not in vars(self), {}
        kwargs = cls.with_new_names(kwargs)
        if outermost:
            kwargs, moved = cls.run_settings_apart(kwargs)
            if moved:
                many = len(moved) > 1
                logger.warning('%s: %s %s of fit now: pass %s to fit (given here, %s for this agent; this '
                               'goes in the next release)', cls.__name__, ', '.join(moved),
                               'are settings' if many else 'is a setting', 'them' if many else 'it',
                               'they are its defaults' if many else 'it is its default')
        cls.check_parameter_names(kwargs)
        envs = as_vector_env(envs)
        if outermost:
            kwargs = capped_initial_size(cls, kwargs, kwargs, envs.single_observation_space)
        if outermost:
            given = signature.bind_partial(self, envs, *args, **kwargs).arguments
            given.update(given.pop('kwargs', {}))
            self.hyperparameters = {name: value for name, value in given.items() if name not in ('self', 'envs')}
        init(self, envs, *args, **kwargs)
        if outermost:
            self.run_defaults.update(moved)

    return construct


def capped_initial_size(cls: type, settings: dict, given: Iterable[str], observation_space=None) -> dict:
    """``settings`` with the replay filled before learning (``buffer_initial_size``) capped to the capacity
    (``buffer_max_size``) where the user ``given`` the capacity alone and the initial size they did not give (a
    default, for ``observation_space`` where it follows it, or a preset) is above it, with a one-line notice:
    Stable-Baselines3 users set ``buffer_size`` alone."""
    capacity = settings.get('buffer_max_size')
    if 'buffer_max_size' not in given or 'buffer_initial_size' in given or not isinstance(capacity, int):
        return settings
    initial = settings.get('buffer_initial_size', _default(cls, 'buffer_initial_size', observation_space))
    if not isinstance(initial, int) or not 1 <= capacity < initial:
        return settings
    logger.info('%s: buffer_initial_size %s (not given) is above buffer_max_size %s: learning starts once the buffer '
                'holds %s (give buffer_initial_size to choose)', cls.__name__, f'{initial:,}', f'{capacity:,}',
                f'{capacity:,}')
    return {**settings, 'buffer_initial_size': capacity}


def _default(cls: type, name: str, observation_space=None):
    """The default of parameter ``name``: the one ``cls.space_defaults`` gives for ``observation_space`` (DQN's
    follow it), else that of the first of ``cls``'s constructors that takes it (None: none does)."""
    if observation_space is not None and hasattr(cls, 'space_defaults'):
        value = cls.space_defaults(observation_space).get(name)
        if value is not None:
            return value
    for klass in cls.__mro__:
        parameter = inspect.signature(klass.__init__).parameters.get(name) if '__init__' in vars(klass) else None
        if parameter is not None and parameter.default is not parameter.empty:
            return parameter.default
    return None


def with_run_defaults(fit):
    """Wrap ``fit``: settings a call does not give take the agent's ``run_defaults`` (``from_env``'s presets and
    run arguments), then the signature's defaults; a setting given by position is refused with the keyword it
    may mean (``fit(1000)``, Stable-Baselines3's ``learn(1000)``, would otherwise be a target reward)."""

    @functools.wraps(fit)
    def run(self, *args, **kwargs):
        if args:
            raise TypeError(f'fit takes keyword arguments only, got {args[0]!r} by position: '
                            f"fit(max_steps={args[0]!r}) trains for that many env steps (Stable-Baselines3's "
                            f'learn(total_timesteps={args[0]!r})), fit(target_reward=...) until the mean reward '
                            'reaches it')
        # (a wrong name is fit's to refuse, with a suggestion)
        kwargs.update({name: value for name, value in self.run_defaults.items() if name not in kwargs})
        return fit(self, **kwargs)

    return run
