"""Environment creation: vectorising, seeding, Atari preprocessing, same-step autoreset."""
import gymnasium as gym
import numpy as np
import pandas as pd
import pytest

from xagents.envs.creation import AUTORESET_MODE, create_envs, is_atari, make_env, needs_fire


def test_vector_env_uses_same_step_autoreset_and_seeds():
    envs = create_envs('CartPole-v1', n_envs=3, seed=5)
    assert envs.num_envs == 3 and envs.metadata['autoreset_mode'] == AUTORESET_MODE
    first, _ = envs.reset(seed=5)
    again, _ = create_envs('CartPole-v1', n_envs=3, seed=5).reset(seed=5)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[0], first[1])  # env i is seeded with seed + i


def test_ending_step_returns_reset_observation_and_final_obs_in_info():
    envs = create_envs('CartPole-v1', n_envs=2, seed=0)
    envs.reset(seed=0)
    for _ in range(500):
        observations, _, terminated, truncated, info = envs.step(np.zeros(2, np.int64))
        if (terminated | truncated).any():
            break
    ended = np.flatnonzero(terminated | truncated)[0]
    final = info['final_obs'][ended]
    assert abs(final[2]) > 0.2 or abs(final[0]) > 2.4  # the pole fell or the cart left: a terminal state
    assert np.abs(observations[ended]).max() <= 0.05   # the new episode's reset state


def test_atari_preprocessing_is_default_for_ale_ids():
    assert is_atari('PongNoFrameskip-v4') and not is_atari('CartPole-v1')
    envs = create_envs('PongNoFrameskip-v4', n_envs=2, seed=0)
    observations, _ = envs.reset(seed=0)
    assert envs.single_observation_space.shape == (84, 84, 4)
    assert observations.shape == (2, 84, 84, 4) and observations.dtype == np.uint8
    observations, *_ = envs.step(np.zeros(2, np.int64))
    assert observations.dtype == np.uint8
    raw = create_envs('PongNoFrameskip-v4', n_envs=1, preprocess=False)
    assert raw.single_observation_space.shape == (210, 160, 3)


@pytest.mark.parametrize('ale_vector', [False, True], ids=['python-wrappers', 'ale-vector'])
def test_a_reset_frame_stack_repeats_its_first_frame_as_the_atari_guide_says(ale_vector):
    """The stack after a reset is the first frame four times (Stable-Baselines3's VecFrameStack pads with zeros);
    a step later the newest frame takes the last place."""
    envs = create_envs('BreakoutNoFrameskip-v4', n_envs=2, seed=0, ale_vector=ale_vector, fire_reset=False)
    observations, _ = envs.reset(seed=0)
    assert observations[..., 0].any(), 'the first frame is a real frame, not zeros'
    for k in range(1, 4):
        np.testing.assert_array_equal(observations[..., k], observations[..., 0])
    stepped, *_ = envs.step(np.ones(2, np.int64))  # FIRE: the ball appears
    np.testing.assert_array_equal(stepped[..., :3], observations[..., 1:])
    envs.close()


def test_async_envs_step_in_subprocesses():
    envs = create_envs('CartPole-v1', n_envs=2, seed=0, async_envs=True)
    try:
        assert isinstance(envs, gym.vector.AsyncVectorEnv)
        envs.reset(seed=0)
        observations, rewards, *_ = envs.step(np.zeros(2, np.int64))
        assert observations.shape == (2, 4) and rewards.tolist() == [1.0, 1.0]
    finally:
        envs.close()


def test_mujoco_envs_leave_no_log_file_in_the_working_directory(workdir):
    """MuJoCo's own handler printed its warnings (HalfCheetah-v5's compile under MuJoCo 4, an unstable simulation
    under any version) and appended them to MUJOCO_LOG.TXT in the user's working directory. Routed to Python's
    warnings, no file is written."""
    import mujoco

    envs = create_envs('HalfCheetah-v5', n_envs=2, seed=0)
    envs.reset(seed=0)
    env = envs.envs[0].unwrapped
    env.data.qvel[:] = np.nan
    with pytest.warns(RuntimeWarning, match='Nan, Inf or huge value'):
        mujoco.mj_step(env.model, env.data)
    envs.close()
    assert not (workdir / 'MUJOCO_LOG.TXT').exists()


@pytest.mark.parametrize('env_id, message', [
    ('CartPol-v1', "unknown environment id 'CartPol-v1' (did you mean CartPole-v0, CartPole-v1, CartPoleNoVel-v1?)"),
    ('NoSuchGame-v9', "unknown environment id 'NoSuchGame-v9'"),
])
def test_unknown_env_id(env_id, message):
    with pytest.raises(ValueError) as error:
        create_envs(env_id)
    assert str(error.value) == message or str(error.value).startswith(message)


def test_preprocess_refuses_non_atari_env():
    with pytest.raises(ValueError, match='--preprocess expects an Atari environment, got CartPole-v1'):
        create_envs('CartPole-v1', preprocess=True).reset()


