"""Bad numbers are refused by one rule per kind of parameter, the same for every agent."""
from __future__ import annotations

import inspect

import pytest

import xagents
from xagents.agent.base import BaseAgent
from xagents.registry import AGENTS, agent_class
from xagents.app.flags import constructors
from xagents.envs.creation import create_envs
from xagents.utils.validation import KINDS, check_value

NAN, INF = 'nan', 'inf'
CARTPOLE = ['--env', 'CartPole-v1', '--max-steps', '100']
PENDULUM = ['--env', 'Pendulum-v1', '--max-steps', '100']


@pytest.mark.parametrize('argv, message', [
    (['ppo', *CARTPOLE, '--lr', NAN], 'expected a finite lr, got nan'),
    (['ppo', *CARTPOLE, '--lr', INF], 'expected a finite lr, got inf'),
    (['ppo', *CARTPOLE, '--gamma', '1.5'], 'expected 0 <= gamma <= 1, got 1.5'),
    (['a2c', *CARTPOLE, '--lam', '2'], 'expected 0 <= lam <= 1, got 2.0'),
    (['ppo', *CARTPOLE, '--entropy-coef', NAN], 'expected a finite entropy_coef, got nan'),
    (['a2c', *CARTPOLE, '--grad-norm', '-1'], 'expected grad_norm > 0, got -1.0'),
    (['ppo', *CARTPOLE, '--beta1', '2'], 'expected 0 <= beta1 < 1, got 2.0'),
    (['trpo', *CARTPOLE, '--plateau-reduce-factor', '-2'], 'expected 0 < plateau_reduce_factor <= 1, got -2.0'),
    (['ppo', *CARTPOLE, '--target-reward', NAN], 'expected a finite target_reward, got nan'),
    (['ddpg', '--env', 'Pendulum-v1', '--max-steps', '100', '--noise-type', 'ou_inf'],
     "argument --noise-type: expected a finite ou sigma > 0, got 'inf' in 'ou_inf'"),
    (['dqn', *CARTPOLE, '--epsilon-end', '-0.1'], 'expected 0 <= epsilon_end <= 1, got -0.1'),
    (['sac', '--env', 'Pendulum-v1', '--max-steps', '100', '--tau', '0'], 'expected 0 < tau <= 1, got 0.0'),
    (['acer', *CARTPOLE, '--ema-alpha', '1'], 'expected 0 <= ema_alpha < 1, got 1.0'),
    (['ppo', *CARTPOLE, '--seed', '-3'], 'expected seed >= 0, got -3'),
])
def test_bad_numbers_are_one_line_with_status_2(xagents_cli, workdir, argv, message):
    status, _, err = xagents_cli('train', *argv)
    assert (status, err) == (2, f'xagents train {argv[0]}: error: {message}\n')


def test_a_cfg_gain_that_is_not_finite_is_refused(xagents_cli, workdir):
    with open('nan.cfg', 'w') as file:
        file.write('[dense-1]\nunits=8\ngain=nan\ninitializer=orthogonal\n[dense-2]\noutput=1\n[dense-3]\nunits=1\noutput=1\n')
    status, _, err = xagents_cli('train', 'ppo', *CARTPOLE, '--model', 'nan.cfg')
    assert status == 2 and err.endswith("nan.cfg: [dense-1] gain: expected a positive number, got 'nan'\n")


def test_python_arguments_follow_the_same_rules():
    agent = xagents.PPO.from_env('CartPole-v1', n_envs=2, quiet=True)
    with pytest.raises(ValueError, match=r'^expected max_steps to be an integer, got 2000.5$'):
        agent.fit(max_steps=2000.5)
    with pytest.raises(ValueError, match=r'^expected eval_episodes >= 1, got 0$'):
        agent.fit(max_steps=100, eval_frequency=50, eval_episodes=0)
    with pytest.raises(ValueError, match=r'^expected buffer_max_size to be an integer, got 1000000.0$'):
        xagents.DQN.from_env('CartPole-v1', buffer_max_size=1e6)
    with pytest.raises(ValueError, match=r'^expected frame_frequency >= 1, got 0$'):
        agent.play(frame_dir='frames', frame_frequency=0)
    with pytest.raises(ValueError, match=r'^expected n_envs >= 1, got 0$'):
        create_envs('CartPole-v1', n_envs=0)
    for value in (0.99, 0, 1):
        check_value('gamma', value, 'float')  # the bounds themselves are allowed
    with pytest.raises(ValueError, match=r'^expected lr to be a number, got \(1\+2j\)$'):  # was a TypeError
        check_value('lr', 1 + 2j, 'float')
    with pytest.raises(ValueError, match=r'^expected n_envs to be an integer, got 2j$'):
        create_envs('CartPole-v1', n_envs=2j)


