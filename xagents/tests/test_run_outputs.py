"""What a run keeps: a command-line run given no output writes into a new run folder (RL Zoo's logs/ALGO/ENV_N) and
says how to go on from it, or keeps nothing with --no-save and says so; a run with a save_dir saves its final agent
when it ends (not after an error), keeping it among the newest save_keep; it resumes from that save into its own
outputs."""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

from xagents import PPO
from xagents.app.cli import new_run_folder, resume_command
from xagents.training.callbacks import Callback
from xagents.envs.creation import EnvError
from xagents.storage.history import read_history
from xagents.storage.saved import latest_save

SMALL = ['--env', 'CartPole-v1', '--n-envs', '2', '--n-steps', '64', '--seed', '0']


def files_under(directory: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(root, name), directory)
                  for root, _, names in os.walk(directory) for name in names)


def test_a_run_given_no_output_writes_into_a_new_run_folder_and_goes_on_with_the_command_it_prints(workdir,
                                                                                                   xagents_cli):
    # Refused (a bad setting found once the agent is built): no folder is made, and no number taken.
    status, out, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '512', '--stop-on', 'eval')
    assert status == 2 and err == 'xagents train ppo: error: stop_on eval needs an eval_frequency\n'
    assert os.listdir('.') == [] and 'Run folder' not in out

    status, out, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '512', '--quiet')
    assert status == 0, err
    folder = 'runs/ppo/CartPole-v1_1'
    assert files_under('.') == [f'{folder}/history.parquet', f'{folder}/saves/step-000000000512/agent.json',
                                *[f'{folder}/saves/step-000000000512/{name}'
                                  for name in os.listdir(f'{folder}/saves/step-000000000512') if name != 'agent.json']]
    (line,) = out.splitlines()  # said even with --quiet: the run wrote files nobody named
    command = (f'xagents train ppo {" ".join(SMALL)} --max-steps 512 --quiet --history-checkpoint '
               f'{folder}/history.parquet --save-dir {folder}/saves --weights {folder}/saves')
    assert line.endswith(f'Run folder {folder} (its history in history.parquet, the agent saved into saves/ when '
                         f'training ends); go on from its latest save with: {command}')
    assert read_history(f'{folder}/history.parquet')['step'].iloc[-1] <= 512

    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '256', '--quiet')  # the next number
    assert status == 0 and sorted(os.listdir('runs/ppo')) == ['CartPole-v1_1', 'CartPole-v1_2'], err

    status, out, err = xagents_cli(*shlex.split(command)[1:])  # the printed command, as a user pastes it
    assert status == 0, err
    assert sorted(os.listdir(f'{folder}/saves')) == ['step-000000000512', 'step-000000001024']  # went on at 512
    history = read_history(f'{folder}/history.parquet')
    assert history['step'].iloc[-1] > 512 and history['step'].is_monotonic_increasing
    assert PPO.load(f'{folder}/saves').steps == 1024  # a save_dir loads as its latest save
    assert sorted(os.listdir('runs/ppo')) == ['CartPole-v1_1', 'CartPole-v1_2']  # no new folder: it had outputs


def test_no_save_keeps_nothing_and_says_so(workdir, xagents_cli):
    status, out, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '256', '--no-save', '--quiet')
    assert status == 0, err
    (line,) = out.splitlines()  # said even with --quiet
    assert line.endswith('Nothing of this run is kept (--no-save): no weights, history or saves')
    assert os.listdir('.') == []
    status, _, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '256', '--no-save', '--save-dir', 'sd')
    assert status == 2 and err == ('xagents train ppo: error: --no-save keeps nothing, and --save-dir asks to keep '
                                   'files: give one of them\n')
    assert os.listdir('.') == []


def test_run_folders_are_numbered_after_the_highest_and_named_from_any_env_id(workdir):
    os.makedirs('runs/ppo/CartPole-v1_7')
    os.makedirs('runs/ppo/CartPole-v1_x')  # not a run folder's name
    assert new_run_folder('ppo', 'CartPole-v1') == ['runs/ppo/CartPole-v1_8']
    assert new_run_folder('ppo', 'ALE/Pong-v5') == ['runs/ppo/ALE-Pong-v5_1']
    assert new_run_folder('dqn', 'my_envs:GoLeft-v0') == ['runs/dqn/my_envs-GoLeft-v0_1', 'runs/dqn']
    os.rename('runs', 'moved')
    with open('runs', 'w'):  # runs is a file: refused, nothing made
        pass
    with pytest.raises(ValueError, match='^cannot write runs/ppo: runs is not a directory$'):
        new_run_folder('ppo', 'CartPole-v1')


def test_the_command_that_goes_on_keeps_the_runs_flags_but_its_weights_and_quotes_what_a_shell_would_split():
    argv = ['--env', 'CartPole-v1', '--weights', 'a.tf', 'b.tf', '--target-reward', '-5', '--env-kwargs', 'x=a b']
    assert resume_command('sac', argv, 'r/history.parquet', 'r/saves') == (
        "xagents train sac --env CartPole-v1 --target-reward -5 --env-kwargs 'x=a b' --history-checkpoint "
        'r/history.parquet --save-dir r/saves --weights r/saves')
    assert resume_command('ppo', ['--weights=w.tf', '--env', 'X'], 'h', 's') == (
        'xagents train ppo --env X --history-checkpoint h --save-dir s --weights s')


