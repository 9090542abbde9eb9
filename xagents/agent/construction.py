"""How an agent's constructor and ``fit`` take their arguments: parameters given by an old name, run settings given
to a constructor (they belong to ``fit`` now), the envs a user brings, and the record of the arguments that
``save`` writes and ``load`` builds from."""
from __future__ import annotations

import functools
import inspect
import logging

from xagents.utils.envs import as_vector_env

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
                logger.warning('%s: %s %s settings of fit now: pass %s to fit (given here, %s its defaults for '
                               'this agent; this goes in the next release)', cls.__name__, ', '.join(moved),
                               'are' if len(moved) > 1 else 'is a', 'them' if len(moved) > 1 else 'it',
                               'they are' if len(moved) > 1 else 'it is')
        cls.check_parameter_names(kwargs)
        envs = as_vector_env(envs)
        if outermost:
            given = signature.bind_partial(self, envs, *args, **kwargs).arguments
            given.update(given.pop('kwargs', {}))
            self.hyperparameters = {name: value for name, value in given.items() if name not in ('self', 'envs')}
        init(self, envs, *args, **kwargs)
        if outermost:
            self.run_defaults.update(moved)

    return construct


def with_run_defaults(fit):
    """Wrap ``fit``: settings a call does not give take the agent's ``run_defaults`` (``from_env``'s presets and
    run arguments), then the signature's defaults."""
    names = list(inspect.signature(fit).parameters)[1:]  # after self

    @functools.wraps(fit)
    def run(self, *args, **kwargs):
        given = set(names[:len(args)]) | set(kwargs)  # (a wrong name is fit's to refuse, with a suggestion)
        kwargs.update({name: value for name, value in self.run_defaults.items() if name not in given})
        return fit(self, *args, **kwargs)

    return run
