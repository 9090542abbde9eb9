"""Hyperparameter search with Optuna: ``xagents tune`` and the same study from Python.

A search fixes, chooses among, or ranges over an agent's hyperparameters: those its package's
``cli.py`` lists in ``TUNABLE`` (with how to search them); types, defaults and help come from the
constructor signature, as for every flag. Each trial's agent is built as ``xagents train`` builds
it (``Agent.from_env`` with the per-env defaults), so the printed best command reproduces it.

Storage: with no URL the study lives in ``<study>.journal.log`` in the working directory
(Optuna's journal file, safe for several local processes, readable by ``optuna-dashboard``);
with a ``postgresql://`` or ``mysql://`` URL every machine running the same command joins one
study (Optuna's distributed mode), with heartbeats so that a dead worker's trial is failed.
What exists is checked before anything is written: a SQLite file holding another application's
tables, a journal path that is no file, a journal damaged before its last line, or a study resumed
with other settings (agent, env, budgets, searched ranges, fixed values) is refused, left as it is.

Isolation: every trial trains in a fresh Python process, because TensorFlow keeps the memory of
models built in a process (tensorflow issue 62854). The child only trains and writes one JSON
line per intermediate value to a pipe; the parent owns the Optuna trial: it reports the values,
asks the pruner, records heartbeats and tells the outcome. Relaying through the parent, rather
than letting the child open the storage, keeps one storage connection and the only copy of a
password per worker, decides pruning with the pruner this command configured, and turns a child
that dies in any way (exception, NaN, out of memory, killed) into a FAIL at once.

Counting: ``n_trials`` is the number of trials a search adds to the study, over all workers. The
first worker records the target (trials started so far + ``n_trials``) in the study; a worker
started while the target is unreached joins it, so the same command completes a search cut short
and extends a finished one. Trials are counted before each one is created, and a trial created
past the target by two workers racing goes back to WAITING (a later search runs it), so exactly
the target number of trials finish. (Optuna's ``MaxTrialsCallback`` counts only after a trial
ends, so two workers finishing together would both start one more.)
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import json
import logging
import math
import os
import re
import select
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import warnings
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import optuna
import sqlalchemy
from optuna.distributions import (BaseDistribution, CategoricalDistribution, FloatDistribution,
                                  IntDistribution, check_distribution_compatibility)
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import JournalStorage, RDBStorage, fail_stale_trials
from optuna.storages._rdb.models import BaseModel as OptunaTables
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from xagents.utils.checkpoints import NonFiniteError
from xagents.utils.extras import install_command
from xagents.app.flags import Flag, constructors, flags_of
from xagents.utils.console import console_logging
from xagents.utils.atomic import check_writable
from xagents.utils.envs import create_envs, env_spec
from xagents.utils.validation import check_value

logger = logging.getLogger(__name__)

SCALES = {
    'log': 'MIN MAX log-uniform, or choices',
    'uniform': 'MIN MAX uniform, or choices',
    'categorical': 'choices',
}
GRAMMAR = ('one value fixes a flag; MIN MAX searches a range (numeric flags, scale as tagged); '
           'comma-separated or three or more values are choices')
DRIVERS = {'postgresql': (('psycopg2', 'psycopg2'), ('psycopg', 'psycopg')),
           'mysql': (('MySQLdb', 'mysqldb'), ('pymysql', 'pymysql'))}
SAMPLERS = ('tpe', 'random')
PRUNERS = ('median', 'halving', 'none')
HEARTBEAT_INTERVAL = 30  # seconds between heartbeats of a running trial (RDB storages)
GRACE_PERIOD = 120  # seconds without a heartbeat after which another worker fails the trial
TARGET_ATTR = 'target_trials'
# the tables an Optuna SQL storage holds: its models' and the version stamp of its migrations (alembic)
OPTUNA_TABLES = frozenset(OptunaTables.metadata.tables) | {'alembic_version'}
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


# --------------------------------------------------------------------------- storage, study
def mask_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, whether or not it parses."""
    scheme = re.match(r'[\w+.-]*://', url)
    start = scheme.end() if scheme else 0
    at = url.rfind('@')
    colon = url.find(':', start, at)
    if at > 0 and colon >= 0:  # user:password@ (a malformed URL too: hide rather than show)
        url = f'{url[:colon]}:***{url[at:]}'
    return re.sub(r'(password=)[^&]*', r'\1***', url)


