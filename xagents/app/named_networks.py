"""Networks of the user's named on the command line: ``--model``, ``--actor-model`` and ``--critic-model`` (and a
tune search's choices of them) take ``module:Name`` besides a ``.cfg`` file, as ``--wrapper`` takes
``module:function``. ``Name`` is a class or a function, called with no arguments, that gives the network (a
``torch.nn.Module``, a Flax module, a Keras model or layer), or the network itself; the agent then takes it as
``model=`` takes it from Python (:mod:`xagents.networks.own`)."""
from __future__ import annotations

import importlib
import inspect
import re
from typing import Any, Mapping

# module:Name, the module also as its file in the working directory (my_nets.py:ActorCritic); not a path
NAMED = re.compile(r'(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*?)(?:\.py)?:(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)')
HELP = ('; on the command line also module:Name, a network of yours: a class or function called with no arguments '
        '(a torch.nn.Module, a Flax module, a Keras model or layer), imported from the working directory or '
        'PYTHONPATH')


def network_parameter(name: str) -> bool:
    """Whether the agents' parameter ``name`` takes a network (``model``, ``actor_model``, ``critic_model``)."""
    return name == 'model' or name.endswith('_model')


def named(value: Any) -> bool:
    """Whether ``value`` names a network as ``module:Name`` (not a .cfg file)."""
    return isinstance(value, str) and not value.endswith('.cfg') and NAMED.fullmatch(value) is not None


def named_network(value: str, option: str) -> Any:
    """The network that ``value`` (``module:Name``) names, for ``option`` (``--model``: said in errors).

    Raises:
        ValueError: the module cannot be imported, has no such name, or calling it fails (one line).
    """
    match = NAMED.fullmatch(value)
    module, name = match['module'], match['name']
    try:
        target = importlib.import_module(module)
    except Exception as error:  # a user's module: any error in it is theirs to fix
        raise ValueError(f'cannot import {module!r} for {option} {value}: {type(error).__name__}: '
                         f'{(str(error).strip().splitlines() or [""])[0]}') from None
    for part in name.split('.'):
        if not hasattr(target, part):
            raise ValueError(f'{module} has no {name} for {option} {value} (expected module:Name, Name a network '
                             'class, a function that returns a network, or a network)')
        target = getattr(target, part)
    if not (inspect.isclass(target) or inspect.isfunction(target)):
        return target  # a network made when its module loaded
    try:
        return target()
    except Exception as error:
        raise ValueError(f'{option} {value}: calling {name}() failed: {type(error).__name__}: '
                         f'{(str(error).strip().splitlines() or [""])[0]} (give its arguments defaults, or name a '
                         'function that makes the network)') from None


def with_named_networks(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with each network parameter given as ``module:Name`` replaced by the network it names."""
    return {name: named_network(value, '--' + name.replace('_', '-'))
            if network_parameter(name) and named(value) else value for name, value in settings.items()}
