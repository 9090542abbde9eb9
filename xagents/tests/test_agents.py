"""Rules the shared loop applies to every agent: action spaces, best reward, plateaus, the entropy bonus."""
from __future__ import annotations

import logging
import re

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest

from xagents import A2C, ACER, DQN, PPO, SAC, TD3, TRPO


class ShiftedCartPole(gym.ActionWrapper):
    """CartPole whose actions are ``Discrete(2, start=-1)``; it refuses any action outside that space."""

    received: set = set()

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(gym.make('CartPole-v1', render_mode=render_mode))
        self.action_space = gym.spaces.Discrete(2, start=-1)

    def action(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f'action {action!r} is not in {self.action_space}')
        ShiftedCartPole.received.add(int(action))
        return int(action) + 1


class Scores(gym.Env):
    """Two-step episodes returning ``slope * k`` in an env's k-th episode (the test sets the trend)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, slope: float = 1.0, render_mode: str | None = None) -> None:
        self.slope, self.episode, self.t = slope, -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), self.slope * self.episode / 2, self.t == 2, False, {}


class SquareActions(gym.Env):
    """Actions are 2x2 matrices in [-1, 3]; the reward is minus their distance to a fixed matrix."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 3.0, (2, 2), np.float32)
    received: list = []

    def __init__(self, render_mode: str | None = None) -> None:
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        if not self.action_space.contains(np.asarray(action, np.float32)):
            raise ValueError(f'action {action!r} is not in {self.action_space}')
        SquareActions.received.append(np.array(action))
        self.t += 1
        return np.zeros(3, np.float32), -float(np.abs(action - [[0, 1], [2, 3]]).sum()), False, self.t == 5, {}


gym.register('ShiftedCartPole-v0', entry_point=ShiftedCartPole)
gym.register('SquareActions-v0', entry_point=SquareActions)
gym.register('RisingScores-v0', entry_point=Scores, kwargs={'slope': 1.0})
gym.register('FlatScores-v0', entry_point=Scores, kwargs={'slope': 0.0})

SMALL = {
    PPO: {'n_steps': 32}, A2C: {}, TRPO: {'n_steps': 64}, ACER: {'buffer_initial_size': 2},
    DQN: {'buffer_initial_size': 64, 'buffer_batch_size': 32, 'update_every': 4},
    SAC: {'buffer_initial_size': 64, 'buffer_batch_size': 32, 'update_every': 4, 'gradient_steps': 4},
}


@pytest.mark.parametrize('agent_class', list(SMALL))
def test_discrete_actions_are_offset_by_the_space_start_for_every_agent(agent_class):
    """Inside an agent actions are indices from 0; the env gets them shifted by ``start`` (here -1)."""
    ShiftedCartPole.received = set()
    agent = agent_class.from_env('ShiftedCartPole-v0', seed=0, n_envs=2, quiet=True, **SMALL[agent_class])
    agent.fit(max_steps=600)
    assert ShiftedCartPole.received == {-1, 0}
    assert agent.evaluate(2).mean > 0
    assert agent.play(max_steps=20).mean > 0
    assert set(agent.act(agent.observations).tolist()) <= {-1, 0}


def progress_lines(caplog) -> list[tuple[float, float]]:
    pattern = re.compile(r'mean reward (\S+)  best reward (\S+)')
    return [(float(match[1]), float(match[2])) for record in caplog.records
            if (match := pattern.search(record.getMessage())) and 'n/a' not in (match[1], match[2])]


def windowed_best(history: pd.DataFrame, window: int = 100) -> np.ndarray:
    """The running maximum of the mean reward over full windows: -inf until ``window`` episodes have finished."""
    full = np.arange(len(history)) >= window - 1
    return np.maximum.accumulate(np.where(full, history['mean_reward'], -np.inf))


