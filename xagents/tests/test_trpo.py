"""TRPO: conjugate gradient, the trust-region step on a fixed batch, the CLI's checks, learning."""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from scipy import special, stats

from xagents.trpo import TRPO
from xagents.maths.optimization import assign_flat, conjugate_gradient, flat_concat
from xagents.maths.returns import gae

def test_conjugate_gradient_solves_spd_system():
    # A = [[4, 1], [1, 3]], b = [1, 2]: x = A^-1 b = [1, 7] / 11.
    a = tf.constant([[4.0, 1.0], [1.0, 3.0]], tf.float64)
    b = tf.constant([1.0, 2.0], tf.float64)

    def product(v):
        return tf.linalg.matvec(a, v)

    np.testing.assert_allclose(conjugate_gradient(product, b, 10), [1 / 11, 7 / 11], rtol=1e-12)
    graph = tf.function(lambda b, n: conjugate_gradient(product, b, n))
    np.testing.assert_allclose(graph(b, tf.constant(10)), [1 / 11, 7 / 11], rtol=1e-12)
    # One iteration is a steepest-descent step from 0: x = (b.b / b.Ab) b = 5 / 20 * b.
    np.testing.assert_allclose(conjugate_gradient(product, b, 1), [0.25, 0.5], rtol=1e-12)
    # The tolerance stops it before any iteration when |b|^2 = 5 is already below it.
    np.testing.assert_allclose(conjugate_gradient(product, b, 10, residual_tolerance=6.0), [0, 0])


def test_conjugate_gradient_larger_system():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((20, 20))
    a = m @ m.T + 20 * np.eye(20)
    b = rng.standard_normal(20)
    product = lambda v: tf.linalg.matvec(tf.constant(a), v)  # noqa: E731
    # At most n = 20 iterations in exact arithmetic; the tolerance alone stops it earlier.
    x = conjugate_gradient(product, tf.constant(b), 20, residual_tolerance=1e-24)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-8, atol=1e-10)
    x = conjugate_gradient(product, tf.constant(b), 20, residual_tolerance=1e-6)
    assert np.sum((b - a @ x.numpy()) ** 2) < 1e-6


