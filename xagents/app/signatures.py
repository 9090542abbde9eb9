"""Signatures read from xagents' source, so the command line knows every flag without importing TensorFlow.

The constructor signatures stay the one source of the flags: this reads them with :mod:`ast`
instead of importing their modules, which would load TensorFlow (seconds) just to print help or
refuse a misspelt flag. ``tests/test_cli.py`` checks that both readings agree.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import inspect
import pathlib
from typing import Any

EMPTY = inspect.Parameter.empty


@dataclasses.dataclass(frozen=True)
class StaticParameter:
    """A parameter as written in the source: name, annotation text and literal default."""

    name: str
    annotation: str
    default: Any
    variadic: bool = False


@dataclasses.dataclass(frozen=True)
class StaticFunction:
    """A function's parameters and docstring, read from source."""

    qualname: str
    parameters: tuple[StaticParameter, ...]
    doc: str


@functools.lru_cache(maxsize=None)
def _module(module: str) -> ast.Module:
    """The parsed source of ``module``, found without running it (its parent packages are imported:
    xagents' agent packages load their agents, and TensorFlow, only when an agent is asked for)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith('.py'):
        raise LookupError(f'no Python source for module {module}')
    return ast.parse(pathlib.Path(spec.origin).read_text())


def _find(module: str, name: str) -> tuple[str, ast.AST]:
    """The definition of ``name`` (a class or function) in ``module``, following ``from x import name``."""
    tree = _module(module)
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return module, node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and any(alias.name == name for alias in node.names):
            return _find(node.module, name)
    raise LookupError(f'no {name} in {module}')


def static_function(module: str, qualname: str) -> StaticFunction:
    """Read ``qualname`` (``create_envs`` or ``BaseAgent.fit``) from ``module``'s source."""
    owner, _, name = qualname.rpartition('.')
    where, node = _find(module, owner or name)
    if owner:
        node = next((item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == name), None)
        if node is None:
            raise LookupError(f'no {qualname} in {where}')
    return _read(node, qualname)


def _read(node: ast.FunctionDef, qualname: str) -> StaticFunction:
    arguments = node.args
    positional = arguments.posonlyargs + arguments.args
    defaults = [EMPTY] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    pairs = list(zip(positional, defaults)) + list(zip(arguments.kwonlyargs, arguments.kw_defaults))
    parameters = [StaticParameter(argument.arg, ast.unparse(argument.annotation) if argument.annotation else '',
                                  EMPTY if default in (EMPTY, None) else ast.literal_eval(default))
                  for argument, default in pairs]
    parameters += [StaticParameter(argument.arg, '', EMPTY, True)
                   for argument in (arguments.vararg, arguments.kwarg) if argument]
    return StaticFunction(qualname, tuple(parameters), inspect.cleandoc(ast.get_docstring(node) or ''))


def static_constructors(module: str, name: str, stop: str = 'BaseAgent') -> list[StaticFunction]:
    """``__init__`` of class ``name`` and of its bases down to (excluding) ``stop``, most derived first
    (xagents' agents inherit along one line, as :func:`xagents.app.flags.constructors` walks them)."""
    found = []
    while name != stop:
        module, node = _find(module, name)
        init = next((item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == '__init__'),
                    None)
        if init is not None:
            found.append(_read(init, f'{name}.__init__'))
        if not node.bases:
            break
        base = node.bases[0]
        name = base.id if isinstance(base, ast.Name) else base.attr
    return found