def test_a_run_to_max_steps_saves_its_final_agent_and_resumes_from_it_into_its_own_outputs(workdir, xagents_cli):
    outputs = ['--checkpoints', 'w.tf', '--history-checkpoint', 'h.parquet', '--save-dir', 'sd']
    status, out, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '500', '--reward-buffer-size', '5', *outputs)
    assert status == 0, err
    assert 'Saving the agent into sd as step-N when training ends' in out
    assert out.rstrip().endswith('Saved the agent as sd/step-000000000512')
    assert os.listdir('sd') == ['step-000000000512'] and PPO.load('sd/step-000000000512').steps == 512
    status, out, err = xagents_cli('train', 'ppo', *SMALL, '--max-steps', '256', '--reward-buffer-size', '5',
                                   '--weights', 'sd/step-000000000512', *outputs)
    assert status == 0, err
    assert sorted(os.listdir('sd')) == ['step-000000000512', 'step-000000000768']
    history = read_history('h.parquet')
    assert history['step'].iloc[-1] > 512 and history['step'].is_monotonic_increasing


class StopAfter(Callback):
    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def on_round(self, run):
        self.rounds -= 1
        return self.rounds > 0


class FailsAt(gym.Wrapper):
    """Raises in the step that takes the env past ``steps`` steps."""

    def __init__(self, env: gym.Env, steps: int) -> None:
        super().__init__(env)
        self.steps = steps

    def step(self, action):
        self.steps -= 1
        if self.steps < 0:
            raise RuntimeError('the simulator crashed')
        return self.env.step(action)


def test_every_normal_end_saves_the_final_agent_an_error_does_not(workdir):
    agent = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, quiet=True, reward_buffer_size=5)
    agent.fit(max_steps=128)
    assert os.listdir('.') == []  # Python's fit writes only what it is asked to, as Stable-Baselines3's learn
    first = agent.fit(target_reward=10, save_dir='target')  # reached at once: CartPole's episodes last 10+ steps
    assert first.reason.startswith('Reward achieved') and os.listdir('target') == [f'step-{first.steps:012d}']
    run = agent.fit(max_steps=10 ** 6, callbacks=[StopAfter(2)], save_dir='stopped')
    assert run.reason == 'Stopped by StopAfter' and os.listdir('stopped') == [f'step-{run.steps:012d}']
    run = agent.fit(max_steps=128, save_dir='target')  # an earlier fit's save_dir: it goes on there
    assert sorted(os.listdir('target')) == [f'step-{first.steps:012d}', f'step-{run.steps:012d}']

    failing = PPO(FailsAt(gym.make('CartPole-v1'), 300), n_steps=64, seed=0)  # rounds of 64 steps
    with pytest.raises(EnvError, match='the simulator crashed'):
        failing.fit(max_steps=10 ** 6, save_dir='failed', save_frequency=128, quiet=True)
    assert sorted(os.listdir('failed')) == ['step-000000000128', 'step-000000000256']  # periodic only


def test_the_final_save_is_kept_among_the_newest_save_keep_and_is_never_the_one_deleted(workdir):
    agent = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, quiet=True)
    agent.fit(max_steps=700, save_dir='sd', save_frequency=256, save_keep=2)  # rounds of 128 steps
    assert sorted(os.listdir('sd')) == ['step-000000000512', 'step-000000000768']  # 256 went; 768 ends it (saved once)
    resumed = PPO.load('sd/step-000000000512', quiet=True)  # the older save: newer step names are in sd
    resumed.fit(max_steps=100, save_dir='sd', save_keep=1)
    assert os.listdir('sd') == ['step-000000000640'] and latest_save('sd') == 'sd/step-000000000640'


def interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a test suite started in the background inherits SIGINT ignored


def test_ctrl_c_saves_the_agent_at_the_step_it_stopped_and_the_line_names_the_save(workdir):
    process = subprocess.Popen([sys.executable, '-m', 'xagents', 'train', 'ppo', *SMALL, '--max-steps', '10000000',
                                '--history-checkpoint', 'h.parquet', '--save-dir', 'sd'], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    deadline = time.time() + 120
    while not os.path.exists('h.parquet') and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    (line,) = err.splitlines()
    step = int(re.fullmatch(r'xagents train ppo: interrupted at step (\d+); .*', line)[1])
    assert line.endswith(f'; history (h.parquet) and agent (sd/step-{step:012d}) saved')
    assert f'Interrupted at step {step}' in out and os.listdir('sd') == [f'step-{step:012d}']
    assert PPO.load('sd').steps == step
    assert np.isfinite(read_history('h.parquet')['mean_reward']).all()


def test_tune_and_benchmark_train_without_run_folders(workdir, xagents_cli):
    """They build runs too, and keep what they need in their own outputs: a study, a benchmark's --output."""
    status, _, err = xagents_cli('tune', 'ppo', '--env', 'CartPole-v1', '--trial-steps', '500', '--n-reports', '1',
                                 '--n-trials', '1', '--lr', '1e-4', '1e-2')
    assert status == 0, err
    status, _, err = xagents_cli('benchmark', '--agents', 'ppo', '--envs', 'CartPole-v1', '--target', '15', '--seeds',
                                 '0', '--max-steps', '256', '--eval-frequency', '128', '--output', 'out')
    assert status == 0, err
    assert 'runs' not in os.listdir('.') and sorted(os.listdir('out/runs')) == ['ppo-CartPole-v1-0.json',
                                                                                'ppo-CartPole-v1-0.parquet']
