"""ACER: Retrace targets, the trust-region projection, the segment buffer, the CLI's checks, learning."""
from __future__ import annotations

import os
import subprocess

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from xagents.acer import ACER
from xagents.replay.segments import SegmentBuffer, TrajectorySegment
from xagents.maths.optimization import retrace_targets, trust_region_projection

def test_retrace_targets_three_steps_by_hand():
    # Two envs, T = 3, gamma = 0.9, columns: env 0 | env 1 (whose episode ends after step 1).
    rewards = np.array([[1, 1], [2, 1], [3, 1]], np.float32)
    dones = np.array([[0, 0], [0, 1], [0, 0]], np.float32)
    q_taken = np.array([[0.5, 0], [1.0, 0], [1.5, 0]], np.float32)
    values = np.array([[0.4, 1], [0.8, 1], [1.2, 1]], np.float32)
    rho_bar = np.array([[1.0, 1], [0.5, 1], [0.2, 1]], np.float32)
    last_values = np.array([2.0, 10.0], np.float32)
    # env 0: Q2 = 3 + 0.9 * 2 = 4.8; carried: 0.2 * (4.8 - 1.5) + 1.2 = 1.86
    #        Q1 = 2 + 0.9 * 1.86 = 3.674; carried: 0.5 * (3.674 - 1.0) + 0.8 = 2.137
    #        Q0 = 1 + 0.9 * 2.137 = 2.9233
    # env 1: Q2 = 1 + 0.9 * 10 = 10; Q1 = 1 (episode ended: no bootstrap);
    #        carried: 1 * (1 - 0) + 1 = 2; Q0 = 1 + 0.9 * 2 = 2.8
    expected = [[2.9233, 2.8], [3.674, 1.0], [4.8, 10.0]]
    targets = retrace_targets(rewards, dones, q_taken, values, rho_bar, last_values, 0.9)
    np.testing.assert_allclose(targets, expected, rtol=1e-5)
    graph = tf.function(retrace_targets)
    np.testing.assert_allclose(graph(rewards, dones, q_taken, values, rho_bar, last_values, 0.9),
                               expected, rtol=1e-5)


def test_trust_region_projection_by_hand_and_bound():
    g = tf.constant([[1.0, 0.0], [0.2, 0.1]])
    k = tf.constant([[1.0, 1.0], [1.0, 1.0]])
    # Row 0: k.g = 1 > 0.5 -> z = g - (1 - 0.5) / 2 * k = [0.75, -0.25]; row 1: k.g = 0.3 <= 0.5 -> z = g.
    np.testing.assert_allclose(trust_region_projection(g, k, 0.5), [[0.75, -0.25], [0.2, 0.1]])
    rng = np.random.default_rng(0)
    g, k = rng.standard_normal((1000, 6)), rng.standard_normal((1000, 6))
    z = trust_region_projection(g, k, 0.3).numpy()
    k_dot_z, k_dot_g = (k * z).sum(-1), (k * g).sum(-1)
    assert np.all(k_dot_z <= 0.3 + 1e-9)
    np.testing.assert_allclose(k_dot_z[k_dot_g > 0.3], 0.3)
    np.testing.assert_array_equal(z[k_dot_g <= 0.3], g[k_dot_g <= 0.3])


def segment(value: float, n_steps=3, n_envs=2) -> TrajectorySegment:
    """A segment whose every entry encodes ``value`` + 0.1 * env column."""
    column = value + 0.1 * np.arange(n_envs, dtype=np.float32)
    return TrajectorySegment(np.broadcast_to(column[:, None], (n_steps + 1, n_envs, 4)),
                             np.full((n_steps, n_envs), int(value)),
                             np.broadcast_to(column, (n_steps, n_envs)),
                             np.broadcast_to(column, (n_steps, n_envs)),
                             np.broadcast_to(column[:, None], (n_steps, n_envs, 2)))


def test_segment_buffer_ring_and_sampling():
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    buffer = SegmentBuffer(3, 3, 2, space, gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ValueError, match='empty'):
        buffer.sample()
    for value in range(5):  # segments 0 and 1 are overwritten by 3 and 4
        buffer.add(segment(value))
    assert len(buffer) == 3
    stored = set()
    for _ in range(50):
        batch = buffer.sample()
        assert batch.observations.shape == (4, 2, 4) and batch.policies.shape == (3, 2, 2)
        assert batch.actions.shape == (3, 2) and batch.rewards.dtype == np.float32
        for env in range(2):
            value = batch.actions[0, env]  # each column comes whole from one segment, its own column
            np.testing.assert_allclose(batch.observations[:, env], value + 0.1 * env)
            np.testing.assert_allclose(batch.rewards[:, env], value + 0.1 * env)
            np.testing.assert_allclose(batch.policies[:, env], value + 0.1 * env)
            stored.add(int(value))
    assert stored == {2, 3, 4}
    with pytest.raises(ValueError, match=r'expected rewards of shape \(3, 2\)'):
        buffer.add(segment(0)._replace(rewards=np.zeros((2, 2))))