def open_storage(url: str | None, study: str, n_jobs: int = 1) -> tuple[optuna.storages.BaseStorage, str]:
    """The storage of a study and how to show it: a journal file in the working directory by
    default, else the database at ``url`` (reached within 10 s, or a ValueError)."""
    if url is None:
        path = os.path.abspath(re.sub(r'[^\w.-]', '_', study) + '.journal.log')
        return open_journal(path), path
    shown = mask_url(url)
    backend = url.split('://', 1)[0].split('+', 1)[0] if '://' in url else ''
    if backend not in ('postgresql', 'mysql', 'sqlite'):
        raise ValueError(f'expected a storage URL like postgresql://user@host/db or mysql://user@host/db, got {shown!r}')
    if backend == 'sqlite' and n_jobs > 1:
        raise ValueError(f'expected --n-jobs 1 with SQLite, which Optuna advises against for parallel workers '
                         f'(the default journal file is safe), got {n_jobs}')
    if '+' not in url.split('://', 1)[0]:
        # SQLAlchemy's default driver differs across versions (psycopg2, then psycopg 3): use one installed
        installed = [name for module, name in DRIVERS.get(backend, ()) if importlib.util.find_spec(module)]
        if backend in DRIVERS and not installed:
            extra = {'postgresql': 'postgres', 'mysql': 'mysql'}[backend]
            raise ValueError(f'a {backend} storage needs a database driver: {install_command(extra)}')
        if installed:
            url = url.replace('://', f'+{installed[0]}://', 1)
    if backend == 'sqlite':
        check_sqlite(url, shown)
    password = re.match(r'[^:]*://[^/@:]*:(.*)@', url)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', optuna.exceptions.ExperimentalWarning)
            storage = RDBStorage(url, heartbeat_interval=HEARTBEAT_INTERVAL, grace_period=GRACE_PERIOD,
                                 engine_kwargs={'connect_args': {'connect_timeout': 10}} if backend != 'sqlite' else {})
    except Exception as error:  # any driver or connection error: a one-line message, password hidden
        message = mask_url(_one_line(error))
        if password and password.group(1):
            message = message.replace(password.group(1), '***')
        raise ValueError(f'cannot open storage {shown}: {message}') from None
    return storage, shown


def open_journal(path: str) -> JournalStorage:
    """The journal storage in ``path``, created if missing; a torn last record is dropped.

    Raises:
        ValueError: ``path`` cannot be read or written (a directory, no permission), or Optuna cannot
            replay it (a damaged record before the last line); the file is left as it is.
    """
    try:
        storage = JournalStorage(JournalFileBackend(path))  # replays the whole file, tolerating a torn last line
        repair_journal(path)
    except OSError as error:
        raise ValueError(f'cannot use {path} as the study journal: {error.strerror} '
                         '(move it, or choose another --study)') from None
    except Exception as error:  # JSON or replay errors of a record that is not Optuna's
        raise ValueError(f'expected an Optuna journal in {path}, got {_damage(path, error)}: restore the file '
                         'from a copy, or choose another --study (the file was left as it is)') from None
    return storage


def _damage(path: str, error: Exception) -> str:
    """Where a journal Optuna cannot replay is damaged: its first complete line that is no record."""
    with open(path, 'rb') as file:
        for number, line in enumerate(file, 1):
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if line.endswith(b'\n') and not (isinstance(record, dict) and 'op_code' in record):
                return f'a damaged record at line {number}'
    return f'a record Optuna cannot replay ({_one_line(error)})'


