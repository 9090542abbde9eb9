"""An agent's export gives, in its own runtime, the actions ``predict(deterministic=True)`` gives."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from xagents import DQN, PPO, SAC
from xagents.registry import AGENTS
from xagents.registry import agent_class as xagents_agent
from xagents.storage.export import FORMATS, load_exported

RUNTIMES = {'tflite': 'ai_edge_litert', 'onnx': 'onnxruntime'}


def env_observations(agent, n: int = 100) -> np.ndarray:
    """``n`` observations from the agent's own (preprocessed) env, played with random actions."""
    envs = agent.envs
    observations, found = envs.reset(seed=7)[0], []
    envs.action_space.seed(7)
    while len(found) * envs.num_envs < n:
        found.append(observations)
        observations = envs.step(envs.action_space.sample())[0]
    return np.concatenate(found)[:n]


def trained(agent_class, env_id, steps, **settings):
    agent = agent_class.from_env(env_id, seed=0, quiet=True, **settings)
    agent.fit(max_steps=steps)
    return agent


POLICIES = {
    'ppo-discrete': lambda: trained(PPO, 'CartPole-v1', 2048, normalize_observations=True),
    'sac-continuous': lambda: trained(SAC, 'Pendulum-v1', 600, buffer_initial_size=256, normalize_observations=True),
    'dqn': lambda: trained(DQN, 'CartPole-v1', 1200, buffer_initial_size=500, dueling=True),
    'ppo-atari-cnn': lambda: PPO.from_env('PongNoFrameskip-v4', seed=0, quiet=True, n_envs=2, async_envs=False),
}


@pytest.fixture(scope='module', params=list(POLICIES))
def agent(request):
    built = POLICIES[request.param]()
    yield built
    built.envs.close()


@pytest.mark.parametrize('format', FORMATS)
def test_an_export_acts_as_predict_does(agent, format, tmp_path):
    if format in RUNTIMES:
        pytest.importorskip(RUNTIMES[format])
        pytest.importorskip('tf2onnx' if format == 'onnx' else 'tensorflow')
    observations = env_observations(agent)
    path = agent.export(str(tmp_path / f'policy.{format}'), format)
    exported = load_exported(path, format)
    expected, _ = agent.predict(observations, deterministic=True)
    got = exported(observations)
    assert got.shape == expected.shape
    if isinstance(agent.envs.single_action_space, gym.spaces.Discrete):
        np.testing.assert_array_equal(got, expected)
        assert len(np.unique(expected)) > 1 or type(agent).__name__ == 'PPO'  # not a constant policy
    else:
        np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_array_equal(exported(observations[:1]), exported(observations)[:1])  # one observation


@pytest.mark.parametrize('agent_name', sorted(AGENTS))
def test_every_agent_exports_its_greedy_policy(agent_name, tmp_path):
    """Untrained, on a small env of each action kind it plays: the SavedModel acts as predict does."""
    agent_class = xagents_agent(agent_name)
    env_id = 'CartPole-v1' if gym.spaces.Discrete in agent_class.supported_action_spaces else 'Pendulum-v1'
    built = agent_class.from_env(env_id, seed=0, quiet=True, n_envs=2)
    try:
        observations = env_observations(built, 20)
        exported = load_exported(built.export(str(tmp_path / 'policy'), 'saved_model'), 'saved_model')
        np.testing.assert_allclose(exported(observations), built.predict(observations, deterministic=True)[0], atol=1e-5)
    finally:
        built.envs.close()