def test_flat_concat_and_assign_flat_round_trip():
    variables = [tf.Variable(tf.zeros((2, 3))), tf.Variable(tf.zeros(4))]
    assign_flat(variables, tf.range(10, dtype=tf.float32))
    np.testing.assert_array_equal(variables[0].numpy(), [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(variables[1].numpy(), [6, 7, 8, 9])
    np.testing.assert_array_equal(flat_concat(variables), np.arange(10))


def rollout_batch(agent):
    """A flattened rollout and its GAE advantages, as ``OnPolicy.train_once`` passes them."""
    rollout = agent.collect()
    last_values = agent.forward(agent.observations)[1]
    advantages, returns = gae(rollout.rewards, rollout.values, rollout.dones, last_values,
                              agent.gamma, agent.lam)
    n = agent.n_steps * agent.n_envs
    return (rollout.observations.reshape(n, *rollout.observations.shape[2:]),
            rollout.actions.reshape(n, *rollout.actions.shape[2:]),
            rollout.log_probs.reshape(n), advantages.reshape(n), returns.reshape(n))


def policy_state(agent, observations, actions):
    """The actor's distribution on a batch, from its outputs alone: parameters, log_std and the
    log-probabilities of ``actions``, computed with SciPy rather than the agent's distribution code."""
    params = agent.actor(observations).numpy().astype(np.float64)
    if agent.gaussian:
        log_std = agent.actor.log_std.numpy().astype(np.float64)
        return params, log_std, stats.norm.logpdf(actions, params, np.exp(log_std)).sum(-1)
    log_probs = special.log_softmax(params, -1)
    return params, None, log_probs[np.arange(len(actions)), actions]


def mean_kl(agent, old, new):
    """Mean KL(old || new) from closed forms: sum p log(p / q), or the Gaussian one per dimension."""
    if agent.gaussian:
        (old_mean, old_log_std, _), (mean, log_std, _) = old, new
        terms = (log_std - old_log_std + (np.exp(2 * old_log_std) + (old_mean - mean) ** 2)
                 / (2 * np.exp(2 * log_std)) - 0.5)
        return float(terms.sum(-1).mean())
    old_log_p, log_p = special.log_softmax(old[0], -1), special.log_softmax(new[0], -1)
    return float((np.exp(old_log_p) * (old_log_p - log_p)).sum(-1).mean())


@pytest.mark.parametrize('env_id, max_kl', [('CartPole-v1', 0.01), ('CartPole-v1', 2.0),
                                            ('Pendulum-v1', 0.01)])
def test_step_stays_in_trust_region_and_improves_surrogate(env_id, max_kl):
    """On fixed rollouts, each update keeps mean KL(old || new) <= max_kl and raises the surrogate.

    max_kl = 2 lets the quadratic model propose a step the line search has to shrink (by
    0.8 ** 10 or more: hence 40 tries).
    """
    agent = TRPO.from_env(env_id, seed=1, n_envs=2, n_steps=128, max_kl=max_kl, line_search_steps=40,
                          quiet=True)
    agent.fit(max_steps=1)  # starts the envs (and makes a first update)
    fractions = []
    for _ in range(3):
        observations, actions, log_probs, advantages, returns = rollout_batch(agent)
        normalized = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        old = policy_state(agent, observations, actions)
        metrics = agent.train_step(observations, actions, log_probs, advantages, returns)
        new = policy_state(agent, observations, actions)
        kl = mean_kl(agent, old, new)
        gain = float(np.mean((np.exp(new[2] - old[2]) - 1) * normalized))
        assert 0 < kl <= max_kl * (1 + 1e-4)
        assert gain > 0
        np.testing.assert_allclose(kl, float(metrics['kl']), rtol=1e-3)
        fractions.append(float(metrics['step_fraction']))
        agent.on_weights_changed()
    if max_kl > 1:
        assert min(fractions) < 1  # the line search did backtrack


def test_line_search_rejects_step_without_improvement():
    """With zero advantages no step raises the surrogate: the policy must stay exactly as it was."""
    agent = TRPO.from_env('CartPole-v1', seed=0, n_envs=2, n_steps=64, quiet=True)
    observations = np.random.default_rng(0).normal(0, 0.1, (128, 4)).astype(np.float32)
    actions = np.arange(128) % 2
    before = [w.numpy() for w in agent.actor.weights]
    metrics = agent.train_step(observations, actions, np.zeros(128, np.float32),
                               np.zeros(128, np.float32), np.ones(128, np.float32))
    assert float(metrics['step_fraction']) == 0
    for old, new in zip(before, agent.actor.weights):
        np.testing.assert_array_equal(old, new.numpy())


def test_bad_hyperparameters_raise():
    for bad in ({'max_kl': 0.0}, {'max_kl': -0.01}, {'cg_iterations': 0}, {'line_search_shrink': 1.0},
                {'mini_batches': 3}):
        with pytest.raises(ValueError, match='expected'):
            TRPO.from_env('CartPole-v1', n_envs=2, n_steps=64, quiet=True, **bad)


@pytest.mark.parametrize('value', ['0', '-0.5'])
def test_cli_rejects_non_positive_max_kl(value, tmp_path, xagents_command):
    result = subprocess.run(xagents_command + ['train', 'trpo', '--env', 'CartPole-v1', '--max-steps', '100',
                                              '--max-kl', value], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [f'xagents train trpo: error: expected max_kl > 0, got {float(value)}']


def test_checkpoints_hold_actor_and_critic(tmp_path):
    paths = [str(tmp_path / 'actor.tf'), str(tmp_path / 'critic.tf')]
    agent = TRPO.from_env('Pendulum-v1', seed=0, n_envs=2, n_steps=64, checkpoints=paths, quiet=True)
    agent.fit(max_steps=512)
    agent.save_models()
    other = TRPO.from_env('Pendulum-v1', seed=1, n_envs=2, n_steps=64, quiet=True)
    other.load_weights(paths)
    for role in ('actor', 'critic'):
        for saved, loaded in zip(agent.models[role].weights, other.models[role].weights):
            np.testing.assert_array_equal(saved.numpy(), loaded.numpy())
    observations = agent.envs.reset(seed=3)[0]
    np.testing.assert_allclose(agent.forward(observations)[0], other.forward(observations)[0], rtol=1e-6)
    np.testing.assert_array_equal(agent.log_std_np, other.log_std_np)


def test_learns_cartpole():
    agent = TRPO.from_env('CartPole-v1', seed=0, quiet=True)  # tuned defaults: 2 envs x 512 steps
    run = agent.fit(target_reward=250, max_steps=70_000)  # a random policy scores ~22
    assert run.mean_reward >= 250
