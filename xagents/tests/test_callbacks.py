"""Runs and callbacks: the events a user's callback hears, stopping from one, and state kept off the agent."""
from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd
import pytest

from xagents import DQN, PPO
from xagents.training.callbacks import Callback
from xagents.storage.checkpoints import read_checkpoint
from xagents.storage.history import read_history


class Recorder(Callback):
    """Records every event; stops the run once ``stop_after_rounds`` rounds ended (None: never)."""

    def __init__(self, stop_after_rounds: int | None = None, stop_after_episodes: int | None = None) -> None:
        self.events: list[str] = []
        self.rounds = self.episodes = 0
        self.stop_after_rounds, self.stop_after_episodes = stop_after_rounds, stop_after_episodes

    def on_start(self, run):
        self.events.append('start')

    def on_episode(self, run, episode):
        self.events.append('episode')
        self.episodes += 1
        assert run.history.frame()['episode_reward'].iloc[-1] == episode.score  # recorded before callbacks
        if self.episodes == self.stop_after_episodes:
            return False

    def on_progress(self, run):
        self.events.append('progress')

    def on_round(self, run):
        self.events.append('round')
        self.rounds += 1
        return self.rounds != self.stop_after_rounds

    def on_metrics(self, run, metrics):
        self.events.append('metrics')

    def on_stop(self, run):
        self.events.append('stop')


def test_a_callback_hears_every_event_in_order():
    recorder = Recorder()
    agent = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, log_frequency=5, quiet=True)
    run = agent.fit(max_steps=640, callbacks=[recorder])
    events = recorder.events
    assert events[0] == 'start' and events[-1] == 'stop' and events.count('start') == events.count('stop') == 1
    assert events.count('round') == 5 and events.count('episode') == run.games
    assert events.count('progress') == run.games // 5
    # Within a round: its episodes, a progress event after every 5th, then the round's end.
    first_round = events[1:events.index('round')]
    assert set(first_round) <= {'episode', 'progress', 'metrics'} and first_round.count('episode') > 5
    assert 'metrics' in events  # the progress metrics reach every callback


@pytest.mark.parametrize('stopper, rounds', [(Recorder(stop_after_rounds=3), 3), (Recorder(stop_after_episodes=1), None)])
def test_a_callback_stops_training_by_returning_false(stopper, rounds):
    agent = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, quiet=True)
    run = agent.fit(max_steps=100_000, callbacks=[stopper])
    assert run.reason == 'Stopped by Recorder'
    assert agent.steps == (rounds or 1) * 128  # the round in which it asked ends, then the run stops


def test_run_state_lives_in_the_run_and_a_second_fit_goes_on_from_the_history():
    agent = DQN.from_env('CartPole-v1', seed=0, quiet=True)
    first = agent.fit(max_steps=3000)
    for name in ('mean_reward', 'best_reward', 'eval_reward', 'games', 'reward_buffer', 'target_reward', 'max_steps'):
        assert not hasattr(agent, name), name
    second = agent.fit(max_steps=6000)
    assert second is not first and second.start_steps == first.steps and agent.steps >= 6000
    assert second.games > first.games and second.best_reward >= first.best_reward
    assert len(agent.history) == second.games


def test_the_best_reward_waits_for_a_full_window_of_episodes(workdir):
    """One lucky early episode is no best: the best mean reward (progress line, history, checkpoints) is the
    highest mean over a full reward_buffer_size window, as the target rule judges."""
    agent = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, reward_buffer_size=8, log_frequency=1,
                         checkpoints=['w.tf'], history_checkpoint='h.parquet', quiet=True)
    run = agent.fit(max_steps=2048)
    frame = pd.read_parquet('h.parquet')
    assert len(frame) > 8
    assert np.isneginf(frame['best_reward'].iloc[:7]).all()  # fewer than 8 episodes: no best yet
    means = frame['episode_reward'].rolling(8).mean()
    assert np.allclose(frame['best_reward'].iloc[7:], means.iloc[7:].cummax())
    assert run.best_reward == means.max()


def test_before_a_full_window_the_checkpoint_holds_the_latest_weights_and_says_so(xagents_cli, workdir):
    status, out, err = xagents_cli('train', 'ppo', '--env', 'CartPole-v1', '--max-steps', '256', '--n-envs', '2',
                                   '--n-steps', '64', '--checkpoints', 'w.tf', '--reward-buffer-size', '100')
    assert status == 0, err
    assert 'of the 100 episodes a best mean reward needs finished: w.tf holds the latest weights, not a best' in out
    assert 'best reward n/a' in out
    from xagents.storage.checkpoints import read_checkpoint

    assert read_checkpoint('w.tf').steps == 256  # the weights of the run's end, beside its history


