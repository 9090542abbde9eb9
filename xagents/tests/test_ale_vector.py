"""ale-py's C++ vector env against Gymnasium's vector env with xagents' Python Atari wrappers, on the same actions."""
import os
import re
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

from xagents import PPO
from xagents.envs.ale_vector import AleVectorEnv
from xagents.envs.creation import create_envs, vector_settings


def stepped_side_by_side(env_id: str, steps: int, **settings):
    """Step both kinds of vector env on the same random actions (no no-ops, no FIRE: the ways they differ) and
    check each step; return the episodes each reported and the learner terminations seen."""
    settings = {'n_envs': 3, 'noop_max': 0, 'fire_reset': False, 'seed': 0, **settings}
    ale, python = create_envs(env_id, ale_vector=True, **settings), create_envs(env_id, ale_vector=False, **settings)
    assert isinstance(ale, AleVectorEnv) and isinstance(python, gym.vector.SyncVectorEnv)
    assert ale.single_observation_space == python.single_observation_space
    assert ale.single_action_space == python.single_action_space
    first, _ = ale.reset(seed=0)
    expected, _ = python.reset(seed=0)
    np.testing.assert_array_equal(first, expected)
    rng = np.random.default_rng(1)
    episodes, terminations = ([], []), 0
    for step in range(steps):
        actions = rng.integers(0, ale.single_action_space.n, 3)
        got, want = ale.step(actions), python.step(actions)
        for index, name in ((1, 'rewards'), (2, 'terminated'), (3, 'truncated')):
            np.testing.assert_array_equal(got[index], want[index], err_msg=f'{name} at step {step}')
        dones = got[2] | got[3]
        np.testing.assert_array_equal(got[0], want[0], err_msg=f'observations at step {step}')
        if dones.any():
            terminations += int(got[2].sum())
            np.testing.assert_array_equal(got[4]['final_obs'][dones],
                                          np.stack(want[4]['final_obs'][dones]))
        for found, (_, _, _, _, info) in zip(episodes, (got, want)):
            final = info.get('final_info', {})
            if 'episode' in final:
                ended = np.asarray(final['_episode'], bool)
                found.extend(zip(np.asarray(final['episode']['r'])[ended], np.asarray(final['episode']['l'])[ended]))
    ale.close()
    python.close()
    return episodes, terminations


def test_pong_gives_the_same_rewards_frames_and_scores_as_the_python_wrappers():
    (ale, python), _ = stepped_side_by_side('PongNoFrameskip-v4', 2_000)
    assert len(ale) >= 3 and [score for score, _ in ale] == [score for score, _ in python]
    assert all(-21 <= score < 0 for score, _ in ale)
    for (_, frames), (_, expected) in zip(ale, python):  # lengths in frames, as the raw env counts them
        assert abs(frames - expected) < 4


def test_breakout_gives_the_same_rewards_lives_and_scores_as_the_python_wrappers():
    (ale, python), terminations = stepped_side_by_side('BreakoutNoFrameskip-v4', 1_500, terminal_on_life_loss=False)
    assert len(ale) >= 5 and [score for score, _ in ale] == [score for score, _ in python]
    assert terminations == len(ale)  # whole games only: lives off


def test_a_lost_life_ends_the_learners_episode_at_the_same_step_and_the_game_goes_on():
    # The next stack repeats one frame, as an episode's first does (replay buffers store Atari frames once on that).
    settings = {'n_envs': 2, 'noop_max': 0, 'fire_reset': False, 'seed': 0}
    ale, python = (create_envs('BreakoutNoFrameskip-v4', ale_vector=flag, **settings) for flag in (True, False))
    ale.reset(seed=0)
    python.reset(seed=0)
    rng = np.random.default_rng(0)
    for step in range(200):
        actions = rng.integers(0, 4, 2)
        observations, rewards, terminated, _, info = ale.step(actions)
        _, expected_rewards, expected, _, _ = python.step(actions)
        np.testing.assert_array_equal(rewards, expected_rewards)
        np.testing.assert_array_equal(terminated, expected)
        if terminated.any():  # a lost life: the learner's episode ends, the game does not
            assert 'final_info' in info and not info['final_info']['_episode'][terminated].any()
            assert (info['lives'][terminated] == 4).all()
            first = observations[terminated]
            assert (first == first[..., :1]).all() and first.any()
            np.testing.assert_array_equal(info['final_obs'][terminated][..., -1], first[..., -1])
            assert not np.array_equal(info['final_obs'][terminated], first)
            break
    else:
        pytest.fail('no life was lost in 200 random steps')


