"""xagents tune: search spaces of every agent, the embedded study and its resume, pruning,
bad input, storages that are not a study's, and two workers sharing one PostgreSQL study."""
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from xagents.app.cli import tune_parser
from xagents.registry import AGENTS, agent_class
from xagents.app import search_space as search_space_module
from xagents.app import study, tuning

TINY = ['--env', 'CartPole-v1', '--trial-steps', '2000', '--n-reports', '2']
ONE_SHORT_TRIAL = ['--env', 'CartPole-v1', '--trial-steps', '500', '--n-reports', '1', '--n-trials', '1']
POSTGRES_URL = os.environ.get('XAGENTS_TEST_POSTGRES_URL',
                              'postgresql://xagents:tune-secret@127.0.0.1:5432/xagents_tests')


@pytest.mark.parametrize('agent', AGENTS)
def test_every_agent_declares_tunable_flags_that_parse(agent, xagents_cli):
    klass = agent_class(agent)
    flags, scales = search_space_module.hyperparameter_flags(klass), search_space_module.tunable(klass)
    assert 'lr' in scales and scales['lr'] == 'log'
    for name, scale in scales.items():
        flag = flags[name]
        if scale == 'categorical':
            words = {'bool': ['true', 'false'], 'str': ['a.cfg', 'b.cfg']}.get(flag.kind, ['1', '2', '3'])
            expected = CategoricalDistribution(tuple(search_space_module._convert(flag, word) for word in words))
        else:
            words = ['2', '8'] if flag.kind == 'int' else ['0.01', '0.5']
            kind = IntDistribution if flag.kind == 'int' else FloatDistribution
            expected = kind(float(words[0]), float(words[1]), log=scale == 'log')
        space = search_space_module.search_space(klass, {name: search_space_module.cli_search_value(flag, words)})
        assert space.distributions == {name: expected}, name
        assert space.fixed == {}
    # one value fixes any flag; comma-separated values are choices even when there are two
    words = {'lr': ['1e-3', '1e-2'], 'gamma': ['0.98'], 'n_envs': ['4,8']}
    space = search_space_module.search_space(klass, {name: search_space_module.cli_search_value(flags[name], value) for name, value in words.items()})
    assert space.fixed == {'gamma': 0.98}
    assert space.distributions == {'lr': FloatDistribution(1e-3, 1e-2, log=True),
                                   'n_envs': CategoricalDistribution((4, 8))}
    status, out, _ = xagents_cli('tune', agent)
    assert status == 0
    helps = {action.dest: action.help for action in tune_parser(agent)._actions
             if action.help != '==SUPPRESS=='}  # not the hidden old names of renamed flags
    for name, scale in scales.items():
        assert f'{flags[name].option} ' in out and f'[{search_space_module.SCALES[scale]}]' in helps[name], name


@pytest.mark.parametrize('search, message', [
    ({'lr': ('1e-2', '1e-4')}, 'expected MIN <= MAX for --lr, got 0.01 > 0.0001'),
    ({'lr': ('a', 'b')}, "expected a number for --lr MIN MAX, got 'a'"),
    ({'beta1': ('0.8', '0.9')}, 'expected one value for --beta1, which is not tunable'),
    ({'beta1': ['0.8', '0.9', '0.95']}, 'expected one value for --beta1, which is not tunable'),
    ({'nonsense': '1', 'lr': ('1e-4', '1e-2')}, "expected a ppo hyperparameter, got 'nonsense'"),
    ({'entropy_coef': ('0', '1e-2')}, 'expected MIN > 0 for --entropy-coef (searched log-uniformly), got 0.0'),
    ({'lr': ('0', '1e-2')}, 'expected lr > 0, got 0.0'),
    ({'n_steps': ('16', '64.5')}, "expected an integer for --n-steps MIN MAX, got '64.5'"),
    ({'normalize_advantages': ('true', 'false')}, 'expected choices for --normalize-advantages'),
    ({'normalize_advantages': ['true', 'maybe']}, "expected true or false for --normalize-advantages, got 'maybe'"),
    ({'n_steps': ['32', '32', '64']}, 'expected distinct choices for --n-steps'),
    ({'lr': '1e-3'}, 'expected a hyperparameter to search'),
])
def test_bad_search_spaces_are_refused(search, message):
    with pytest.raises(ValueError) as error:
        search_space_module.search_space(agent_class('ppo'), search)
    assert message in str(error.value)


