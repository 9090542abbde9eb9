"""Environment creation: vectorising, seeding, Atari preprocessing, same-step autoreset."""
import gymnasium as gym
import numpy as np
import pytest

from xagents.utils.envs import AUTORESET_MODE, create_envs, is_atari


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


def test_async_envs_step_in_subprocesses():
    envs = create_envs('CartPole-v1', n_envs=2, seed=0, async_envs=True)
    try:
        assert isinstance(envs, gym.vector.AsyncVectorEnv)
        envs.reset(seed=0)
        observations, rewards, *_ = envs.step(np.zeros(2, np.int64))
        assert observations.shape == (2, 4) and rewards.tolist() == [1.0, 1.0]
    finally:
        envs.close()


@pytest.mark.parametrize('env_id, message', [
    ('CartPol-v1', "unknown environment id 'CartPol-v1' (did you mean CartPole-v0, CartPole-v1?)"),
    ('NoSuchGame-v9', "unknown environment id 'NoSuchGame-v9'"),
])
def test_unknown_env_id(env_id, message):
    with pytest.raises(ValueError) as error:
        create_envs(env_id)
    assert str(error.value) == message or str(error.value).startswith(message)


def test_preprocess_refuses_non_image_env():
    with pytest.raises(ValueError, match='--preprocess expects an image environment'):
        create_envs('CartPole-v1', preprocess=True).reset()