def test_rewards_are_clipped_for_the_learner_and_whole_for_the_score():
    envs = create_envs('BreakoutNoFrameskip-v4', n_envs=2, seed=0, ale_vector=True, terminal_on_life_loss=False)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    seen, scores = set(), []
    while len(scores) < 4:
        _, rewards, _, _, info = envs.step(rng.integers(0, 4, 2))
        seen.update(rewards.tolist())
        final = info.get('final_info', {})
        if 'episode' in final:
            scores.extend(np.asarray(final['episode']['r'])[final['_episode']])
    assert seen <= {0.0, 1.0} and max(scores) > 1  # the game scores bricks 1, 4 or 7; the learner sees 1


def test_ale_ids_use_it_by_default_and_refuse_it_in_one_line_where_it_cannot_serve():
    assert isinstance(create_envs('PongNoFrameskip-v4', n_envs=2), AleVectorEnv)
    assert isinstance(create_envs('ALE/Pong-v5', n_envs=2), AleVectorEnv)
    assert isinstance(create_envs('PongNoFrameskip-v4', n_envs=2, async_envs=True), gym.vector.AsyncVectorEnv)
    assert isinstance(create_envs('PongNoFrameskip-v4', n_envs=2, preprocess=False), gym.vector.SyncVectorEnv)
    sticky = create_envs('ALE/Pong-v5', n_envs=1)
    assert sticky.games[0].ale is not None and sticky.spec.kwargs['repeat_action_probability'] == 0.25
    with pytest.raises(ValueError, match='ale_vector cannot step CartPole-v1: it steps ALE ids only'):
        create_envs('CartPole-v1', ale_vector=True)
    with pytest.raises(ValueError, match='takes no env_kwargs mode'):
        create_envs('PongNoFrameskip-v4', ale_vector=True, env_kwargs={'mode': 0})
    with pytest.raises(ValueError, match='leave async_envs off'):
        create_envs('PongNoFrameskip-v4', ale_vector=True, async_envs=True)


def test_an_evaluation_limit_cuts_games_at_that_many_frames():
    envs = create_envs('PongNoFrameskip-v4', n_envs=2, seed=0, env_kwargs={'max_episode_steps': 400})
    assert isinstance(envs, AleVectorEnv)
    envs.reset(seed=0)
    for step in range(1, 101):
        _, _, terminated, truncated, info = envs.step(np.zeros(2, np.int64))
        if truncated.any():
            break
    assert step == 100 and truncated.all() and not terminated.any()
    assert list(info['final_info']['episode']['l']) == [400, 400]


def test_an_agent_saved_on_it_loads_on_it(tmp_path):
    agent = PPO.from_env('PongNoFrameskip-v4', n_envs=2, n_steps=8, seed=0, quiet=True)
    assert isinstance(agent.envs, AleVectorEnv) and vector_settings(agent.envs)['ale_vector'] is True
    agent.fit(max_steps=32)
    agent.save(str(tmp_path / 'saved'))
    loaded = PPO.load(str(tmp_path / 'saved'))
    assert isinstance(loaded.envs, AleVectorEnv) and loaded.envs.num_envs == 2
    python = PPO.load(str(tmp_path / 'saved'), ale_vector=False)
    assert isinstance(python.envs, gym.vector.SyncVectorEnv)


def test_games_built_in_groups_step_and_reset_as_one_vector_env(monkeypatch):
    import xagents.envs.ale_vector as ale_vector

    settings = {'n_envs': 5, 'noop_max': 0, 'fire_reset': False, 'seed': 0}
    whole = create_envs('BreakoutNoFrameskip-v4', ale_vector=True, **settings)
    monkeypatch.setattr(ale_vector, 'GAMES_PER_BUILD', 2)
    grouped = create_envs('BreakoutNoFrameskip-v4', ale_vector=True, **settings)
    assert (len(whole.games), len(grouped.games)) == (1, 3)
    for got, want in zip(grouped.reset(seed=0), whole.reset(seed=0)):
        np.testing.assert_equal(got, want)
    rng, dones = np.random.default_rng(0), 0
    for step in range(300):
        actions = rng.integers(0, 4, 5)
        got, want = grouped.step(actions), whole.step(actions)
        for index in range(4):
            np.testing.assert_array_equal(got[index], want[index], err_msg=f'output {index} at step {step}')
        np.testing.assert_equal(got[4], want[4])  # lives, final frames and scores
        dones += int((got[2] | got[3]).any())
    assert dones  # final frames were compared
    mask = np.array([False, True, False, False, True])  # envs of two groups, a third group untouched
    for got, want in zip(grouped.reset(seed=7, options={'reset_mask': mask}),
                         whole.reset(seed=7, options={'reset_mask': mask})):
        np.testing.assert_equal(got, want)
    actions = rng.integers(0, 4, 5)
    for got, want in zip(grouped.step(actions), whole.step(actions)):
        np.testing.assert_equal(got, want)
    grouped.close()
    whole.close()


