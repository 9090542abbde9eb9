"""A search space of ``xagents tune``: which of an agent's parameters a search fixes, chooses among or ranges over,
read from its constructor signature and its ``cli.py``'s ``TUNABLE`` table, and the values a command line gives."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import math
from typing import Any, Mapping, Sequence

import optuna
from optuna.distributions import (BaseDistribution, CategoricalDistribution, FloatDistribution,
                                  IntDistribution)

from xagents.app.flags import Flag, constructors, flags_of
from xagents.envs.creation import create_envs
from xagents.utils.validation import check_value

SCALES = {
    'log': 'MIN MAX log-uniform, or choices',
    'uniform': 'MIN MAX uniform, or choices',
    'categorical': 'choices',
}
GRAMMAR = ('one value fixes a flag; MIN MAX searches a range (numeric flags, scale as tagged); '
           'comma-separated or three or more values are choices')
_BOOLS = {'true': True, 'yes': True, '1': True, 'false': False, 'no': False, '0': False}


# ------------------------------------------------------------------------------ search space
def agent_name(agent: type) -> str:
    """The command-line name of an agent class (``PPO`` -> ``ppo``)."""
    return agent.__name__.lower()


@functools.lru_cache(maxsize=None)
def hyperparameter_flags(agent: type) -> dict[str, Flag]:
    """Flags of every constructor and env parameter a search can set, by parameter name."""
    # Each trial's seed comes from the study (--seed), not from a search.
    return {flag.name: flag for flag in flags_of(constructors(agent, object) + [create_envs], skip={'seed'})}


@functools.lru_cache(maxsize=None)
def tunable(agent: type) -> dict[str, str]:
    """``{parameter: 'log' | 'uniform' | 'categorical'}`` from the ``cli.py`` beside the agent's module.

    Raises:
        ValueError: the agent has no ``cli.py`` (it cannot be tuned), or its table names a
            parameter the agent does not have or a range scale for a non-numeric one.
    """
    package = agent.__module__.rsplit('.', 1)[0]
    try:
        table = importlib.import_module(f'{package}.cli').TUNABLE
    except ModuleNotFoundError as error:
        if error.name != f'{package}.cli':
            raise
        raise ValueError(f'{agent_name(agent)} cannot be tuned: expected {package.replace(".", "/")}/cli.py '
                         'declaring its TUNABLE hyperparameters, found none') from None
    flags = hyperparameter_flags(agent)
    for name, scale in table.items():
        flag = flags.get(name)
        if flag is None or scale not in SCALES or (scale != 'categorical' and flag.kind not in ('int', 'float')):
            raise ValueError(f'{package}.cli.TUNABLE: expected a parameter of {agent_name(agent)} with scale log or '
                             f'uniform (numeric) or categorical, got {name!r}: {scale!r}')
    return dict(table)


@dataclasses.dataclass
class SearchSpace:
    """The hyperparameters of a search: fixed values, and distributions that trials sample."""

    fixed: dict[str, Any]
    distributions: dict[str, BaseDistribution]

    def sample(self, trial: optuna.Trial) -> dict[str, Any]:
        """Suggest a value for every searched hyperparameter."""
        values = {}
        for name, distribution in self.distributions.items():
            if isinstance(distribution, CategoricalDistribution):
                values[name] = trial.suggest_categorical(name, distribution.choices)
            elif isinstance(distribution, IntDistribution):
                values[name] = trial.suggest_int(name, distribution.low, distribution.high, log=distribution.log)
            else:
                values[name] = trial.suggest_float(name, distribution.low, distribution.high, log=distribution.log)
        return values


def search_space(agent: type, search: Mapping[str, Any]) -> SearchSpace:
    """Check a search against ``agent``'s parameters and turn it into a :class:`SearchSpace`.

    Args:
        agent: The agent class, e.g. ``xagents.PPO``.
        search: Maps parameter names to one value (fixed), a list of values (choices) or a
            ``(MIN, MAX)`` tuple (a range, for numeric tunable parameters).

    Raises:
        ValueError: An unknown parameter, choices or a range for a parameter that is not
            tunable, a range for a non-numeric one, MIN > MAX, a value of the wrong type, or
            nothing to search.
    """
    flags, scales = hyperparameter_flags(agent), tunable(agent)
    fixed, distributions = {}, {}
    for name, spec in search.items():
        flag = flags.get(name)
        if flag is None:
            raise ValueError(f'expected a {agent_name(agent)} hyperparameter, got {name!r}')
        if isinstance(spec, list) and len(spec) == 1:
            spec = spec[0]
        if not isinstance(spec, (list, tuple)):
            fixed[name] = _convert(flag, spec)
            continue
        if name not in scales:
            options = ' '.join(flags[tunable_name].option for tunable_name in scales)
            shape = 'a range' if isinstance(spec, tuple) else 'choices'
            raise ValueError(f'expected one value for {flag.option}, which is not tunable '
                             f'(tunable: {options}), got {shape}')
        if isinstance(spec, list):
            choices = tuple(_convert(flag, value) for value in spec)
            if len(set(choices)) < len(choices):
                raise ValueError(f'expected distinct choices for {flag.option}, got {" ".join(map(str, spec))}')
            distributions[name] = CategoricalDistribution(choices)
            continue
        if scales[name] == 'categorical':
            raise ValueError(f'expected choices for {flag.option} (separate two with a comma), got a range')
        if len(spec) != 2:
            raise ValueError(f'expected MIN MAX for {flag.option}, got {len(spec)} values')
        low, high = (_convert(flag, value, 'MIN MAX') for value in spec)
        if low > high:
            raise ValueError(f'expected MIN <= MAX for {flag.option}, got {low} > {high}')
        log = scales[name] == 'log'
        if log and low <= 0:
            raise ValueError(f'expected MIN > 0 for {flag.option} (searched log-uniformly), got {low}')
        kind = IntDistribution if flag.kind == 'int' else FloatDistribution
        distributions[name] = kind(low, high, log=log)
    if not distributions:
        raise ValueError('expected a hyperparameter to search (MIN MAX, or several values), got only fixed values')
    return SearchSpace(fixed, distributions)


def cli_search_value(flag: Flag, words: Sequence[str]) -> Any:
    """What a flag's command-line words mean in a search: see :data:`GRAMMAR`."""
    if len(words) == 1 and ',' in words[0]:
        return [word for word in words[0].split(',') if word]
    if len(words) == 1:
        return words[0]
    if len(words) == 2 and flag.kind in ('int', 'float'):
        return tuple(words)
    return list(words)


def _convert(flag: Flag, value: Any, what: str = '') -> Any:
    expected = {'int': 'an integer', 'float': 'a number', 'bool': 'true or false'}.get(flag.kind, 'a string')
    try:
        if flag.kind == 'bool':
            return value if isinstance(value, bool) else _BOOLS[str(value).lower()]
        if flag.kind in ('int', 'float'):
            number = float(value)
            if isinstance(value, bool) or not math.isfinite(number):
                raise ValueError
            if flag.kind == 'int':
                if not number.is_integer():
                    raise ValueError
                number = int(number)
            check_value(flag.name, number)  # the rule of its kind, as training applies it
            return number
        if not isinstance(value, str):
            raise ValueError
        return value
    except (ValueError, TypeError, KeyError) as error:
        if str(error).startswith('expected'):
            raise
        where = f'{flag.option} {what}'.strip()
        raise ValueError(f'expected {expected} for {where}, got {value!r}') from None


def flag_words(option: str, value: Any) -> list[str]:
    """The command-line words that set ``option`` to ``value`` (``--no-x`` for a false bool)."""
    if isinstance(value, bool):
        return [option if value else '--no-' + option[2:]]
    return [option, repr(value) if isinstance(value, float) else str(value)]