class FileWatch(Callback):
    """After each round (the built-in callbacks' writes come first), when a new version of ``path`` appeared; each
    round is stretched by ``pause`` seconds, so that the run spans several 2-second periods on any machine."""

    def __init__(self, path: str, pause: float = 0.0) -> None:
        self.path, self.pause, self.versions, self.last = path, pause, [], None

    def on_round(self, run):
        time.sleep(self.pause)
        if os.path.exists(self.path):
            stat = os.stat(self.path)
            version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if version != self.last:
                self.versions.append(time.perf_counter())
                self.last = version


def test_weights_and_history_are_written_every_two_seconds_and_at_the_end(workdir):
    """PPO's best on CartPole rises in most rounds: writing each rise took longer than the training. The files are
    written at most every 2 seconds and when the run ends, the weights on disk beside the history they go with."""
    agent = PPO.from_env('CartPole-v1', seed=0, quiet=True)
    watch = FileWatch('h.parquet', pause=8.0 / (50_000 // (agent.n_envs * agent.n_steps)))  # 8 s of pauses in all
    run = agent.fit(max_steps=50_000, checkpoints=['w.tf'], history_checkpoint='h.parquet', callbacks=[watch])
    assert len(watch.versions) >= 2 and (np.diff(watch.versions) >= 2.0).all(), watch.versions
    history = read_history('h.parquet')
    assert len(history) == run.games and history['best_reward'].iloc[-1] == run.best_reward
    # The weights of the best: copied at the end of the round whose episodes first reached it.
    reached = history['step'][history['mean_reward'] == run.best_reward].iloc[0]
    assert 0 <= read_checkpoint('w.tf').steps - reached < agent.n_envs * agent.n_steps


class CtrlC(Callback):
    """Ctrl-C as it lands in a run: a KeyboardInterrupt at the end of the second round; records what on_stop hears."""

    def __init__(self) -> None:
        self.rounds, self.reason = 0, 'not heard'

    def on_round(self, run):
        self.rounds += 1
        if self.rounds == 2:
            raise KeyboardInterrupt

    def on_stop(self, run):
        self.reason = run.reason


def test_ctrl_c_ends_a_run_in_order_with_its_reason_and_its_final_save(workdir):
    agent = PPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, quiet=True)
    ctrl_c = CtrlC()
    with pytest.raises(KeyboardInterrupt):
        agent.fit(max_steps=10_000, save_dir='saves', callbacks=[ctrl_c])
    assert ctrl_c.reason == 'Interrupted at step 256' and os.listdir('saves') == ['step-000000000256']
    assert PPO.load('saves').steps == 256


# ------------------------------------------------------------------------------------------ stall hint
def test_a_stall_is_a_last_quarter_no_better_than_the_first_by_a_tenth_of_the_spread():
    from xagents.training.callbacks import StallHint

    def flat(scores) -> bool:
        hint = StallHint('Env-v0')
        hint.scores = list(scores)
        return hint.flat()

    assert flat([-200.0] * 40)  # never a success
    assert flat(np.r_[np.linspace(100, 0, 40)])  # worse
    assert not flat(np.r_[np.linspace(0, 100, 40)])  # learning
    assert not flat([-200.0] * 19)  # too few episodes to judge
    rng = np.random.default_rng(0)
    assert flat(rng.normal(0, 10, 400))
    assert not flat(rng.normal(0, 10, 400) + np.linspace(0, 10, 400))


def test_from_env_marks_an_env_without_a_preset_as_generic():
    assert PPO.from_env('xagents.envs.unpreset:Own/CartPole-v1').generic_env == 'xagents.envs.unpreset:Own/CartPole-v1'
    assert PPO.from_env('CartPole-v1').generic_env is None  # PPO's CartPole preset
    assert DQN.from_env('MountainCar-v0').generic_env is None
    assert DQN.from_env('xagents.envs.unpreset:Own/MountainCar-v0').generic_env is not None


def test_a_flat_run_on_generic_defaults_ends_with_the_settings_to_search_and_a_tune_command_that_runs(
        workdir, xagents_command):
    import shlex
    import subprocess

    env = 'xagents.envs.unpreset:Own/MountainCar-v0'  # -200 every episode within 8,192 steps
    result = subprocess.run(xagents_command + ['train', 'ppo', '--env', env, '--max-steps', '8192', '--seed', '0'],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(f"The mean reward stayed flat on PPO's generic defaults (no preset names {env}): "
                           '--lr, --n-steps, --entropy-coef matter most here'), last
    command = shlex.split(last.partition('search them with: ')[2])
    assert command[:5] == ['xagents', 'tune', 'ppo', '--env', env]
    tuned = subprocess.run(xagents_command + command[1:] + ['--n-trials', '1', '--trial-steps', '2048'],
                           capture_output=True, text=True)
    assert tuned.returncode == 0 and '1 trials (1 COMPLETE)' in tuned.stdout, tuned.stderr
    learning = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'xagents.envs.unpreset:Own/CartPole-v1',
                                                 '--max-steps', '30000', '--seed', '0'], capture_output=True, text=True)
    assert learning.returncode == 0 and 'stayed flat' not in learning.stdout