def test_more_games_than_memory_holds_are_refused_in_one_line_before_any_is_built(xagents_command):
    from xagents.utils.memory import available_bytes

    # Each game holds about 1.65 MiB (xagents.utils.memory): this many surely cannot fit, though what Python alone
    # sees of a game (about 0.8 MB) would.
    count = int(available_bytes() / (1.2 * 2 ** 20))
    started = time.monotonic()
    try:
        # (a rollout of one step, which fits: PPO's rollout of these games is judged before them, on its own)
        done = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'PongNoFrameskip-v4', '--n-envs', str(count),
                                                 '--n-steps', '1'], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f'{count:,} games were being built')
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(rf'xagents train ppo: error: {count:,} PongNoFrameskip-v4 envs needs [\d,.]+ GiB of memory, '
                        r'[\d,.]+ GiB is available: use fewer envs \(--n-envs, --eval-episodes\)\n', done.stderr)
    assert time.monotonic() - started < 60


def test_a_rollout_of_games_that_cannot_fit_is_refused_before_the_games_are_built(xagents_command):
    """3,000 Pong games fit (about 6 GiB), PPO's rollout of them does not: refused on one game's spaces, at once."""
    started = time.monotonic()
    try:
        done = subprocess.run(xagents_command + ['train', 'ppo', '--env', 'PongNoFrameskip-v4', '--n-envs', '3000',
                                                 '--n-steps', '4096', '--max-steps', '1000'],
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail('3,000 games were being built')
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(r'xagents train ppo: error: a rollout of 4,096 steps of 3,000 envs needs [\d,.]+ GiB of memory, '
                        r'[\d,.]+ GiB is available: lower --n-steps or --n-envs\n', done.stderr), done.stderr
    assert 'Making' not in done.stdout
    assert time.monotonic() - started < 60


@pytest.mark.parametrize('signal_number', [signal.SIGTERM, signal.SIGINT], ids=['SIGTERM', 'Ctrl-C'])
def test_a_signal_while_many_games_are_built_stops_within_seconds(xagents_command, signal_number):
    # 200 games take a minute or more to build on 2 cores, in C++ that holds the GIL.
    process = subprocess.Popen(xagents_command + ['train', 'ppo', '--env', 'PongNoFrameskip-v4', '--n-envs', '200',
                                                  '--max-steps', '1000'],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line == 'Making 200 PongNoFrameskip-v4 games, 8 at a time\n', (line, process.stderr.read())
        time.sleep(2)  # inside the build
        process.send_signal(signal_number)
        sent = time.monotonic()
        out, err = process.communicate(timeout=120)
        waited = time.monotonic() - sent
    finally:
        process.kill()
    assert (process.returncode, err, out) == (130, 'xagents train ppo: interrupted\n', '')
    assert waited < 8


LEAK_SCRIPT = '''
{imports}
from xagents import PPO

agent = PPO.from_env('PongNoFrameskip-v4', n_envs=2, n_steps=64, seed=0, quiet=True)
agent.fit(max_steps=256)
print(agent.steps)
'''


@pytest.mark.parametrize('backend', ['tensorflow', 'torch'])
def test_a_script_that_trains_on_atari_frees_its_games_at_exit(backend, tmp_path):
    # The agent (a module global, in reference cycles) outlives the collector, frozen at exit: its games were freed
    # by no one, and ale-py's extension wrote about 30 lines of "nanobind: leaked ... ALEVectorInterface".
    if backend == 'torch':
        pytest.importorskip('torch')
    script = tmp_path / 'pong.py'
    script.write_text(LEAK_SCRIPT.format(imports='import torch' if backend == 'torch' else ''))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, 'KERAS_BACKEND': backend})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ['256']
    assert 'nanobind' not in done.stderr, done.stderr
