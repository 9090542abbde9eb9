"""Envs that misbehave: a nan or an infinity once, an exception in reset or mid-episode, a malformed step, losses
that diverge. Each stops the run with one line naming the env, the call or value and the step (exit status 1),
and the files of the last good point stay, never overwritten with non-finite weights."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from xagents import PPO, SAC
from xagents.storage.checkpoints import NonFiniteError, read_checkpoint
from xagents.envs.creation import EnvError
from xagents.storage.history import read_history

FAULTY_ENVS = '''
import gymnasium as gym
import numpy as np


class Faulty(gym.Wrapper):
    """CartPole (or Pendulum) that misbehaves once, at its own step ``at``: ``fault`` says how."""

    def __init__(self, fault='none', at=1000, base='CartPole-v1'):
        super().__init__(gym.make(base))
        self.fault, self.at, self.steps = fault, at, 0
        if fault == 'raise_in_reset':
            self.at = 0

    def reset(self, **kwargs):
        if self.fault == 'raise_in_reset':
            raise RuntimeError('no simulator licence found')
        return self.env.reset(**kwargs)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == self.at:
            if self.fault == 'nan_observation':
                observation = observation.copy()
                observation[1] = np.nan
            elif self.fault == 'nan_reward':
                reward = float('nan')
            elif self.fault == 'inf_reward':
                reward = float('inf')
            elif self.fault == 'raise':
                raise RuntimeError('simulator crashed')
            elif self.fault == 'wrong_shape':
                observation = observation[:2]
            elif self.fault == 'array_reward':
                reward = np.array([reward, reward])
        if self.fault == 'huge_reward' and self.steps >= self.at:
            reward = 1e30  # finite, but its squared error is not
        return observation, reward, terminated, truncated, info


gym.register('Faulty-v0', entry_point=Faulty, max_episode_steps=500)
'''


@pytest.fixture
def faulty_envs(workdir):
    """``faulty_envs.py`` in the working directory and on the import path: ``faulty_envs:Faulty-v0``."""
    (workdir / 'faulty_envs.py').write_text(FAULTY_ENVS)
    sys.path.insert(0, str(workdir))
    yield workdir
    sys.path.remove(str(workdir))
    sys.modules.pop('faulty_envs', None)
    gym.registry.pop('Faulty-v0', None)


def weights_of(path: str) -> dict[str, np.ndarray]:
    return read_checkpoint(path).arrays


FAULTS = [
    ('nan_observation', r'faulty_envs:Faulty-v0 returned a non-finite observation\[1\] \(nan\) in env 0 at env step 1,50\d: '
                        r'the run stops before it reaches the weights'),
    ('nan_reward', r'faulty_envs:Faulty-v0 returned a non-finite reward \(nan\) in env 0 at env step 1,50\d'),
    ('inf_reward', r'faulty_envs:Faulty-v0 returned a non-finite reward \(inf\) in env 0 at env step 1,50\d'),
    ('raise', r'faulty_envs:Faulty-v0 failed in step at env step 1,49\d: RuntimeError: simulator crashed'),
    ('wrong_shape', r'faulty_envs:Faulty-v0 failed in step at env step 1,49\d: ObservationError: step returned an '
                    r'observation shaped \(2,\): expected \(4,\), the observation space\'s shape'),
    ('array_reward', r'faulty_envs:Faulty-v0 failed in step at env step 1,49\d: ValueError: setting an array element '
                     r'with a sequence. \(step returns an observation of the observation space\'s shape and a number as '
                     r'reward\)'),
]


@pytest.mark.parametrize('fault, message, flags', [(*fault, ()) for fault in FAULTS] + [
    (*fault, ('--recurrent', 'lstm')) for fault in FAULTS if fault[0] in ('nan_observation', 'raise')])
def test_an_env_that_misbehaves_mid_run_stops_it_in_one_line_and_the_last_good_files_stay(
        faulty_envs, xagents_cli, fault, message, flags):
    """Each fault stops the run in one line before it reaches the weights, a recurrent policy's runs too (its
    states and bootstrap values are computed from the observations that step returns)."""
    status, out, err = xagents_cli(
        'train', 'ppo', '--env', 'faulty_envs:Faulty-v0', '--env-kwargs', f'fault={fault}', 'at=750',
        '--n-envs', '2', '--max-steps', '4000', '--reward-buffer-size', '10', '--seed', '0',
        '--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet', *flags)
    lines = err.strip().splitlines()
    assert status == 1 and len(lines) == 1 and 'Traceback' not in out + err, err
    assert lines[0].startswith('xagents train ppo: error: ')
    assert re.search(message, lines[0]), lines[0]
    assert lines[0].endswith('; weights (w.tf) and history (h.parquet) of the last good point kept')
    weights = weights_of('w.tf')
    assert all(np.isfinite(array).all() for array in weights.values() if array.dtype.kind == 'f')
    history = read_history('h.parquet')
    assert len(history) > 10 and np.isfinite(history['best_reward'].iloc[-1])
    assert history['step'].iloc[-1] <= 1510  # nothing recorded past the fault


def test_an_env_that_fails_in_reset_or_under_async_envs_is_one_line(faulty_envs, xagents_cli):
    status, out, err = xagents_cli('train', 'ppo', '--env', 'faulty_envs:Faulty-v0', '--env-kwargs',
                                   'fault=raise_in_reset', '--max-steps', '1000', '--checkpoints', 'w.tf')
    assert status == 1 and err == ('xagents train ppo: error: faulty_envs:Faulty-v0 failed in reset at env step 0: '
                                   'RuntimeError: no simulator licence found\n')
    # In subprocesses (--async-envs): the worker's error comes back as one line too, without its own report.
    result = subprocess.run(
        [sys.executable, '-m', 'xagents', 'train', 'ppo', '--env', 'faulty_envs:Faulty-v0', '--env-kwargs',
         'fault=raise', 'at=300', '--n-envs', '2', '--async-envs', '--max-steps', '2000', '--quiet',
         '--reward-buffer-size', '5', '--checkpoints', 'a.tf'],
        capture_output=True, text=True, timeout=300, cwd=faulty_envs,
        env={**os.environ, 'PYTHONPATH': os.pathsep.join([str(faulty_envs), *sys.path])})
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        'xagents train ppo: error: faulty_envs:Faulty-v0 failed in step at env step 598: RuntimeError: simulator '
        'crashed; weights (a.tf) of the last good point kept']


def test_sac_checkpoints_are_never_overwritten_after_a_nan_reward(faulty_envs):
    paths = [f'{role}.tf' for role in SAC.model_roles]
    agent = SAC.from_env('faulty_envs:Faulty-v0', env_kwargs={'fault': 'nan_reward', 'at': 1200, 'base': 'Pendulum-v1'},
                         seed=0, buffer_initial_size=256, buffer_batch_size=64, reward_buffer_size=2, checkpoints=paths,
                         quiet=True)
    with pytest.raises(EnvError, match='returned a non-finite reward'):
        agent.fit(max_steps=3000)
    saved = [weights_of(path) for path in paths]
    assert all(np.isfinite(array).all() for arrays in saved for array in arrays.values() if array.dtype.kind == 'f')
    assert len({int(arrays['counter/steps']) for arrays in saved}) == 1  # one set, saved together


def test_losses_that_turn_non_finite_stop_the_run_and_no_file_takes_the_diverged_weights(faulty_envs):
    agent = PPO.from_env('faulty_envs:Faulty-v0', env_kwargs={'fault': 'huge_reward', 'at': 900}, seed=0, n_envs=2,
                         reward_buffer_size=10, checkpoints=['w.tf'], quiet=True)
    with pytest.raises(NonFiniteError, match=r'the update at env step [\d,]+ made \w+ (inf|nan): the weights diverged'):
        agent.fit(max_steps=6000)
    assert all(np.isfinite(array).all() for array in weights_of('w.tf').values() if array.dtype.kind == 'f')
    with pytest.raises(NonFiniteError, match='refused to write x.tf: model/'):
        agent.save_models(['x.tf'])  # the diverged weights themselves
    assert not (faulty_envs / 'x.tf').exists()


def test_env_kwargs_take_true_false_and_none_as_a_command_line_means_them():
    from xagents.app.flags import key_value

    assert key_value('continuous=false') == ('continuous', False)
    assert key_value('continuous=True') == ('continuous', True)
    assert key_value('render=none') == ('render', None)
    assert key_value('gravity=-9.5') == ('gravity', -9.5)
    assert key_value('mode=rgb_array') == ('mode', 'rgb_array')