def test_agent_without_cli_module_cannot_be_tuned(tmp_path, monkeypatch, xagents_cli):
    package = tmp_path / 'nope'  # an agent package with no cli.py
    package.mkdir()
    (package / '__init__.py').write_text('')
    (package / 'agent.py').write_text('from xagents.ppo import PPO\n\n\nclass NOPE(PPO):\n    pass\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(AGENTS, 'nope', 'nope.agent:NOPE')
    status, _, err = xagents_cli('tune', 'nope')
    assert status == 2
    assert err == 'xagents tune nope: error: nope cannot be tuned: expected nope/cli.py declaring ' \
                  'its TUNABLE hyperparameters, found none\n'


@pytest.mark.backends
def test_embedded_study_resumes_and_its_best_command_trains(workdir, xagents_cli):
    argv = ['tune', 'ppo', *TINY, '--lr', '1e-3', '3e-3', '--n-steps', '32,64']
    status, out, err = xagents_cli(*argv, '--n-trials', '2', '--plot', 'plots')
    assert status == 0, err
    journal = workdir / 'ppo-CartPole-v1.journal.log'
    assert journal.is_file()
    assert 'trial 0 COMPLETE value' in out and 'trial 1 COMPLETE value' in out
    assert sorted(os.listdir('plots')) == ['optimization_history.png', 'parallel_coordinate.png',
                                          'param_importances.png']

    status, out, err = xagents_cli(*argv, '--n-trials', '1')  # the same command again
    assert status == 0, err
    assert 'trial 2 COMPLETE value' in out and 'trial 3' not in out
    study = optuna.load_study(study_name='ppo-CartPole-v1', storage=JournalStorage(JournalFileBackend(str(journal))))
    assert [trial.number for trial in study.trials] == [0, 1, 2]
    assert all(trial.state == TrialState.COMPLETE for trial in study.trials)
    assert all(len(trial.intermediate_values) == 2 for trial in study.trials)
    command = next(line for line in out.splitlines() if 'train it: ' in line).split('train it: ')[1]
    best = study.best_trial
    assert command == best.user_attrs['command']
    assert f'--lr {best.params["lr"]!r}' in command and f'--n-steps {best.params["n_steps"]}' in command
    assert f'--seed {best.number}' in command and '--max-steps 2000' in command

    words = shlex.split(command)
    assert words[:2] == ['xagents', 'train']
    status, out, err = xagents_cli(*words[1:])
    assert status == 0, err
    assert 'Maximum steps (2000) reached' in out


def test_trial_reporting_a_bad_value_early_is_pruned(workdir):
    storage = JournalStorage(JournalFileBackend(str(workdir / 'prune.journal.log')))
    study = optuna.create_study(study_name='prune', storage=storage, direction='maximize')
    study.set_user_attr('agent', 'ppo')
    study.set_user_attr('env', 'CartPole-v1')
    for _ in range(3):  # earlier trials that reached the maximum reward at every report
        study.add_trial(optuna.trial.create_trial(
            params={'lr': 1e-3}, distributions={'lr': FloatDistribution(1e-8, 1e-2, log=True)},
            value=500.0, intermediate_values={1000: 500.0, 2000: 500.0},
        ))
    tuning.tune(agent_class('ppo'), 'CartPole-v1', {'lr': (1e-8, 1e-7)}, study='prune', n_trials=1, trial_steps=2000,
                n_reports=2, warmup_trials=2)  # this lr learns nothing: ~20 reward per episode
    trial = study.trials[3]
    assert trial.state == TrialState.PRUNED
    assert list(trial.intermediate_values) == [1000]  # stopped at its first report
    assert trial.intermediate_values[1000] < 100
    assert trial.user_attrs['note'] == 'pruned at step 1000'


def test_diverging_training_raises_diverged_for_the_parent_to_prune():
    # value_loss_coef * value loss overflows float32: infinite gradients, then NaN weights and losses
    trial = tuning.train_trial(agent_class('ppo'), 'CartPole-v1', {'value_loss_coef': 1e38, 'seed': 0}, trial_steps=2000,
                               n_reports=2, eval_episodes=0)
    with pytest.raises(tuning.Diverged, match=r'^non-finite losses after 256 steps: the update at env step 256 made '
                                              r'\w+_loss nan: the weights diverged'):
        next(trial)


def test_ctrl_c_stops_cleanly_leaving_completed_trials_and_no_running_one(workdir, xagents_command):
    argv = xagents_command + ['tune', 'ppo', '--env', 'CartPole-v1', '--trial-steps', '4000',
            '--n-reports', '2', '--n-trials', '3', '--lr', '1e-4', '1e-2']
    # A shell starts background jobs with SIGINT ignored, and the child would inherit that: restore it.
    search = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in search.stdout:  # interrupt while trial 1 is under way (its process takes seconds to start)
        lines.append(line)
        if line.startswith('trial 0 '):
            time.sleep(1)
            search.send_signal(signal.SIGINT)
            break
    output = ''.join(lines) + search.communicate(timeout=60)[0]
    assert search.returncode == 130, output
    assert 'trial 1 FAIL' in output and ': interrupted' in output
    in_workdir = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            if int(pid) != os.getpid() and os.readlink(f'/proc/{pid}/cwd') == str(workdir):
                in_workdir.append(pid)
        except OSError:
            pass
    assert in_workdir == []  # the trial's process was killed with the search
    storage = JournalStorage(JournalFileBackend(str(workdir / 'ppo-CartPole-v1.journal.log')))
    study = optuna.load_study(study_name='ppo-CartPole-v1', storage=storage)
    assert [(trial.number, trial.state) for trial in study.trials] == [(0, TrialState.COMPLETE), (1, TrialState.FAIL)]
    assert study.trials[1].user_attrs['note'] == 'interrupted'


@pytest.fixture
def existing_study(workdir):
    """A study file made by an earlier search of lr (log range) and n_steps (choices 32, 64), with
    --grad-norm 0.7."""
    storage = JournalStorage(JournalFileBackend(str(workdir / 'ppo-CartPole-v1.journal.log')))
    study = optuna.create_study(study_name='ppo-CartPole-v1', storage=storage, direction='maximize')
    study.set_user_attr('agent', 'ppo')
    study.set_user_attr('env', 'CartPole-v1')
    study.set_user_attr('trial_steps', 2000)
    study.set_user_attr('fixed', {'grad_norm': 0.7})
    study.add_trial(optuna.trial.create_trial(
        params={'lr': 1e-3, 'n_steps': 32}, value=100.0,
        distributions={'lr': FloatDistribution(1e-4, 1e-2, log=True), 'n_steps': CategoricalDistribution((32, 64))},
    ))
    return workdir / 'ppo-CartPole-v1.journal.log'


@pytest.mark.parametrize('flags, message', [
    (['--lr', '1e-2', '1e-4'], 'expected MIN <= MAX for --lr, got 0.01 > 0.0001'),
    (['--lr', 'a', 'b'], "expected a number for --lr MIN MAX, got 'a'"),
    (['--lr', '1e-4', '1e-2', '--beta1', '0.8', '0.9'], 'expected one value for --beta1, which is not tunable'),
    (['--lr', '1e-4', '1e-2', '--no-such-flag', '1'], 'unrecognized arguments: --no-such-flag 1'),
    (['--lr', '1e-4', '1e-2', '--storage', 'postgresql://someone:hunter2@127.0.0.1:1/db'],
     'cannot open storage postgresql://someone:***@127.0.0.1:1/db: OperationalError'),
    (['--lr', '1e-4', '1e-2', '--storage', 'postgres//someone:hunter2@localhost/db'],
     "expected a storage URL like postgresql://user@host/db or mysql://user@host/db, got 'postgres//someone:***@localhost/db'"),
    (['--lr', '1e-4', '1e-2', '--storage', 'nosuchdb://someone:hunter2@localhost/db'],
     "got 'nosuchdb://someone:***@localhost/db'"),
    (['--n-steps', '32', '64', '128'], "study 'ppo-CartPole-v1' searched --n-steps as choices 32,64, got choices "),
    (['--lr', '1e-4', '1e-2', '--trial-steps', '1000'],
     "study 'ppo-CartPole-v1' scored its trials with --trial-steps 2000, got 1000: keep it, or choose another --study"),
    (['--lr', '1e-4', '1e-2', '--grad-norm', '0.7', '--gamma', '0.9'],
     ("study 'ppo-CartPole-v1' trained its trials with no --gamma (its default: 0.98), got --gamma 0.9: "
      'resume it with the same flags, or choose another --study')),
    (['--lr', '1e-4', '1e-2', '--grad-norm', '0.5'],
     "study 'ppo-CartPole-v1' trained its trials with --grad-norm 0.7, got --grad-norm 0.5: resume it"),
    (['--lr', '1e-4', '1e-2'], "study 'ppo-CartPole-v1' trained its trials with --grad-norm 0.7, got no --grad-norm"),
    (['--lr', '1e-4', '1e-2', '--grad-norm', '0.5', '1'],
     'with --grad-norm 0.7, got --grad-norm searched as a log-uniform range: resume it'),
    (['--lr', '1e-3', '--grad-norm', '0.7', '--n-steps', '32,64'],
     "study 'ppo-CartPole-v1' trained its trials with --lr searched as a log-uniform range, got --lr 0.001: resume"),
    (['--lr', '1e-4', '1e-2', '--pruner', 'sometimes'], "expected pruner median, halving, none, got 'sometimes'"),
    (['--lr', '1e-4', '1e-2', '--env', 'NoSuchEnv-v0'], "unknown environment id 'NoSuchEnv-v0'"),
    (['--lr', '1e-4', '1e-2', '--clip-range', '-1'], 'expected clip_range > 0, got -1.0'),
    (['--lr', '1e-4', '1e-2', '--gamma', '0.9', '1.2'], 'expected 0 <= gamma <= 1, got 1.2'),
    (['--lr', '1e-4', '1e-2', '--n-envs', '0,4'], 'expected n_envs >= 1, got 0'),
    (['--lr', '1e-4', '1e-2', '--plot', 'ppo-CartPole-v1.journal.log'],
     'ppo-CartPole-v1.journal.log is not a directory'),
])
def test_bad_input_is_one_line_status_2_and_leaves_the_study_untouched(existing_study, xagents_cli, flags, message):
    before = existing_study.read_bytes()
    status, _, err = xagents_cli('tune', 'ppo', *TINY, '--n-trials', '1', *flags)  # a regression trains one trial
    assert status == 2
    assert err.count('\n') == 1 and err.startswith('xagents tune ppo: error: '), err
    assert message in err
    assert 'hunter2' not in err
    assert existing_study.read_bytes() == before


def test_a_study_resumed_with_the_same_fixed_values_runs_and_with_others_is_refused(workdir, xagents_cli):
    status, _, err = xagents_cli('tune', 'ppo', *ONE_SHORT_TRIAL, '--lr', '1e-4', '1e-2', '--gamma', '0.95')
    assert status == 0, err
    journal = workdir / 'ppo-CartPole-v1.journal.log'
    before = journal.read_bytes()
    status, _, err = xagents_cli('tune', 'ppo', *ONE_SHORT_TRIAL, '--lr', '1e-4', '1e-2', '--gamma', '0.9')
    assert (status, err) == (2, "xagents tune ppo: error: study 'ppo-CartPole-v1' trained its trials with --gamma "
                                '0.95, got --gamma 0.9: resume it with the same flags, or choose another --study\n')
    assert journal.read_bytes() == before
    # --lam 0.8 is CartPole's default: the same setting as no --lam
    status, out, err = xagents_cli('tune', 'ppo', *ONE_SHORT_TRIAL, '--lr', '1e-4', '1e-2', '--gamma', '0.95',
                                   '--lam', '0.8')
    assert status == 0, err
    assert 'trial 1 COMPLETE' in out


def test_a_sqlite_file_of_another_application_is_refused_before_anything_is_written(workdir, xagents_cli):
    with sqlite3.connect('app.db') as connection:
        connection.execute('CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)')
        connection.execute("INSERT INTO users VALUES (1, 'ada')")
    connection.close()
    before = (workdir / 'app.db').read_bytes()
    status, _, err = xagents_cli('tune', 'ppo', *ONE_SHORT_TRIAL, '--lr', '1e-4', '1e-2',
                                 '--storage', 'sqlite:///app.db')
    assert (status, err) == (2, 'xagents tune ppo: error: expected an Optuna database at sqlite:///app.db, got a '
                                'SQLite file of another application (users): give a new file, e.g. '
                                'sqlite:///app-optuna.db\n')
    assert (workdir / 'app.db').read_bytes() == before
    assert os.listdir(workdir) == ['app.db']  # no journal or lock file beside it either


def sqlite_file(path, *statements, wal=False):
    with sqlite3.connect(path) as connection:
        if wal:
            connection.execute('PRAGMA journal_mode=WAL')
        for statement in statements:
            connection.execute(statement)
    connection.close()


OTHER_APPLICATION = 'got a SQLite file of another application'
SQLITE_SHAPES = {  # name: (how to make app.db, what the one line says after 'expected an Optuna database at ...')
    'tables-named-as-optunas-with-its-own-alembic-revision': (
        lambda path: sqlite_file(path, 'CREATE TABLE studies (id INTEGER PRIMARY KEY, title TEXT)',
                                 'CREATE TABLE trials (id INTEGER PRIMARY KEY, study INTEGER)',
                                 'CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)',
                                 "INSERT INTO alembic_version VALUES ('4f2e9a1b7c3d')"),
        f'{OTHER_APPLICATION} (studies, trials, alembic revision 4f2e9a1b7c3d)'),
    'foreign-tables-and-an-alembic-version': (
        lambda path: sqlite_file(path, 'CREATE TABLE users (id INTEGER PRIMARY KEY)',
                                 'CREATE TABLE orders (id INTEGER PRIMARY KEY, user INTEGER)',
                                 'CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)',
                                 "INSERT INTO alembic_version VALUES ('4f2e9a1b7c3d')"),
        f'{OTHER_APPLICATION} (orders, users, alembic revision 4f2e9a1b7c3d)'),
    'one-foreign-table-in-wal-mode': (
        lambda path: sqlite_file(path, 'CREATE TABLE users (id INTEGER PRIMARY KEY)', wal=True),
        f'{OTHER_APPLICATION} (users)'),
    'no-tables-and-a-user-version': (lambda path: sqlite_file(path, 'PRAGMA user_version = 3'),
                                     f'{OTHER_APPLICATION} (user_version 3)'),
    'a-view': (lambda path: sqlite_file(path, 'CREATE VIEW answer AS SELECT 42'), f'{OTHER_APPLICATION} (view answer)'),
    'not-sqlite': (lambda path: path.write_text('name,score\nada,3\n' * 50),
                   'got a file SQLite cannot read (file is not a database)'),
    'read-only': (lambda path: (sqlite_file(path, 'CREATE TABLE users (id INTEGER PRIMARY KEY)'), path.chmod(0o444)),
                  f'{OTHER_APPLICATION} (users)'),
    'a-directory': (lambda path: (path.mkdir(), (path / 'inside').write_text('kept')), 'got a directory'),
}


@pytest.mark.parametrize('shape', SQLITE_SHAPES)
def test_a_sqlite_path_that_is_no_optuna_database_is_refused_in_one_line_and_left_byte_identical(
        workdir, xagents_cli, shape):
    make, says = SQLITE_SHAPES[shape]
    make(workdir / 'app.db')
    before = {path: path.stat().st_mode if path.is_dir() else path.read_bytes() for path in workdir.rglob('*')}
    status, _, err = xagents_cli('tune', 'ppo', *ONE_SHORT_TRIAL, '--lr', '1e-4', '1e-2',
                                 '--storage', 'sqlite:///app.db')
    assert (status, err) == (2, f'xagents tune ppo: error: expected an Optuna database at sqlite:///app.db, {says}: '
                                'give a new file, e.g. sqlite:///app-optuna.db\n')
    assert {path: path.stat().st_mode if path.is_dir() else path.read_bytes() for path in workdir.rglob('*')} == before


def test_an_empty_sqlite_file_becomes_an_optuna_study(workdir, xagents_cli):
    (workdir / 'study.db').touch()
    status, _, err = xagents_cli('tune', 'ppo', *ONE_SHORT_TRIAL, '--lr', '1e-4', '1e-2',
                                 '--storage', 'sqlite:///study.db')
    assert status == 0, err
    study.check_sqlite('sqlite:///study.db', 'study.db')  # the Optuna-made file passes its own check
    made = optuna.load_study(study_name='ppo-CartPole-v1', storage='sqlite:///study.db')
    assert [trial.state for trial in made.trials] == [TrialState.COMPLETE]


def test_a_journal_path_that_is_a_directory_is_one_line(workdir, xagents_cli):
    (workdir / 'ppo-CartPole-v1.journal.log').mkdir()
    status, _, err = xagents_cli('tune', 'ppo', *ONE_SHORT_TRIAL, '--lr', '1e-4', '1e-2')
    assert (status, err) == (2, f'xagents tune ppo: error: cannot use {workdir}/ppo-CartPole-v1.journal.log as the '
                                'study journal: Is a directory (move it, or choose another --study)\n')
    assert os.listdir(workdir / 'ppo-CartPole-v1.journal.log') == []


@pytest.mark.parametrize('damage', [b'\0' * 40, b'[1, 2]', b'{"op_code": 5, "worker_id": "x", "tri'],
                         ids=['zeroed', 'json-but-no-record', 'cut-short'])
def test_a_journal_damaged_before_its_last_line_is_refused_and_left_as_it_is(existing_study, xagents_cli, damage):
    lines = existing_study.read_bytes().splitlines(keepends=True)
    lines[2] = damage + b'\n'
    existing_study.write_bytes(b''.join(lines) + b'{"op_code": 5, "wor')  # and a last record torn by a kill
    before = existing_study.read_bytes()
    status, _, err = xagents_cli('tune', 'ppo', *ONE_SHORT_TRIAL, '--lr', '1e-4', '1e-2', '--grad-norm', '0.7')
    assert (status, err) == (2, f'xagents tune ppo: error: expected an Optuna journal in {existing_study}, got a '
                                'damaged record at line 3: restore the file from a copy, or choose another --study '
                                '(the file was left as it is)\n')
    assert existing_study.read_bytes() == before


@pytest.fixture
def postgres_url():
    """The test database of .ci/postgres.sh; skipped only when no server answers there.

    When XAGENTS_TEST_POSTGRES_URL is set (as CI does after running the script), an unreachable
    server fails the test instead.
    """
    import psycopg2

    try:
        psycopg2.connect(POSTGRES_URL, connect_timeout=5).close()
    except psycopg2.OperationalError as error:
        reason = f'no PostgreSQL at {study.mask_url(POSTGRES_URL)} (run .ci/postgres.sh): {error}'.strip()
        if 'XAGENTS_TEST_POSTGRES_URL' in os.environ:
            pytest.fail(reason)
        pytest.skip(reason)
    return POSTGRES_URL


def test_two_workers_share_one_postgres_study_of_8_trials(workdir, postgres_url, xagents_command):
    name = f'test-{uuid.uuid4().hex[:12]}'
    argv = xagents_command + ['tune', 'ppo', *TINY, '--storage', postgres_url, '--study', name,
            '--n-trials', '8', '--warmup-trials', '2', '--lr', '1e-4', '1e-2']
    workers = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    try:
        outputs = [worker.communicate(timeout=400)[0] for worker in workers]
        assert [worker.returncode for worker in workers] == [0, 0], outputs
        storage = tuning.open_storage(postgres_url, name)[0]  # with an installed driver
        study = optuna.load_study(study_name=name, storage=storage)
        trials = study.get_trials()
        summary = [(trial.number, trial.state.name, trial.user_attrs) for trial in trials]
        finished = [trial for trial in trials if trial.state.is_finished()]
        assert sorted(trial.number for trial in finished) == list(range(8)), (summary, outputs)
        assert all(trial.state in (TrialState.COMPLETE, TrialState.PRUNED) for trial in finished), (summary, outputs)
        assert not [trial for trial in trials if not trial.state.is_finished()
                    and trial.state != TrialState.WAITING], summary  # nothing left RUNNING
        assert len({trial.user_attrs['worker'] for trial in finished}) == 2, summary  # both workers trained
        lines = [line for output in outputs for line in output.splitlines() if line.startswith('trial ')]
        assert sorted(int(line.split()[1]) for line in lines) == list(range(8)), outputs  # each reported once
        password = postgres_url.split('://', 1)[1].split('@')[0].partition(':')[2]
        assert not password or all(password not in output for output in outputs)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
        optuna.delete_study(study_name=name, storage=tuning.open_storage(postgres_url, name)[0])


def test_a_journal_whose_last_record_was_cut_by_a_kill_still_loads(existing_study, xagents_cli):
    whole = existing_study.read_bytes()
    with open(existing_study, 'ab') as file:
        file.write(b'{"op_code": 5, "worker_id": "x", "trial_id": 0, "par')  # a write cut short
    status, out, err = xagents_cli('tune', 'ppo', *TINY, '--lr', '1e-4', '1e-2', '--n-steps', '32,64',
                                   '--grad-norm', '0.7', '--n-trials', '2')
    assert status == 0, err
    assert 'ended with a partial record (52 bytes) from an interrupted write: dropped it' in out + err
    assert existing_study.read_bytes().startswith(whole)


def test_a_search_in_which_no_trial_completes_exits_with_status_1(workdir, xagents_cli):
    # value_loss_coef * value loss overflows float32: every trial diverges and is pruned
    status, out, err = xagents_cli('tune', 'ppo', *TINY, '--lr', '1e-4', '1e-2', '--value-loss-coef', '1e38',
                                   '--n-trials', '2', '--pruner', 'none')
    assert status == 1
    assert err == 'xagents tune ppo: error: no trial of study ppo-CartPole-v1 completed (2 failed or pruned)\n'


def test_a_python_script_shows_the_trial_lines_and_the_best(workdir):
    script = ("from xagents import PPO\n"
              "from xagents.app.tuning import tune\n"
              "tune(PPO, 'CartPole-v1', {'lr': (1e-4, 1e-2)}, n_trials=1, trial_steps=500, n_reports=1)\n")
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'trial 0 COMPLETE' in result.stdout and 'train it: xagents train ppo --env CartPole-v1' in result.stdout


# Opens a storage and its study as `xagents tune` does (study.open_storage, study.load_or_create_study) each time a
# line {"url": ..., "study": ...} comes in, at once in every worker; answers {"study_id": ...} or {"error": ...}.
OPENING_WORKER = '''
import json, sys
from xagents.app import study
print('ready', flush=True)
for line in sys.stdin:
    asked = json.loads(line)
    try:
        storage = study.open_storage(asked['url'], asked['study'])[0]
        answer = {'study_id': study.load_or_create_study(storage, asked['study'], None, None)._study_id}
    except Exception as error:
        answer = {'error': f'{type(error).__name__}: {error}'}
    print(json.dumps(answer), flush=True)
'''


def opened_together(storages: list[tuple[str | None, str]], workers: int = 6) -> list[list[dict]]:
    """Open each (url, study) of ``storages`` in ``workers`` processes at the same moment, one after another; return
    each one's answers."""
    processes = [subprocess.Popen([sys.executable, '-c', OPENING_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True) for _ in range(workers)]
    try:
        assert all(process.stdout.readline() == 'ready\n' for process in processes)  # imported: only opening is left
        answers = []
        for url, name in storages:
            line = json.dumps({'url': url, 'study': name}) + '\n'
            for process in processes:  # within a few milliseconds of each other
                process.stdin.write(line)
                process.stdin.flush()
            answers.append([json.loads(process.stdout.readline()) for process in processes])
        return answers
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_workers_started_together_on_a_new_postgres_database_all_open_one_study(postgres_url):
    import psycopg2

    schemas = [f'race_{uuid.uuid4().hex[:12]}' for _ in range(3)]  # each a brand-new, empty database for Optuna
    connection = psycopg2.connect(postgres_url)
    connection.autocommit = True
    try:
        for schema in schemas:
            connection.cursor().execute(f'CREATE SCHEMA {schema}')
        answers = opened_together([(f'{postgres_url}?options=-csearch_path%3D{schema}', 'together')
                                   for schema in schemas])
        for round_answers in answers:
            assert len({json.dumps(answer) for answer in round_answers}) == 1, round_answers  # the same study
            assert 'study_id' in round_answers[0], round_answers[0]
    finally:
        for schema in schemas:
            connection.cursor().execute(f'DROP SCHEMA IF EXISTS {schema} CASCADE')
        connection.close()


def test_workers_started_together_on_a_new_sqlite_file_or_journal_all_open_one_study(workdir):
    answers = opened_together([(f'sqlite:///{workdir}/new-{round}.db', 'together') for round in range(3)]
                              + [(None, 'together')])
    for round_answers in answers:
        assert len({json.dumps(answer) for answer in round_answers}) == 1, round_answers
        assert 'study_id' in round_answers[0], round_answers[0]


def test_a_journal_record_another_worker_is_writing_is_not_taken_for_a_torn_one(existing_study):
    import threading

    from optuna.storages.journal import JournalFileSymlinkLock

    record = b'{"op_code": 9, "worker_id": "w", "study_id": 0, "user_attr": {"note": "written by another worker"}}\n'
    lock = JournalFileSymlinkLock(str(existing_study))
    lock.acquire()  # as Optuna's writer holds it while it appends
    with open(existing_study, 'ab') as journal:
        journal.write(record[:40])
    repair = threading.Thread(target=study.repair_journal, args=(str(existing_study),))
    repair.start()
    repair.join(1.0)
    assert repair.is_alive()  # it waits for the writer
    with open(existing_study, 'ab') as journal:
        journal.write(record[40:])
    lock.release()
    repair.join(30)
    assert existing_study.read_bytes().endswith(b'\n' + record)