@pytest.mark.parametrize('agent', sorted(AGENTS))
def test_every_numeric_parameter_of_every_agent_has_a_kind(agent):
    """A new parameter without a rule would take any number: each int or float one is listed."""
    free = {'target_entropy', 'target_reward'}  # any finite value is meaningful
    functions = constructors(agent_class(agent), object) + [BaseAgent.fit, BaseAgent.play, create_envs]
    for function in functions:
        for parameter in inspect.signature(function).parameters.values():
            annotation = str(parameter.annotation)
            if ('int' in annotation.split() or 'float' in annotation.split()) and parameter.name not in free:
                assert parameter.name in KINDS, f'{agent}: {parameter.name} has no kind in KINDS'


@pytest.mark.parametrize('argv, message', [
    (['ppo', *CARTPOLE, '--n-steps', str(10 ** 9)], 'a rollout of 1,000,000,000 steps of 8 envs needs '),
    (['dqn', *CARTPOLE, '--buffer-max-size', str(10 ** 12)], 'a replay buffer of 1,000,000,000,000 transitions needs '),
    (['sac', '--env', 'CarRacing-v3', '--max-steps', '100'], 'a replay buffer of 1,000,000 transitions needs 25.8 GiB '),
    (['acer', *CARTPOLE, '--buffer-max-size', str(10 ** 9)], 'a replay buffer of 1,000,000,000 segments needs '),
    # Sizes of the quantile agents, named as the flag rather than the cfg layer they would overflow; a million
    # critics are refused before any is built (they were built one by one for minutes).
    (['tqc', *PENDULUM, '--n-critics', str(10 ** 6)], '--n-critics 1,000,000 with --n-quantiles 25: a loss over '),
    (['tqc', *PENDULUM, '--n-quantiles', str(10 ** 7)], '--n-critics 2 with --n-quantiles 10,000,000: a loss over '),
    (['tqc', *PENDULUM, '--n-critics', '1000', '--top-quantiles-to-drop-per-net', '0'], '--n-critics 1,000 with '),
    (['qrdqn', *CARTPOLE, '--n-quantiles', str(10 ** 5)], '--n-quantiles 100,000: a loss over 100,000 quantile '),
    (['qrdqn', *CARTPOLE, '--n-quantiles', str(10 ** 4), '--buffer-batch-size', '1000'], '--n-quantiles 10,000: '),
    # One sample serves a round's gradient steps: refused before training, not as NumPy's error at the first update.
    (['sac', *PENDULUM, '--gradient-steps', str(10 ** 8), '--buffer-initial-size', '256'],
     '--gradient-steps 100,000,000 of --buffer-batch-size 256: a sample of 25,600,000,000 transitions needs '),
    (['dqn', *CARTPOLE, '--gradient-steps', str(10 ** 9)], '--gradient-steps 1,000,000,000 of --buffer-batch-size '),
])
def test_sizes_that_cannot_fit_in_memory_fail_fast_naming_the_memory_needed(xagents_cli, workdir, argv, message):
    from xagents.utils.memory import available_bytes

    if available_bytes() is None:
        pytest.skip('the memory available is known on Linux (/proc/meminfo)')
    if 'CarRacing-v3' in argv and available_bytes() > 25.8 * 2 ** 30:
        pytest.skip('this machine has room for 25.8 GiB')
    status, _, err = xagents_cli('train', *argv)
    assert status == 2 and err.startswith(f'xagents train {argv[0]}: error: {message}'), err
    assert 'is available: lower --' in err


def test_a_cfg_too_large_for_memory_is_refused_naming_its_layer(xagents_cli, workdir):
    with open('huge.cfg', 'w') as file:
        file.write('[dense-1]\nunits=2000000000\n[dense-2]\noutput=1\n[dense-3]\nunits=1\noutput=1\n')
    status, _, err = xagents_cli('train', 'ppo', *CARTPOLE, '--model', 'huge.cfg')
    assert status == 2 and err.startswith('xagents train ppo: error: huge.cfg: [dense-1]: a model of 10,000,000,000 '
                                          'weights needs 149.0 GiB of memory'), err