def test_atari_segments_store_each_frame_once_and_rebuild_every_stack():
    """Real Breakout frames, with lives lost inside segments: every sampled observation equals the
    stack the env emitted, and a segment costs n_steps + 4 frames per env instead of 4 (n_steps + 1)."""
    from xagents.envs.creation import create_envs

    envs = create_envs('BreakoutNoFrameskip-v4', n_envs=2, seed=0)
    space, steps = envs.single_observation_space, 20
    buffer = SegmentBuffer(6, steps, 2, space, envs.single_action_space, seed=0, frame_stack_axis=-1)
    whole = SegmentBuffer(6, steps, 2, space, envs.single_action_space)
    assert buffer.nbytes < 0.3 * whole.nbytes
    rng, observation, segments = np.random.default_rng(0), envs.reset(seed=0)[0], []
    for _ in range(6):
        observations, dones = [observation], []
        for _ in range(steps):
            observation, _, terminated, truncated, _ = envs.step(rng.integers(0, 4, 2))
            observations.append(observation)
            dones.append(terminated | truncated)
        segments.append(TrajectorySegment(np.stack(observations), np.zeros((steps, 2), np.int64),
                                          np.zeros((steps, 2), np.float32), np.array(dones, np.float32),
                                          np.full((steps, 2, 4), 0.25, np.float32)))
        buffer.add(segments[-1])
    resets_checked = 0
    for _ in range(20):
        batch = buffer.sample()
        for env in range(2):
            # The column equals, frame for frame, that column of exactly one stored segment.
            matches = [s for s in segments if np.array_equal(s.observations[:, env], batch.observations[:, env])]
            assert len(matches) == 1
            resets_checked += int(batch.dones[:, env].sum())
    assert resets_checked >= 3  # lives lost inside segments: stacks restarting mid-segment were rebuilt too


def fixed_segment(agent, steps: int = 1):
    """A segment collected after ``steps`` of training (at least one update, which starts the envs)."""
    agent.fit(max_steps=steps)
    return agent.collect()


@pytest.mark.parametrize('trust_region', [True, False])
def test_trust_region_bounds_linearised_kl_on_fixed_batch(trust_region):
    """Each sample's adjusted step z on the policy's probabilities keeps k.z <= delta, k the
    gradient of KL(average || pi); without the trust region the same batch breaks the bound.

    The first-order bound is what ACER's delta constrains (Wang et al. 2016, eq. 12): a step of
    size eta along z changes KL(average || pi) by eta k.z + O(eta^2), checked here too.
    """
    delta = 0.05
    agent = ACER.from_env('CartPole-v1', seed=4, n_envs=4, n_steps=10, delta=delta, buffer_initial_size=1,
                          replay_ratio=0.0, trust_region=trust_region, quiet=True)
    # Early on, Q ~ 0 makes every advantage positive, and a step raising pi(a) in the probability
    # coordinates lowers KL(average || pi): the bound only bites once Q has learned (A < 0 exists),
    # which RMSProp's small first steps (its average starts at ones) put some 10k steps off.
    batch = fixed_segment(agent, 16_000)
    with tf.GradientTape() as tape:
        objective, _, probs, _ = agent.losses(*batch)
    g = tape.gradient(objective, probs).numpy()
    average_probs = tf.nn.softmax(agent.average(batch.observations[:-1].reshape(-1, 4))[0]).numpy()
    average_probs = average_probs.reshape(probs.shape).astype(np.float64)
    probs, g = probs.numpy().astype(np.float64), g.astype(np.float64)
    k = -average_probs / probs
    z = trust_region_projection(g, k, delta).numpy() if trust_region else g
    linear_kl = (k * z).sum(-1)
    metrics = agent.train_step(*batch)
    if trust_region:
        assert linear_kl.max() <= delta * (1 + 1e-5)
        assert float(metrics['linear_kl']) <= delta * (1 + 1e-4)  # float32 in the graph
        eta = 1e-6  # small enough for the second-order term to stay below 1 % of the first

        def kl(p):
            return (average_probs * np.log(average_probs / p)).sum(-1)

        assert np.all(kl(probs + eta * z) - kl(probs) <= 1.01 * eta * delta)
    else:
        assert linear_kl.max() > delta and float(metrics['linear_kl']) > delta