def test_best_reward_is_one_number_in_progress_lines_history_and_resume(workdir, caplog):
    """Best = the highest mean reward over a full window of 100 episodes: never below the mean beside it once
    there is one, the history's running maximum of mean_reward from the 100th episode on (none before), and
    carried on by a resumed run."""
    caplog.set_level(logging.INFO, logger='xagents')
    agent = PPO.from_env('CartPole-v1', seed=0, log_frequency=1, checkpoints=['w.tf'], history_checkpoint='h.parquet')
    agent.fit(max_steps=12_000)
    lines = progress_lines(caplog)
    assert len(lines) > 100 and all(best >= mean for mean, best in lines)
    history = pd.read_parquet('h.parquet')
    np.testing.assert_array_equal(history['best_reward'], windowed_best(history))
    assert lines[-1][1] == pytest.approx(history['best_reward'].iloc[-1], abs=0.005)
    resumed = PPO.from_env('CartPole-v1', seed=1, log_frequency=1, checkpoints=['w.tf'],
                           history_checkpoint='h.parquet', quiet=True)
    resumed.load_weights(['w.tf'])
    run = resumed.fit(max_steps=16_000)
    continued = pd.read_parquet('h.parquet')
    assert len(continued) > len(history)
    np.testing.assert_array_equal(continued['best_reward'], windowed_best(continued))
    assert run.best_reward == continued['best_reward'].iloc[-1]


def plateau_agent(env_id: str) -> PPO:
    """PPO logging a progress line per episode (128 per rollout), plateau rules from the start."""
    return PPO.from_env(env_id, seed=0, n_envs=2, n_steps=128, lr=1e-3, log_frequency=1, reward_buffer_size=10,
                        plateau_start_steps=1, plateau_reduce_patience=2, plateau_reduce_factor=0.5,
                        early_stop_patience=2, quiet=True)


def test_a_run_that_keeps_improving_is_never_stopped_or_slowed():
    agent = plateau_agent('RisingScores-v0')
    run = agent.fit(max_steps=2560)
    assert agent.steps == 2560 and run.reason.startswith('Maximum steps (2560) reached')
    assert float(agent.optimizer.learning_rate) == pytest.approx(1e-3)


def test_a_flat_run_is_slowed_then_stopped_after_the_stated_number_of_lines():
    agent = plateau_agent('FlatScores-v0')
    run = agent.fit(max_steps=100_000)
    # The first line with a full window (the 10th episode) sets the best; then 2 lines without a new best
    # halve the rate, 2 more halve it again and end training: 14 episodes, inside the first rollout, which
    # ends the run.
    assert run.reason == 'Early stopping after 2 plateaus; best mean reward 0.00' and agent.steps == 256
    assert float(agent.optimizer.learning_rate) == pytest.approx(1e-3 * 0.25)
    assert len(run.history) == 128


def peaked(agent, bias: tuple[float, float] = (2.0, -2.0)):
    """Start the policy far from uniform (entropy ~0.09 nats, 0.69 at most) so the entropy bonus has room to act."""
    head = agent.models[agent.model_roles[0]].layer_graph.branches[0][-1]
    head.bias.assign(bias)
    agent.on_weights_changed()
    return agent


# A2C's and ACER's RMSProp start the squared-gradient average at ones (as TensorFlow 1's): decay 0.9
# (TF1's default) forgets them within these short runs, whose small gradients would otherwise barely move.
@pytest.mark.parametrize('agent_class, settings', [
    (PPO, {'n_steps': 32}),
    (A2C, {'lr': 0.05, 'rmsprop_alpha': 0.9}),
    (ACER, {'replay_ratio': 0.0, 'trust_region': False, 'n_steps': 5, 'lr': 0.02, 'rmsprop_alpha': 0.9}),
])
def test_entropy_bonus_raises_the_entropy_of_a_peaked_policy(agent_class, settings):
    """With the bonus dominant (CartPole's rewards are constant, the advantages small) entropy must
    rise; a sign error in the bonus would drive it down."""
    agent = peaked(agent_class.from_env('CartPole-v1', seed=0, n_envs=4, entropy_coef=1.0, quiet=True, **settings))
    before = _entropy(_policy(agent))
    agent.fit(max_steps=1200)
    assert _entropy(_policy(agent)) > before + 0.2