# ------------------------------------------------------------- Atari as DeepMind trained
def play_randomly(envs, steps: int, actions=None, seed: int = 0):
    """Step ``envs`` with random (or given) actions; return learner rewards, learner ends and game scores."""
    from xagents.envs.creation import EpisodeScores

    rng = np.random.default_rng(seed)
    envs.reset(seed=seed)
    scores, rewards, ends, games = EpisodeScores(envs), [], 0, []
    for _ in range(steps):
        chosen = rng.integers(0, envs.single_action_space.n, envs.num_envs) if actions is None else actions
        _, reward, terminated, truncated, info = envs.step(chosen)
        rewards.append(reward)
        ends += int((terminated | truncated).sum())
        games.extend(scores.update(reward, terminated | truncated, info)[1])
    return np.concatenate(rewards), ends, games


@pytest.mark.parametrize('ale_vector', [False, True], ids=['python-wrappers', 'ale-vector'])
def test_a_lost_life_ends_the_learners_episode_but_not_the_game(ale_vector):
    envs = create_envs('BreakoutNoFrameskip-v4', n_envs=2, seed=0, ale_vector=ale_vector)
    _, ends, games = play_randomly(envs, 1500)
    assert len(games) >= 4 and ends >= 5 * len(games)  # 5 lives a game
    assert ends <= 5 * (len(games) + 2)  # and nothing else ends one
    envs = create_envs('BreakoutNoFrameskip-v4', n_envs=2, seed=0, terminal_on_life_loss=False, ale_vector=ale_vector)
    _, ends, games = play_randomly(envs, 1500)
    assert len(games) >= 4 and ends == len(games)


def test_fire_reset_launches_the_ball_only_where_the_game_needs_it():
    # Breakout waits for FIRE after every (re)start: doing nothing loses no life unless the wrapper fires.
    noop = np.zeros(1, np.int64)
    _, ends, _ = play_randomly(create_envs('BreakoutNoFrameskip-v4', seed=0, ale_vector=False), 400, noop)
    assert ends >= 3
    _, ends, _ = play_randomly(create_envs('BreakoutNoFrameskip-v4', seed=0, fire_reset=False, ale_vector=False), 400,
                               noop)
    assert ends == 0
    # ale-py's vector env fires at the start of a game only: after the first lost life the agent must press FIRE.
    _, ends, _ = play_randomly(create_envs('BreakoutNoFrameskip-v4', seed=0), 400, noop)
    assert ends == 1
    _, ends, _ = play_randomly(create_envs('BreakoutNoFrameskip-v4', seed=0, fire_reset=False), 400, noop)
    assert ends == 0
    assert not needs_fire(gym.make('FreewayNoFrameskip-v4'))  # NOOP, UP, DOWN: no FIRE wrapper
    assert needs_fire(gym.make('PongNoFrameskip-v4'))


class RawScore(gym.Wrapper):
    """Sums the raw env's rewards per game: an oracle beside the one ``make_env`` reports."""

    def reset(self, **kwargs):
        self.total = 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.total += reward
        return observation, reward, terminated, truncated, info


def test_learner_rewards_are_clipped_and_game_scores_are_not():
    raw = []
    env = make_env('SpaceInvadersNoFrameskip-v4', raw_wrapper=lambda e: raw.append(RawScore(e)) or raw[-1])
    env.reset(seed=0)
    rng, learner, ends = np.random.default_rng(0), [], 0
    while True:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(6)))
        learner.append(reward)
        if 'episode' in info:
            break
        if terminated or truncated:  # a life lost: the learner's episode restarts, the game goes on
            ends += 1
            env.reset()
    assert set(np.unique(learner)) <= {-1.0, 0.0, 1.0}
    assert ends == 2  # three lives
    assert info['episode']['r'] == raw[0].total > sum(learner) > 0  # aliens are worth 5 to 30 points
    unclipped = make_env('SpaceInvadersNoFrameskip-v4', clip_rewards=False)
    unclipped.reset(seed=0)
    rewards = [unclipped.step(int(rng.integers(6)))[1] for _ in range(300)]
    assert max(rewards) >= 5


def test_agents_report_whole_games_with_unclipped_scores(workdir):
    from xagents import DQN

    agent = DQN.from_env('SpaceInvadersNoFrameskip-v4', seed=0, n_envs=2, buffer_max_size=4000,
                         buffer_initial_size=4000, history_checkpoint='h.parquet', quiet=True)
    agent.fit(max_steps=4000)  # the random warm-up: no network runs
    history = pd.read_parquet('h.parquet')
    assert len(history) >= 2 and (history['episode_reward'] % 5 == 0).all()
    assert history['episode_reward'].max() > 50
    assert np.abs(agent.buffer.sample(1000).rewards).max() == 1.0  # what the learner sees
