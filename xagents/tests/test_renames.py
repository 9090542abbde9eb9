"""Renamed parameters keep working under their old names for one release, with a one-line notice."""
from __future__ import annotations

import inspect
import logging

import pytest

from xagents import ACER, DQN, PPO
from xagents.utils.validation import RENAMED


@pytest.mark.parametrize('agent_class, old, value, new', [
    (PPO, 'clip_norm', 0.3, 'clip_range'),
    (PPO, 'divergence_monitoring_steps', 500, 'plateau_start_steps'),
    (ACER, 'replay_start', 7, 'buffer_initial_size'),  # over CartPole's tuned 50
    (DQN, 'n_steps', 3, 'return_steps'),
])
def test_an_old_parameter_name_sets_the_new_one_with_a_notice(caplog, agent_class, old, value, new):
    with caplog.at_level(logging.WARNING, logger='xagents'):
        agent = agent_class.from_env('CartPole-v1', n_envs=2, quiet=True, **{old: value})
    assert (agent.run_defaults[new] if new in agent.run_defaults else getattr(agent, new)) == value  # (fit's, or the agent's)
    notices = [record.getMessage() for record in caplog.records if 'deprecated' in record.getMessage()]
    assert notices == [f'{agent_class.__name__}: {old} is deprecated, use {new} (the old name goes in the next release)']


def test_the_constructor_itself_takes_old_names():
    import gymnasium as gym
    assert PPO(gym.make('CartPole-v1'), clip_norm=0.25, quiet=True).clip_range == 0.25


def test_a_current_name_is_never_renamed():
    """On-policy n_steps is the rollout length, not an old name of return_steps."""
    assert PPO.from_env('CartPole-v1', n_envs=2, n_steps=64, quiet=True).n_steps == 64
    assert not hasattr(PPO.from_env('CartPole-v1', n_envs=2, quiet=True), 'return_steps')


@pytest.mark.parametrize('argv, old, new', [
    (['ppo', '--env', 'CartPole-v1', '--clip-norm', '0.3'], '--clip-norm', '--clip-range'),
    (['dqn', '--env', 'CartPole-v1', '--n-steps', '3'], '--n-steps', '--return-steps'),
    (['acer', '--env', 'CartPole-v1', '--replay-start', '7'], '--replay-start', '--buffer-initial-size'),
])
def test_an_old_flag_trains_with_a_one_line_notice(workdir, xagents_cli, argv, old, new):
    status, out, err = xagents_cli('train', *argv, '--max-steps', '200', '--n-envs', '2')
    assert status == 0, err
    assert f'{old} is deprecated, use {new} (the old name goes in the next release)' in err
    assert len([line for line in err.splitlines() if 'deprecated' in line]) == 1


def test_old_flags_are_hidden_from_help_and_bad_values_still_refused(xagents_cli):
    status, out, _ = xagents_cli('train', 'ppo')
    assert status == 0 and '--clip-range' in out and '--clip-norm' not in out
    status, _, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--clip-norm', '-1')
    assert status == 2 and err.splitlines()[-1].endswith('expected clip_range > 0, got -1.0')


def test_tune_takes_an_old_flag(workdir, xagents_cli):
    status, out, err = xagents_cli('tune', 'ppo', '--env', 'CartPole-v1', '--n-trials', '1', '--trial-steps', '256',
                                   '--n-envs', '2', '--clip-norm', '0.1', '0.3')
    assert status == 0, err
    assert '--clip-norm is deprecated, use --clip-range' in err


def test_every_new_name_is_a_parameter_of_some_agent():
    import xagents
    names = set().union(*(getattr(xagents, name).parameter_names() for name in xagents.__all__
                          if hasattr(getattr(xagents, name), 'parameter_names')), inspect.signature(xagents.PPO.fit).parameters)
    assert set(RENAMED.values()) <= names and not set(RENAMED) - {'n_steps'} & names


@pytest.mark.parametrize('order', ['old first', 'new first'])
def test_an_old_name_with_its_new_one_is_refused_in_python_and_on_the_command_line(xagents_cli, order):
    with pytest.raises(ValueError, match='n_steps is the old name of return_steps: give one of them, not both'):
        DQN.from_env('CartPole-v1', quiet=True, n_steps=3, return_steps=2)
    flags = [['--n-steps', '3'], ['--return-steps', '2']]
    argv = [word for pair in (flags if order == 'old first' else flags[::-1]) for word in pair]
    status, _, err = xagents_cli('train', 'dqn', '--env', 'CartPole-v1', '--max-steps', '10', *argv)
    assert status == 2 and err == ('xagents train dqn: error: --n-steps is the old name of --return-steps: give one '
                                   'of them, not both\n')
