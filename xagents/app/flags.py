"""Command-line flags derived from signatures: the constructor is the one source of every flag.

A parameter ``n_steps: int = 128`` documented as ``n_steps: Steps per env ...`` in the Google
style ``Args:`` section becomes ``--n-steps N`` with that help and default. Booleans become
``--flag/--no-flag``; ``Sequence[str]`` parameters take one or more values.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
from typing import Any, Callable, Iterable

from xagents.utils.console import BACKENDS
from xagents.utils.names import SB3_VALUES, suggestion
from xagents.app.signatures import StaticFunction
from xagents.utils.validation import KEPT, RENAMED

BACKEND_HELP = (f'the Keras backend to run on: {", ".join(BACKENDS[:-1])} or {BACKENDS[-1]} (default: KERAS_BACKEND\'s, '
                "else keras.json's, else tensorflow); benchmark runs and tune trials use it too")
# Parameters that take Python objects (envs, callbacks) have no flag.
SKIPPED = {'self', 'envs', 'env_id', 'args', 'kwargs', 'callbacks'}


@dataclasses.dataclass
class Flag:
    """One command-line flag derived from a parameter."""

    name: str
    kind: str  # 'int', 'float', 'bool', 'str', 'list', 'dict'
    default: Any
    help: str

    @property
    def option(self) -> str:
        return '--' + self.name.replace('_', '-')

    def add_to(self, group, check: Callable[[Any], Any] | None = None) -> None:
        """Add to an argparse group; only explicitly given flags reach the namespace. ``check`` (an
        agent's parser of its own syntax, raising ValueError) refuses a bad value while parsing."""
        shown = '' if self.default is None else f' (default: {_show(self.default)})'
        options = dict(dest=self.name, default=argparse.SUPPRESS, help=self.help + shown)
        if self.kind == 'bool':
            group.add_argument(self.option, action=argparse.BooleanOptionalAction, **options)
        elif self.kind == 'list':
            group.add_argument(self.option, nargs='+', metavar='KEY' if self.name.endswith('_keys') else 'PATH', **options)
        elif self.kind == 'dict':
            group.add_argument(self.option, nargs='+', metavar='KEY=VALUE', type=key_value, **options)
        else:
            cast = _sb3_words({'int': int, 'float': float, 'str': str}[self.kind], self.name)
            metavar = {'int': 'N', 'float': 'X', 'str': 'S'}[self.kind]
            group.add_argument(self.option, type=cast if check is None else _checked(cast, check), metavar=metavar,
                               **options)


def _sb3_words(cast: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """``cast``, whose refusal of a word Stable-Baselines3 takes for ``name`` (``--target-entropy auto``) says what
    that word means here."""
    hints = {word: hint for (owner, word), hint in SB3_VALUES.items() if owner == name and isinstance(word, str)}
    if not hints:
        return cast

    def convert(word: str) -> Any:
        try:
            return cast(word)
        except ValueError:
            if word not in hints:
                raise
            raise argparse.ArgumentTypeError(f'invalid {cast.__name__} value: {word!r}: {hints[word]}') from None

    convert.__name__ = cast.__name__  # argparse names the type in its own messages
    return convert


def _checked(cast: Callable[[str], Any], check: Callable[[Any], Any]) -> Callable[[str], Any]:
    """An argparse type: ``cast(word)``, refused with ``check``'s message if ``check`` raises ValueError."""
    def convert(word: str) -> Any:
        value = cast(word)
        try:
            check(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    convert.__name__ = cast.__name__  # argparse names the type in its own messages
    return convert


def key_value(word: str) -> tuple[str, Any]:
    """``key=value`` as a pair, the value typed as a command line means it: ``true``/``false`` (any case) and
    ``none`` as Python's, numbers and other literals (``3``, ``0.5``, ``[1, 2]``) as Python reads them, anything
    else a string (``render=rgb_array``); ``continuous=false`` is False, never the truthy string 'false'."""
    key, equals, text = word.partition('=')
    if not equals or not key.isidentifier():
        raise argparse.ArgumentTypeError(f'expected KEY=VALUE, got {word!r}')
    words = {'true': True, 'false': False, 'none': None}
    if text.strip().lower() in words:
        return key, words[text.strip().lower()]
    try:
        return key, ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return key, text


def _show(value: Any) -> str:
    return ' '.join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _kind(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, '__name__', str(annotation))
    if 'Sequence' in text or 'list' in text:
        return 'list'
    if 'dict' in text:
        return 'dict'
    for kind in ('bool', 'int', 'float'):
        if re.search(rf'\b{kind}\b', text):
            return kind
    return 'str'


def docstring_args(function: Callable | StaticFunction) -> dict[str, str]:
    """Map parameter names to their one-line help from a Google-style ``Args:`` section."""
    doc = function.doc if isinstance(function, StaticFunction) else inspect.getdoc(function) or ''
    section = re.split(r'(?:^|\n)\s*Args:\s*\n', doc, maxsplit=1)
    if len(section) < 2:
        return {}
    helps, current = {}, None
    for line in section[1].splitlines():
        if re.match(r'^[A-Za-z][\w ]*:$', line):  # the next section (Returns:, Raises:), not a help ending in ':'
            break
        match = re.match(r'^\s{0,4}(\w+):\s*(.*)$', line)
        if match:
            current = match.group(1)
            helps[current] = match.group(2).strip()
        elif current and line.strip():
            helps[current] += ' ' + line.strip()
    return helps


def flags_of(functions: Iterable[Callable | StaticFunction], skip: Iterable[str] = ()) -> list[Flag]:
    """Flags for the keyword parameters of ``functions`` (imported, or read from source by
    :mod:`xagents.app.signatures`); the first function naming one wins."""
    flags: dict[str, Flag] = {}
    skipped = SKIPPED | set(skip)
    functions = list(functions)
    helps: dict[str, str] = {}
    for function in reversed(functions):
        helps.update(docstring_args(function))
    for function in functions:
        for name, annotation, default in _parameters(function):
            if name not in skipped and name not in flags:
                default = None if default is inspect.Parameter.empty else default
                flags[name] = Flag(name, _kind(annotation), default, helps.get(name, ''))
    return list(flags.values())


def _parameters(function: Callable | StaticFunction) -> list[tuple[str, Any, Any]]:
    """``(name, annotation, default)`` of each named parameter (not ``*args``, ``**kwargs``)."""
    if isinstance(function, StaticFunction):
        return [(p.name, p.annotation, p.default) for p in function.parameters if not p.variadic]
    return [(p.name, p.annotation, p.default) for p in inspect.signature(function).parameters.values()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


def constructors(agent_class: type, stop: type) -> list[Callable]:
    """``__init__`` of ``agent_class`` and its bases down to (excluding) ``stop``, most derived first."""
    return [klass.__init__ for klass in agent_class.__mro__
            if issubclass(klass, stop) and klass is not stop and '__init__' in vars(klass)]


OLD_NAME_GIVEN = '_old_name_of_'


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line and exit status 2, without the usage dump; a
    misspelt flag (or one named as in Stable-Baselines3) gets a suggestion."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        namespace, rest = super().parse_known_args(args, namespace)
        for key in [key for key in vars(namespace) if key.startswith(OLD_NAME_GIVEN)]:
            old, new = getattr(namespace, key), '--' + key[len(OLD_NAME_GIVEN):].replace('_', '-')
            if any(word == new or word.startswith(new + '=') for word in args):
                self.error(f'{old} is the old name of {new}: give one of them, not both')
            if old[2:].replace('-', '_') not in KEPT:  # a Stable-Baselines3 name, taken for good
                sys.stderr.write(f'{self.prog}: {old} is deprecated, use {new} (the old name goes in the next release)\n')
            delattr(namespace, key)
        return namespace, rest

    def error(self, message: str) -> None:
        unknown = re.match(r'unrecognized arguments: (--?[\w-]+)', message)
        if unknown:
            known = {option[2:].replace('-', '_') for option in self._option_string_actions if option.startswith('--')}
            name = unknown.group(1).lstrip('-').replace('-', '_')
            hint = suggestion(name, known, flags=True)
            if hint:
                message += f' (did you mean {hint}?)'
        fail(f'{self.prog}: error: {message}')


class _OldName(argparse.Action):
    """A renamed flag's old name: stores under the new name, with a one-line notice."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, OLD_NAME_GIVEN + self.dest, option_string)  # the parser checks it and gives the notice
        setattr(namespace, self.dest, values)


def add_old_names(parser: argparse.ArgumentParser) -> None:
    """Accept the old name of each renamed flag the parser has (:data:`RENAMED`), hidden from help."""
    actions = {action.dest: action for action in parser._actions}
    for old, new in RENAMED.items():
        if new in actions and old not in actions:
            action = actions[new]
            parser.add_argument('--' + old.replace('_', '-'), dest=new, action=_OldName, type=action.type,
                                nargs=action.nargs, metavar=action.metavar, default=argparse.SUPPRESS,
                                help=argparse.SUPPRESS)


def fail(message: str, status: int = 2) -> None:
    """Print a one-line error to stderr and exit with ``status`` (2: bad input; 1: a failure; 130: interrupted)."""
    sys.stderr.write((message.splitlines() or ['error'])[0] + '\n')
    raise SystemExit(status)


def add_search_flag(group, flag: Flag, tag: str | None = None) -> None:
    """Add ``flag`` to a search's parser: it takes one or more words (a value, choices, MIN MAX).

    ``tag`` says how the flag is searched (shown in its help); a bool flag takes true/false words.
    """
    metavar = {'int': 'N', 'float': 'X', 'bool': 'BOOL'}.get(flag.kind, 'S')
    shown = '' if flag.default is None else f' (default: {_show(flag.default)})'
    tagged = f' [{tag}]' if tag else ''
    group.add_argument(flag.option, dest=flag.name, nargs='+', metavar=metavar, default=argparse.SUPPRESS,
                       help=flag.help + tagged + shown)
