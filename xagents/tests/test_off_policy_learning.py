"""Short seeded learning runs: each off-policy agent must clearly improve on its tuned settings.

The thresholds sit far above what random play scores (CartPole ~22, Pendulum ~-1200 to -1500)
and below the reference scores, which the full runs on the documentation's Results page reach.
"""
import pytest

from xagents.ddpg import DDPG
from xagents.dqn import DQN
from xagents.sac import SAC
from xagents.td3 import TD3
from xagents.tqc import TQC


def test_dqn_learns_cartpole():
    agent = DQN.from_env('CartPole-v1', seed=0, quiet=True)
    run = agent.fit(target_reward=150, max_steps=12_000, eval_frequency=2500, eval_episodes=5, stop_on='eval')
    assert run.eval_reward >= 150, run.eval_reward


@pytest.mark.parametrize('agent_class', [SAC, TD3, DDPG, TQC])
def test_continuous_agents_learn_pendulum(agent_class):
    agent = agent_class.from_env('Pendulum-v1', seed=0, reward_buffer_size=10, quiet=True)
    run = agent.fit(target_reward=-500, max_steps=10_000)
    assert len(run.reward_buffer) == 10 and run.mean_reward >= -500, run.mean_reward


def test_discrete_sac_learns_cartpole():
    agent = SAC.from_env('CartPole-v1', seed=0, quiet=True)
    run = agent.fit(target_reward=200, max_steps=12_000, eval_frequency=3000, eval_episodes=5, stop_on='eval')
    assert run.eval_reward >= 200, run.eval_reward


def test_dqn_with_every_extension_at_once_solves_cartpole():
    """Double + dueling + prioritised replay + 3-step returns together (Rainbow's DQN half)."""
    agent = DQN.from_env('CartPole-v1', seed=0, double=True, dueling=True, prioritized=True, return_steps=3, quiet=True)
    run = agent.fit(target_reward=475, max_steps=30_000, eval_frequency=2500, eval_episodes=5, stop_on='eval')
    assert run.eval_reward >= 475, run.eval_reward


@pytest.mark.parametrize('noise_type', ['ou_0.3', 'adaptive-param_0.2'])
def test_ddpg_learns_pendulum_with_each_kind_of_noise(noise_type):
    agent = DDPG.from_env('Pendulum-v1', seed=0, noise_type=noise_type, reward_buffer_size=10, quiet=True)
    run = agent.fit(target_reward=-500, max_steps=10_000)
    assert len(run.reward_buffer) == 10 and run.mean_reward >= -500, run.mean_reward
