"""The Optuna side of ``xagents tune``: storages (a local journal file, or a database shared by machines), checked
before anything is written to them, and studies that keep the settings they were made with."""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import json
import logging
import os
import random
import re
import shlex
import sqlite3
import time
import urllib.parse
import warnings
from typing import Any, Callable, Mapping, TypeVar

import optuna
import sqlalchemy
from optuna.distributions import (BaseDistribution, CategoricalDistribution, check_distribution_compatibility)
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages._rdb import models as optuna_models
from optuna.storages._rdb.models import BaseModel as OptunaTables
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

from xagents.utils.extras import install_command
from xagents.app.flags import Flag
from xagents.app.search_space import SearchSpace, agent_name, flag_words, hyperparameter_flags

logger = logging.getLogger(__name__)

DRIVERS = {'postgresql': (('psycopg2', 'psycopg2'), ('psycopg', 'psycopg')),
           'mysql': (('MySQLdb', 'mysqldb'), ('pymysql', 'pymysql'))}
SAMPLERS = ('tpe', 'random')
PRUNERS = ('median', 'halving', 'none')
TARGET_ATTR = 'target_trials'
HEARTBEAT_INTERVAL = 30  # seconds between heartbeats of a running trial (RDB storages)
GRACE_PERIOD = 120  # seconds without a heartbeat after which another worker fails the trial
CREATION_TRIES = 8  # tries at opening a storage or study that other workers create at the same moment (~4 s in all)
T = TypeVar('T')


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

    def rdb_storage() -> RDBStorage:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', optuna.exceptions.ExperimentalWarning)
            return RDBStorage(url, heartbeat_interval=HEARTBEAT_INTERVAL, grace_period=GRACE_PERIOD,
                              engine_kwargs={'connect_args': {'connect_timeout': 10}} if backend != 'sqlite' else {})

    try:  # workers started together on a new database each create its tables, version rows and alembic stamp
        storage = retried_creation(rdb_storage)
    except Exception as error:  # any driver or connection error: a one-line message, password hidden
        message = mask_url(one_line(error))
        if password and password.group(1):
            message = message.replace(password.group(1), '***')
        raise ValueError(f'cannot open storage {shown}: {message}') from None
    return storage, shown


def creation_race(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a worker losing a race to another creating the same tables, types,
    version rows, alembic stamp or study at the same moment: opening again finds what the other made. A database
    that cannot be reached, refuses the login or lacks a permission is no race."""
    while error is not None:
        if isinstance(error, (sqlalchemy.exc.IntegrityError, optuna.exceptions.DuplicatedStudyError)):
            return True
        if isinstance(error, sqlalchemy.exc.DBAPIError) and re.search(
                r'already exists|deadlock detected|database is locked|could not serialize', str(error.orig), re.I):
            return True  # PostgreSQL's "relation/type ... already exists", SQLite's "table ... already exists"
        error = error.__cause__ or error.__context__
    return False


def retried_creation(action: Callable[[], T]) -> T:
    """``action()``, tried again after a short random pause (growing to 1 s, :data:`CREATION_TRIES` tries) while it
    loses a creation race (:func:`creation_race`); any other error at once."""
    for attempt in range(CREATION_TRIES):
        try:
            return action()
        except Exception as error:
            if attempt == CREATION_TRIES - 1 or not creation_race(error):
                raise
            logger.debug('opening again after a creation race: %s', one_line(error))
            time.sleep(random.uniform(0.5, 1.5) * min(0.05 * 2 ** attempt, 1.0))
    raise AssertionError('unreachable')


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
    return f'a record Optuna cannot replay ({one_line(error)})'


def check_sqlite(url: str, shown: str) -> None:
    """Refuse, before Optuna writes to it, a SQLite path that is not a database Optuna made: another application's
    (tables or views of its own, tables named as Optuna's but not of its schema, another alembic revision, an
    application id or user version), a file SQLite cannot read, a directory, or a file this user cannot write.

    The file is only read: nothing is made beside it either (a WAL database that no program has open is read as
    immutable, else SQLite would leave its -wal and -shm files). A missing file, an empty one, or an empty database
    becomes the study.
    """
    path = sqlalchemy.engine.make_url(url).database
    if not path or path == ':memory:' or not os.path.exists(path):
        return
    fix = f'give a new file, e.g. sqlite:///{os.path.splitext(path.rstrip(os.sep))[0]}-optuna.db'
    if os.path.isdir(path):
        raise ValueError(f'expected an Optuna database at {shown}, got a directory: {fix}')
    if not os.access(path, os.R_OK | os.W_OK) or not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
        raise ValueError(f'cannot write the SQLite file {shown} (read-only, or in a read-only directory): {fix}')
    with open(path, 'rb') as file:
        header = file.read(20)
    closed_wal = (header[:16] == b'SQLite format 3\0' and header[18:20] == b'\2\2'
                  and not any(os.path.exists(path + suffix) for suffix in ('-wal', '-shm')))
    try:
        uri = f'file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro' + ('&immutable=1' if closed_wal else '')
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as connection:
            objects = connection.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
                                         " AND type IN ('table', 'view', 'trigger')").fetchall()
            columns = {name: {column for column, in connection.execute('SELECT name FROM pragma_table_info(?)',
                                                                        (name,))}
                       for kind, name in objects if kind == 'table'}
            marks = [f'{pragma} {value}' for pragma in ('application_id', 'user_version')
                     for value, in connection.execute(f'PRAGMA {pragma}') if value]
            revisions = ({revision for revision, in connection.execute('SELECT version_num FROM alembic_version')}
                         if columns.get('alembic_version') == {'version_num'} else set())
    except sqlite3.Error as error:
        raise ValueError(f'expected an Optuna database at {shown}, got a file SQLite cannot read ({error}): '
                         f'{fix}') from None
    others = sorted(f'{kind} {name}' if kind != 'table' else name for kind, name in objects
                    if kind != 'table' or not _optuna_table(name, columns[name]))
    others += [f'alembic revision {revision}' for revision in sorted(revisions - optuna_revisions())] + marks
    if others:
        listed = ', '.join(others[:3]) + (', ...' if len(others) > 3 else '')
        raise ValueError(f'expected an Optuna database at {shown}, got a SQLite file of another application '
                         f'({listed}): {fix}')


def _optuna_table(name: str, columns: set[str]) -> bool:
    """Whether a table is Optuna's: one of its names, with its key columns (another application's ``studies`` or
    ``trials`` table has keys of its own)."""
    if name == 'alembic_version':
        return columns == {'version_num'}
    table = OptunaTables.metadata.tables.get(name)
    return table is not None and {column.name for column in table.primary_key} <= columns


@functools.lru_cache(maxsize=None)
def optuna_revisions() -> frozenset[str]:
    """The alembic revisions of Optuna's schema (its migration scripts): what an Optuna database's
    ``alembic_version`` holds, where another application's holds its own."""
    versions = os.path.join(os.path.dirname(optuna_models.__file__), 'alembic', 'versions')
    found = set()
    for name in os.listdir(versions):
        if name.endswith('.py'):
            with open(os.path.join(versions, name)) as script:
                found.update(re.findall(r'^revision\s*=\s*["\']([^"\']+)["\']', script.read(), re.MULTILINE))
    return frozenset(found)