@pytest.mark.parametrize('agent_class, settings', [
    (PPO, {}), (A2C, {'lr': 0.01, 'rmsprop_alpha': 0.9, 'n_steps': 8, 'use_sde': False, 'log_std_init': 0.0}),
    (A2C, {'lr': 0.01, 'rmsprop_alpha': 0.9, 'n_steps': 8, 'use_sde': True, 'log_std_init': -2.0}),  # gSDE: the noise matrix's sigma
])
def test_entropy_bonus_widens_a_gaussian_policy(agent_class, settings):
    agent = agent_class.from_env('Pendulum-v1', seed=0, n_envs=4, entropy_coef=1.0, quiet=True, **settings)
    agent.fit(max_steps=8192)
    assert agent.model.log_std.numpy().mean() > agent.log_std_init + 0.1


def _policy(agent) -> np.ndarray:
    """Action probabilities of the agent's current policy on a fixed set of CartPole states."""
    states = np.random.default_rng(0).uniform(-0.05, 0.05, (64, 4)).astype(np.float32)
    outputs = agent.forward(states)[0]
    if isinstance(agent, ACER):
        return outputs  # ACER's forward returns probabilities, the others logits
    exponentials = np.exp(outputs - outputs.max(-1, keepdims=True))
    return exponentials / exponentials.sum(-1, keepdims=True)


def _entropy(probabilities: np.ndarray) -> float:
    return float(-(probabilities * np.log(probabilities + 1e-12)).sum(-1).mean())


@pytest.mark.parametrize('agent_class', [DQN, ACER])
def test_an_agents_random_streams_are_shared_with_no_env(agent_class):
    """Gymnasium seeds env i's generator from seed + i; an agent drawing its actions (or replay samples)
    from the same stream would repeat an env's reset draws in its own choices."""
    from gymnasium.utils.seeding import np_random

    agent = agent_class.from_env('CartPole-v1', seed=0, n_envs=2, quiet=True, **SMALL[agent_class])
    envs = [np_random(0 + i)[0] for i in range(2)]  # what envs.reset(seed=0) gives env i
    streams = envs + [agent.rng, agent.buffer.rng]
    draws = {tuple(stream.bit_generator.random_raw(4)) for stream in streams}
    assert len(draws) == 4


@pytest.mark.parametrize('agent_class, settings', [
    (PPO, {'n_steps': 32}), (A2C, {}), (TRPO, {'n_steps': 64}),
    (SAC, {'buffer_initial_size': 64, 'buffer_batch_size': 32, 'update_every': 4, 'gradient_steps': 4}),
    (TD3, {'buffer_initial_size': 64, 'buffer_batch_size': 32, 'update_every': 4, 'gradient_steps': 4}),
])
def test_matrix_shaped_box_actions_reach_the_env_in_their_shape(agent_class, settings):
    SquareActions.received = []
    agent = agent_class.from_env('SquareActions-v0', seed=0, n_envs=2, quiet=True, **settings)
    agent.fit(max_steps=400)
    assert agent.evaluate(2).mean < 0 and agent.play().mean < 0
    received = np.array(SquareActions.received)
    assert received.shape[1:] == (2, 2) and received.min() >= -1 and received.max() <= 3
    assert received.std(axis=0).min() > 0  # every entry is acted on, not one repeated value


def test_discrete_observations_are_one_hot_and_tuples_are_refused_in_one_line():
    agent = PPO.from_env('FrozenLake-v1', seed=0, n_envs=2, n_steps=32, quiet=True)
    assert agent.envs.single_observation_space == gym.spaces.Box(0.0, 1.0, (16,), np.float32)
    run = agent.fit(max_steps=500)
    assert run.games > 0 and set(np.unique(agent.observations)) <= {0.0, 1.0}
    with pytest.raises(ValueError, match=r'^PPO expects Box or Dict observations \(envs made by create_envs one-hot encode '
                                         r'Discrete ones\), got Tuple\(Discrete\(32\), Discrete\(11\), Discrete\(2\)\)$'):
        PPO.from_env('Blackjack-v1', quiet=True)