def check_sqlite(url: str, shown: str) -> None:
    """Refuse a SQLite file that holds tables other than Optuna's: another application's database,
    to which Optuna would add its own. The file is only read; a new, empty or Optuna-made one passes."""
    path = sqlalchemy.engine.make_url(url).database
    if not path or path == ':memory:' or not os.path.exists(path):
        return
    try:
        uri = f'file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro'
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as connection:
            tables = {name for name, in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as error:
        raise ValueError(f'cannot open storage {shown}: {error}') from None
    others = sorted(name for name in tables - OPTUNA_TABLES if not name.startswith('sqlite_'))
    if others:
        listed = ', '.join(others[:3]) + (', ...' if len(others) > 3 else '')
        raise ValueError(f'expected an Optuna database at {shown}, got a SQLite file with other tables ({listed}): '
                         f'give a new file, e.g. sqlite:///{os.path.splitext(path)[0]}-optuna.db')


def repair_journal(path: str) -> None:
    """Drop a partial last record, left when a process was killed while appending to the journal.

    Optuna writes one JSON record per line; without this, every later run fails to parse the file.
    """
    if not os.path.isfile(path):
        return
    with open(path, 'rb') as file:
        content = file.read()
    complete = content.rfind(b'\n') + 1
    tail = content[complete:]
    if not tail.strip():
        return
    try:
        json.loads(tail)
        with open(path, 'ab') as file:  # a whole record that only lacks its newline
            file.write(b'\n')
    except ValueError:
        os.truncate(path, complete)
        logger.warning('%s ended with a partial record (%d bytes) from an interrupted write: dropped it',
                       path, len(tail))


def open_study(storage, name: str, agent: type, env_id: str, space: SearchSpace,
               sampler: optuna.samplers.BaseSampler, pruner: optuna.pruners.BasePruner,
               scoring: Mapping[str, int] | None = None) -> optuna.Study:
    """Load the study (checking it searches the same agent, env and distributions, fixes the other
    hyperparameters to the same values, and scores trials as ``scoring`` says: ``trial_steps``,
    ``eval_episodes``) or create it.

    Nothing is written to an existing study unless every check passes.
    """
    try:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
    except KeyError:
        study = optuna.create_study(storage=storage, study_name=name, direction='maximize', sampler=sampler,
                                    pruner=pruner, load_if_exists=True)
    attrs, agent_id = study.user_attrs, agent_name(agent)
    owner = (attrs.get('agent', agent_id), attrs.get('env', env_id))
    if owner != (agent_id, env_id):
        raise ValueError(f'study {name!r} tunes {owner[0]} on {owner[1]}, got {agent_id} on {env_id}: '
                         'choose another --study')
    if study.directions != [optuna.study.StudyDirection.MAXIMIZE]:
        raise ValueError(f'study {name!r} does not maximise one value: choose another --study')
    for setting, value in (scoring or {}).items():  # trials of other budgets would be ranked together
        if attrs.get(setting, value) != value:
            raise ValueError(f'study {name!r} scored its trials with --{setting.replace("_", "-")} {attrs[setting]}, '
                             f'got {value}: keep it, or choose another --study')
    searched = {}
    for trial in study.get_trials(deepcopy=False):
        searched.update(trial.distributions)
    flags = hyperparameter_flags(agent)
    for parameter, distribution in space.distributions.items():
        if parameter in searched:
            try:
                check_distribution_compatibility(searched[parameter], distribution)
            except ValueError:
                raise ValueError(f'study {name!r} searched {flags[parameter].option} as {_describe(searched[parameter])}, '
                                 f'got {_describe(distribution)}: keep it, or choose another --study') from None
    if 'fixed' in attrs:  # a value given equal to its default is the same setting as no flag
        defaults = {**{parameter: flag.default for parameter, flag in flags.items()},
                    **agent.default_hyperparameters(env_id)}
        for parameter in sorted(set(attrs['fixed']) | set(space.fixed)):
            before = _setting(flags[parameter], attrs['fixed'], searched, defaults.get(parameter))
            now = _setting(flags[parameter], space.fixed, space.distributions, defaults.get(parameter))
            if before[0] != now[0]:
                raise ValueError(f'study {name!r} trained its trials with {before[1]}, got {now[1]}: '
                                 'resume it with the same flags, or choose another --study')
    else:
        study.set_user_attr('fixed', space.fixed)
    if 'agent' not in attrs:
        study.set_user_attr('agent', agent_id)
        study.set_user_attr('env', env_id)
    for setting, value in (scoring or {}).items():
        if setting not in attrs:
            study.set_user_attr(setting, value)
    return study


def _setting(flag: Flag, fixed: Mapping[str, Any], distributions: Mapping[str, BaseDistribution],
             default: Any) -> tuple[Any, str]:
    """How a study or a search sets ``flag`` (searched, given, or left to its default): the value or
    distribution, and how to show it."""
    if flag.name in distributions:
        return distributions[flag.name], f'{flag.option} searched as {_describe(distributions[flag.name])}'
    if flag.name in fixed:
        return fixed[flag.name], shlex.join(_flag_words(flag.option, fixed[flag.name]))
    return default, f'no {flag.option} (its default: {default})'


def _describe(distribution: BaseDistribution) -> str:
    if isinstance(distribution, CategoricalDistribution):
        return 'choices ' + ','.join(map(str, distribution.choices))
    return f'{"a log-uniform" if distribution.log else "a uniform"} range'


def make_sampler(sampler: str, warmup_trials: int) -> optuna.samplers.BaseSampler:
    """TPE (multivariate, with a constant liar for parallel workers) after ``warmup_trials`` random ones."""
    if sampler == 'random':
        return optuna.samplers.RandomSampler()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(n_startup_trials=warmup_trials, multivariate=True, constant_liar=True)


def make_pruner(pruner: str, warmup_trials: int, trial_steps: int, n_reports: int) -> optuna.pruners.BasePruner:
    """Median rule after ``warmup_trials`` trials and a third of each trial, successive halving, or none."""
    interval = trial_steps // n_reports
    if pruner == 'median':
        return optuna.pruners.MedianPruner(n_startup_trials=warmup_trials, n_warmup_steps=interval * (n_reports // 3))
    if pruner == 'halving':
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=interval)
    return optuna.pruners.NopPruner()


# ------------------------------------------------------------------------------ the search
def tune(
    agent: type,
    env_id: str,
    search: Mapping[str, Any],
    study: str | None = None,
    storage: str | None = None,
    n_trials: int = 20,
    trial_steps: int = 100_000,
    n_reports: int = 10,
    eval_episodes: int = 0,
    warmup_trials: int = 5,
    sampler: str = 'tpe',
    pruner: str = 'median',
    n_jobs: int = 1,
    seed: int | None = None,
    plot: str | None = None,
) -> optuna.Study:
    """Search ``agent``'s hyperparameters on ``env_id``; log a line per trial, then the best.

    Args:
        agent: The agent class, e.g. ``xagents.PPO``.
        env_id: Gymnasium environment id.
        search: Parameter -> value (fixed), list (choices) or ``(MIN, MAX)`` (range).
        study: Study name (default: <agent>-<env>); the same name and storage continue a study.
        storage: Database URL shared by all workers, e.g. postgresql://user@host/db (a password may also come from PGPASSWORD or ~/.pgpass); default: <study>.journal.log in the working directory.
        n_trials: Trials this search adds, counted over all workers sharing the study; the same command completes a search cut short.
        trial_steps: Env steps each trial trains for.
        n_reports: Intermediate values each trial reports to the pruner, evenly spaced.
        eval_episodes: Judge trials by this many deterministic episodes at each report (0: the mean training reward of the last episodes).
        warmup_trials: Random trials before TPE starts, and complete trials before the median pruner starts.
        sampler: 'tpe' or 'random'.
        pruner: 'median', 'halving' (successive halving) or 'none'.
        n_jobs: Trials this process trains at once, each in its own process.
        seed: Seed of every trial's agent (default: the trial number, so each trial can be reproduced).
        plot: Directory to write optimisation-history, importance and parallel-coordinate PNGs to.

    Returns:
        The Optuna study.
    """
    for option, value in (('n_trials', n_trials), ('trial_steps', trial_steps), ('n_reports', n_reports),
                          ('n_jobs', n_jobs)):
        if value < 1:
            raise ValueError(f'expected {option} >= 1, got {value}')
    for option, value in (('eval_episodes', eval_episodes), ('warmup_trials', warmup_trials)):
        if value < 0:
            raise ValueError(f'expected {option} >= 0, got {value}')
    if trial_steps < n_reports:
        raise ValueError(f'expected trial_steps >= n_reports ({n_reports}), got {trial_steps}')
    if sampler not in SAMPLERS:
        raise ValueError(f'expected sampler {" or ".join(SAMPLERS)}, got {sampler!r}')
    if pruner not in PRUNERS:
        raise ValueError(f'expected pruner {", ".join(PRUNERS)}, got {pruner!r}')
    space = search_space(agent, search)
    env_spec(env_id)
    console_logging()  # a script shows the trial lines and the best, as the command does
    if plot:
        check_writable(plot, directory=True)
    name = study or f'{agent_name(agent)}-{env_id}'
    backend, shown = open_storage(storage, name, n_jobs)
    the_study = open_study(backend, name, agent, env_id, space, make_sampler(sampler, warmup_trials),
                           make_pruner(pruner, warmup_trials, trial_steps, n_reports),
                           {'trial_steps': trial_steps, 'eval_episodes': eval_episodes})
    search_run = _Search(the_study, backend, agent, env_id, space, trial_steps, n_reports, eval_episodes, seed)
    logger.info('study %s in %s', name, shown)
    try:
        search_run.run(n_trials, n_jobs)
    finally:
        log_summary(the_study)
        if plot:
            for path in write_plots(the_study, plot):
                logger.info('wrote %s', path)
    return the_study


class _Search:
    """This process's part in a search: claims trials until the study's target is reached."""

    def __init__(self, study: optuna.Study, storage, agent: type, env_id: str, space: SearchSpace,
                 trial_steps: int, n_reports: int, eval_episodes: int, seed: int | None) -> None:
        self.study, self.storage, self.agent, self.env_id, self.space = study, storage, agent, env_id, space
        self.trial_steps, self.n_reports, self.eval_episodes, self.seed = trial_steps, n_reports, eval_episodes, seed
        self.worker = f'{socket.gethostname()}:{os.getpid()}'
        self.heartbeat = isinstance(storage, RDBStorage)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.children: set[subprocess.Popen] = set()
        self.errors: list[BaseException] = []
        self.target = 0

    def run(self, n_trials: int, n_jobs: int) -> None:
        """Run trials in ``n_jobs`` threads (one child process each) until the target is reached."""
        self.fail_abandoned()
        started = self.started()
        # Counted before the target is read: a worker that sees another's trials also sees the
        # target that worker recorded before creating them, so simultaneous starts agree.
        target = self.study.user_attrs.get(TARGET_ATTR)
        if target is None or started >= target:
            target = started + n_trials
            self.study.set_user_attr(TARGET_ATTR, target)
            logger.info('searching %d trials (the study had %d)', n_trials, started)
        else:
            logger.info('joining the search in progress: %d of %d trials started', started, target)
        self.target = target
        # Each thread sets its event when it ends: Thread.join cut short by Ctrl-C can report a
        # running thread as stopped (the bpo-45274 fix releases its lock), so it is not used.
        ended = [threading.Event() for _ in range(n_jobs)]
        try:
            for event in ended:
                threading.Thread(target=self.work, args=(event,), daemon=True).start()
            while not all(event.is_set() for event in ended):
                time.sleep(0.1)
        except KeyboardInterrupt:
            logger.info('Stopping: running trials end as FAIL; completed trials stay in the study')
            self.stop.set()
            for child in list(self.children):
                _kill(child)
            while not all(event.is_set() for event in ended):
                time.sleep(0.1)
            raise
        if self.errors:
            raise self.errors[0]

    def work(self, ended: threading.Event) -> None:
        try:
            while not self.stop.is_set():
                trial = self.claim()
                if trial is None:
                    return
                self.run_trial(trial)
        except BaseException as error:  # re-raised by run() in the main thread
            self.errors.append(error)
            self.stop.set()
        finally:
            ended.set()

    def started(self) -> int:
        return sum(trial.state != TrialState.WAITING for trial in self.study.get_trials(deepcopy=False))

    def fail_abandoned(self) -> None:
        """Fail RUNNING trials whose worker is gone: stale heartbeat, or a dead process on this host."""
        if self.heartbeat:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore', optuna.exceptions.ExperimentalWarning)
                fail_stale_trials(self.study)
        host = socket.gethostname()
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            worker_host, _, pid = str(trial.user_attrs.get('worker', '')).rpartition(':')
            if worker_host == host and pid.isdigit() and not _alive(int(pid)):
                try:
                    if self.storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
                        logger.info('trial %d FAIL: its worker (pid %s) is gone', trial.number, pid)
                except UpdateFinishedTrialError:
                    pass

    def claim(self) -> optuna.Trial | None:
        """A new trial, or None once the target number of trials has started."""
        with self.lock:
            if self.stop.is_set():
                return None
            self.fail_abandoned()
            if self.started() >= self.target:
                return None
            with warnings.catch_warnings():  # heartbeats are recorded here, not by Study.optimize
                warnings.filterwarnings('ignore', 'Heartbeat of storage', UserWarning)
                trial = self.study.ask()
            self.beat(trial)
            earlier = sum(other.state != TrialState.WAITING and other.number < trial.number
                          for other in self.study.get_trials(deepcopy=False))
            if earlier >= self.target:  # another worker took the last one meanwhile
                self.storage.set_trial_state_values(trial._trial_id, TrialState.WAITING)
                return None
            trial.set_user_attr('worker', self.worker)
            return trial

    def beat(self, trial: optuna.Trial) -> None:
        if self.heartbeat:
            self.storage.record_heartbeat(trial._trial_id)

    def run_trial(self, trial: optuna.Trial) -> None:
        start = time.monotonic()
        state, value, note, params = TrialState.FAIL, None, '', {}
        try:
            params = self.space.sample(trial)
            seed = trial.number if self.seed is None else self.seed
            command = train_command(self.agent, self.env_id, {**self.space.fixed, **params}, seed,
                                    self.trial_steps, self.eval_episodes, self.n_reports)
            trial.set_user_attr('command', command)
            spec = dict(agent=f'{self.agent.__module__}:{self.agent.__qualname__}', env_id=self.env_id,
                        hyperparameters={**self.space.fixed, **params, 'seed': seed},
                        trial_steps=self.trial_steps, n_reports=self.n_reports, eval_episodes=self.eval_episodes)
            state, value, note = self.train(trial, spec)
        except BaseException as error:
            note = _one_line(error)
            raise
        finally:
            if note:
                trial.set_user_attr('note', note)
            self.study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)
            shown = '' if value is None else f' value {value:.2f}'
            logger.info('trial %d %s%s  %s  (%.0f s)%s', trial.number, state.name, shown,
                        ' '.join(f'{name}={_short(v)}' for name, v in params.items()),
                        time.monotonic() - start, f': {note}' if note else '')

    def train(self, trial: optuna.Trial, spec: dict) -> tuple[TrialState, float | None, str]:
        """Train in a child process, relaying its reports to the trial and the pruner."""
        with tempfile.TemporaryFile() as errors:
            child = subprocess.Popen([sys.executable, '-m', __name__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=errors, start_new_session=True)
            self.children.add(child)
            try:
                try:
                    child.stdin.write(json.dumps(spec).encode())
                    child.stdin.close()
                except BrokenPipeError:
                    pass
                outcome = self.follow(trial, child)
                if outcome is None and self.stop.is_set():
                    outcome = (TrialState.FAIL, None, 'interrupted')
                elif outcome is None:  # a crash: the last line it wrote that is not native logging
                    errors.seek(0)
                    lines = [line for line in errors.read().decode(errors='replace').splitlines()
                             if line.strip() and not re.match(r'[IWEF]\d{4} |WARNING: All log messages', line)]
                    outcome = (TrialState.FAIL, None, f'trial process exited with status {child.wait()}'
                               + (f': {lines[-1].strip()}' if lines else ''))
                return outcome
            finally:
                _kill(child)
                self.children.discard(child)
                child.stdout.close()

    def follow(self, trial: optuna.Trial, child: subprocess.Popen) -> tuple[TrialState, float | None, str] | None:
        """Read the child's JSON lines until it finishes; None if it ends without saying how."""
        descriptor, pending, value = child.stdout.fileno(), b'', None
        next_beat = time.monotonic() + HEARTBEAT_INTERVAL
        while True:
            if self.stop.is_set():
                return TrialState.FAIL, None, 'interrupted'
            if time.monotonic() >= next_beat:
                self.beat(trial)
                next_beat += HEARTBEAT_INTERVAL
            if not select.select([descriptor], [], [], 0.5)[0]:
                continue
            chunk = os.read(descriptor, 65536)
            if not chunk:
                return None
            *lines, pending = (pending + chunk).split(b'\n')
            for line in lines:
                message = json.loads(line)
                if 'value' in message:
                    value = message['value']
                    trial.report(value, message['step'])
                    if message['step'] < self.trial_steps and trial.should_prune():  # the last one completes
                        return TrialState.PRUNED, value, f'pruned at step {message["step"]}'
                elif 'diverged' in message:
                    return TrialState.PRUNED, value, message['diverged']
                elif 'error' in message:
                    return TrialState.FAIL, None, message['error']
                elif value is None:
                    return TrialState.FAIL, None, f'no episode finished within {self.trial_steps} steps'
                else:
                    return TrialState.COMPLETE, value, ''


def train_command(agent: type, env_id: str, hyperparameters: Mapping[str, Any], seed: int, trial_steps: int,
                  eval_episodes: int = 0, n_reports: int = 1) -> str:
    """The ``xagents train`` command that trains a trial's agent again."""
    flags = hyperparameter_flags(agent)
    words = ['xagents', 'train', agent_name(agent), '--env', env_id]
    for name, value in hyperparameters.items():
        words += _flag_words(flags[name].option, value)
    words += ['--seed', str(seed), '--max-steps', str(trial_steps)]
    if eval_episodes:
        words += ['--eval-frequency', str(trial_steps // n_reports), '--eval-episodes', str(eval_episodes)]
    return shlex.join(words)


def _flag_words(option: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return [option if value else '--no-' + option[2:]]
    return [option, repr(value) if isinstance(value, float) else str(value)]


def log_summary(study: optuna.Study) -> None:
    """Log the study's trial counts, its best trial and the command that trains it."""
    trials = study.get_trials(deepcopy=False)
    counts = collections.Counter(trial.state.name for trial in trials)
    logger.info('study %s: %d trials (%s)', study.study_name, len(trials),
                ', '.join(f'{count} {state}' for state, count in sorted(counts.items())) or 'none')
    complete = [trial for trial in trials if trial.state == TrialState.COMPLETE]
    if not complete:
        logger.info('no trial has completed yet')
        return
    best = max(complete, key=lambda trial: trial.value)
    logger.info('best trial %d: value %.2f  %s', best.number, best.value,
                ' '.join(f'{name}={_short(value)}' for name, value in best.params.items()))
    logger.info('train it: %s', best.user_attrs.get('command', '(command not recorded)'))


def write_plots(study: optuna.Study, directory: str) -> list[str]:
    """Write optimisation-history, parameter-importance and parallel-coordinate PNGs to ``directory``."""
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as charts

    os.makedirs(directory, exist_ok=True)
    written = []
    for name, draw in (('optimization_history', charts.plot_optimization_history),
                       ('param_importances', charts.plot_param_importances),
                       ('parallel_coordinate', charts.plot_parallel_coordinate)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                axes = draw(study)
        except Exception as error:  # e.g. importances need two complete trials
            logger.warning('%s not drawn: %s', name, _one_line(error))
            continue
        figure = np.ravel(axes)[0].figure
        path = os.path.join(directory, f'{name}.png')
        figure.savefig(path, dpi=100, bbox_inches='tight')
        plt.close(figure)
        written.append(path)
    return written


def _short(value: Any) -> str:
    return f'{value:.3g}' if isinstance(value, float) else str(value)


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    # TensorFlow's errors open with 'in user code:' and end with the actual error
    return lines[-1] if lines[0].endswith(':') else f'{type(error).__name__}: {lines[0]}'


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _kill(child: subprocess.Popen) -> None:
    """Kill a trial process and anything it started (it leads its own process group)."""
    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    child.wait()


# ------------------------------------------------------------------------- the trial process
class Diverged(Exception):
    """Training produced non-finite losses or weights."""


def train_trial(agent: type | str, env_id: str, hyperparameters: Mapping[str, Any], trial_steps: int,
                n_reports: int, eval_episodes: int) -> Iterator[tuple[int, float]]:
    """Train one trial's agent, built as ``xagents train`` builds it, yielding ``(step, value)``.

    Values come every ``trial_steps / n_reports`` steps, at nominal steps that are the same for
    every trial so the pruner compares like with like: the mean training reward of the last
    ``reward_buffer_size`` episodes, or the mean of ``eval_episodes`` deterministic episodes.
    Reports before any episode has finished are skipped.

    Raises:
        Diverged: A loss or a weight is not finite.
    """
    if isinstance(agent, str):  # 'module:Class', as the parent sends it to a trial's process
        module, _, name = agent.partition(':')
        agent = getattr(importlib.import_module(module), name)
    instance, run = agent.from_env(env_id, **hyperparameters), None
    try:
        for report in range(1, n_reports + 1):
            step = trial_steps * report // n_reports
            try:
                if run is None or instance.steps < step:
                    run = instance.fit(max_steps=step, total=True, quiet=True)
            except Exception as error:  # NaN weights surface as errors (e.g. NaN probabilities)
                if _weights_finite(instance) and not isinstance(error, NonFiniteError):
                    raise
                raise Diverged(f'non-finite weights after {instance.steps} steps ({_one_line(error)})') from None
            bad = [name for name, value in run.metrics.items() if not np.isfinite(float(value))]
            if bad or not _weights_finite(instance):
                raise Diverged(f'non-finite {", ".join(bad) or "weights"} after {instance.steps} steps')
            value = instance.evaluate(episodes=eval_episodes).mean if eval_episodes else run.mean_reward
            if np.isfinite(value):
                yield step, float(value)
    finally:
        instance.envs.close()


def _weights_finite(instance) -> bool:
    return all(np.isfinite(weights).all() for model in instance.models.values() for weights in model.get_weights())


def _trial_process() -> None:
    """Entry of a trial's process: a JSON spec on stdin, JSON lines on stdout."""
    channel = os.fdopen(os.dup(1), 'w', buffering=1)
    os.dup2(2, 1)  # whatever else writes to stdout lands in the captured stderr, not the channel
    spec = json.load(sys.stdin)

    def send(**message) -> None:
        channel.write(json.dumps(message) + '\n')

    try:
        for step, value in train_trial(**spec):
            send(step=step, value=value)
        send(done=True)
    except Diverged as error:
        send(diverged=str(error))
    except BrokenPipeError:  # the parent is gone
        raise SystemExit(1)
    except Exception as error:
        send(error=_one_line(error))
        raise SystemExit(1)


if __name__ == '__main__':
    _trial_process()