def test_update_changes_weights_and_average_follows():
    agent = ACER.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=5, buffer_initial_size=1, quiet=True,
                          ema_alpha=0.9)
    batch = fixed_segment(agent)
    model_before = [w.numpy() for w in agent.model.weights]
    average_before = [w.numpy() for w in agent.average.weights]
    metrics = agent.train_step(*batch)
    assert all(np.isfinite(float(value)) for value in metrics.values())
    for old, old_average, new, new_average in zip(model_before, average_before, agent.model.weights,
                                                  agent.average.weights):
        np.testing.assert_allclose(new_average.numpy(), 0.9 * old_average + 0.1 * new.numpy(), atol=1e-6)
    assert any(not np.array_equal(old, new.numpy()) for old, new in zip(model_before, agent.model.weights))


def test_replay_starts_after_buffer_initial_size_segments():
    agent = ACER.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=5, buffer_initial_size=3, replay_ratio=50.0,
                          quiet=True)
    agent.fit(max_steps=20)  # two segments: on-policy updates only
    assert len(agent.buffer) == 2 and int(agent.optimizer.iterations) == 2
    agent.fit(max_steps=30, total=True)  # the third segment starts replay: Poisson(50) more updates
    assert len(agent.buffer) == 3 and int(agent.optimizer.iterations) > 20


def test_linear_learning_rate_schedule():
    agent = ACER.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=5, lr=1e-3, lr_decay_steps=40,
                          quiet=True)
    agent.fit(max_steps=20)  # the shared loop's linear decay reaches ACER's RMSProp
    np.testing.assert_allclose(float(agent.optimizer.learning_rate), 1e-3 * (1 - 20 / 40), rtol=1e-6)


def test_checkpoint_round_trip_resets_average(tmp_path):
    path = str(tmp_path / 'acer.tf')
    agent = ACER.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=5, quiet=True)
    agent.fit(max_steps=50)
    agent.save_models([path])
    other = ACER.from_env('CartPole-v1', seed=1, n_envs=2, n_steps=5, quiet=True)
    other.load_weights([path])
    observations = agent.envs.reset(seed=2)[0]
    np.testing.assert_allclose(other.forward(observations)[0], agent.forward(observations)[0], rtol=1e-6)
    for model, average in zip(other.model.weights, other.average.weights):
        np.testing.assert_array_equal(model.numpy(), average.numpy())
    for mine, theirs in zip(agent.optimizer.variables, other.optimizer.variables):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_atari_model_updates():
    agent = ACER.from_env('PongNoFrameskip-v4', seed=0, n_envs=2, n_steps=4, async_envs=False,
                          buffer_max_size=4, buffer_initial_size=1, replay_ratio=1.0, quiet=True)
    assert agent.policy_and_q.numpy is None and agent.buffer.observations.dtype == np.uint8
    run = agent.fit(max_steps=24)
    assert np.isfinite(float(run.metrics['q_loss']))


def test_bad_hyperparameters_raise():
    for bad in ({'delta': 0.0}, {'delta': -1.0}, {'replay_ratio': -0.5}, {'importance_c': 0.0},
                {'buffer_initial_size': 10, 'buffer_max_size': 5}, {'ema_alpha': 1.0}):
        with pytest.raises(ValueError, match='expected'):
            ACER.from_env('CartPole-v1', n_envs=2, quiet=True, **bad)
    with pytest.raises(ValueError, match='ACER supports Discrete action spaces'):
        ACER.from_env('Pendulum-v1', n_envs=2, quiet=True)


@pytest.mark.parametrize('argv, message', [
    (['--env', 'CartPole-v1', '--delta', '0'], 'expected delta > 0, got 0.0'),
    (['--env', 'CartPole-v1', '--replay-ratio', '-1'], 'expected replay_ratio >= 0, got -1.0'),
    (['--env', 'Pendulum-v1'], 'ACER supports Discrete action spaces, got Box(-2.0, 2.0, (1,), float32) '
     '(Box actions: PPO, A2C, TRPO, DDPG, TD3, SAC, TQC, CrossQ)'),
])
def test_cli_rejects_bad_input_in_one_line(argv, message, tmp_path, xagents_command):
    result = subprocess.run(xagents_command + ['train', 'acer', '--max-steps', '100'] + argv, capture_output=True,
                            text=True, cwd=tmp_path, env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f'xagents train acer: error: {message}']


def test_learns_cartpole():
    agent = ACER.from_env('CartPole-v1', seed=1, quiet=True)  # tuned defaults, replay included
    run = agent.fit(target_reward=150, max_steps=50_000)  # a random policy scores ~22
    assert run.mean_reward >= 150