def repair_journal(path: str) -> None:
    """Drop a partial last record, left when a process was killed while appending to the journal.

    Optuna writes one JSON record per line; without this, every later run fails to parse the file. A last line
    without its newline is judged under the lock Optuna's writers hold (``<path>.lock``): another worker's record
    still being written is left alone.
    """
    if not os.path.isfile(path) or not _partial_tail(path):
        return
    lock = JournalFileSymlinkLock(path)
    lock.acquire()
    try:
        tail = _partial_tail(path)
        if not tail:
            return
        try:
            json.loads(tail)
            with open(path, 'ab') as file:  # a whole record that only lacks its newline
                file.write(b'\n')
        except ValueError:
            os.truncate(path, os.path.getsize(path) - len(tail))
            logger.warning('%s ended with a partial record (%d bytes) from an interrupted write: dropped it',
                           path, len(tail))
    finally:
        lock.release()


def _partial_tail(path: str) -> bytes:
    """What follows the journal's last newline, where it is more than blanks."""
    with open(path, 'rb') as file:
        content = file.read()
    tail = content[content.rfind(b'\n') + 1:]
    return tail if tail.strip() else b''


def open_study(storage, name: str, agent: type, env_id: str, space: SearchSpace,
               sampler: optuna.samplers.BaseSampler, pruner: optuna.pruners.BasePruner,
               scoring: Mapping[str, int] | None = None) -> optuna.Study:
    """Load the study (checking it searches the same agent, env and distributions, fixes the other
    hyperparameters to the same values, and scores trials as ``scoring`` says: ``trial_steps``,
    ``eval_episodes``) or create it.

    Nothing is written to an existing study unless every check passes.
    """
    study = load_or_create_study(storage, name, sampler, pruner)
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


def load_or_create_study(storage, name: str, sampler: optuna.samplers.BaseSampler,
                         pruner: optuna.pruners.BasePruner) -> optuna.Study:
    """The study ``name`` of ``storage``, created (maximising one value) where it is missing; workers started at the
    same moment all get the one study."""
    def load_or_create() -> optuna.Study:
        try:
            return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
        except KeyError:
            return optuna.create_study(storage=storage, study_name=name, direction='maximize', sampler=sampler,
                                       pruner=pruner, load_if_exists=True)

    return retried_creation(load_or_create)


def _setting(flag: Flag, fixed: Mapping[str, Any], distributions: Mapping[str, BaseDistribution],
             default: Any) -> tuple[Any, str]:
    """How a study or a search sets ``flag`` (searched, given, or left to its default): the value or
    distribution, and how to show it."""
    if flag.name in distributions:
        return distributions[flag.name], f'{flag.option} searched as {_describe(distributions[flag.name])}'
    if flag.name in fixed:
        return fixed[flag.name], shlex.join(flag_words(flag.option, fixed[flag.name]))
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


def one_line(error: BaseException) -> str:
    """An error as one line: its last line for TensorFlow's (which open with 'in user code:'), else its first."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    # TensorFlow's errors open with 'in user code:' and end with the actual error
    return lines[-1] if lines[0].endswith(':') else f'{type(error).__name__}: {lines[0]}'
