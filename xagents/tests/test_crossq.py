"""CrossQ and its batch renormalisation: the layer against its equations in NumPy (warm-up, the clipped corrections,
no gradient through them, running statistics), a gradient step's losses and TD errors worked out from the paper's
equations (one joint pass over (s, a) and (s', a'), no target network, the actor against the critics' running
statistics), the delayed actor, acting with running statistics, and refused settings."""
import importlib.resources
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from xagents.crossq import CrossQ
from xagents.envs.creation import create_envs
from xagents.networks.batch_renorm import BatchRenorm
from xagents.networks.models import NumpyForward
from xagents.sac import SAC
from xagents.tests.test_off_policy import WEIGHTS, freeze, linear, tensors

EPSILON = 1e-3


def renormalised(x, moving_mean, moving_variance, warm: bool, r_max=3.0, d_max=5.0):
    """What a training call computes (sb3-contrib's BatchRenorm1d), in NumPy: the batch normalised by its own mean and
    unbiased variance, corrected by r and d once warm, written as normalising by a corrected mean and variance."""
    mean, variance = x.mean(0), x.var(0, ddof=1)
    r, d = np.ones_like(mean), np.zeros_like(mean)
    if warm:
        running_std = np.sqrt(moving_variance + EPSILON)
        r = np.clip(np.sqrt(variance + EPSILON) / running_std, 1 / r_max, r_max)
        d = np.clip((mean - moving_mean) / running_std, -d_max, d_max)
    centre, spread = mean - d * np.sqrt(variance) / r, variance / r ** 2
    return (x - centre) / np.sqrt(spread + EPSILON), r, d


def layer_with(moving_mean, moving_variance, steps: int, warmup_steps: int = 0, momentum: float = 0.01):
    layer = BatchRenorm(momentum=momentum, warmup_steps=warmup_steps)
    layer.build((None, len(moving_mean)))
    layer.moving_mean.assign(np.asarray(moving_mean, np.float32))
    layer.moving_variance.assign(np.asarray(moving_variance, np.float32))
    layer.steps.assign(steps)
    return layer


X = np.array([[1.0, 2.0], [3.0, -1.0], [2.0, 0.5], [6.0, 3.5]], np.float32)  # means 3, 1.25; variances 14/3, 3.75


def test_during_warm_up_a_training_call_is_batch_normalisation_and_moves_the_running_statistics():
    layer = layer_with([0.5, -1.0], [2.0, 0.5], steps=5, warmup_steps=5)  # steps > warmup_steps: not yet
    layer.gamma.assign([2.0, 1.0])
    layer.beta.assign([0.0, -1.0])
    expected, _, _ = renormalised(X, None, None, warm=False)
    np.testing.assert_allclose(layer(X, training=True), expected * [2.0, 1.0] + [0.0, -1.0], rtol=1e-5)
    np.testing.assert_allclose(layer.moving_mean.numpy(), [0.5 + 0.01 * 2.5, -1 + 0.01 * 2.25], rtol=1e-6)
    np.testing.assert_allclose(layer.moving_variance.numpy(), [2 + 0.01 * (14 / 3 - 2), 0.5 + 0.01 * 3.25], rtol=1e-6)
    assert int(layer.steps.numpy()) == 6


def test_once_warm_the_corrections_are_clipped_and_outside_training_the_running_statistics_normalise():
    # Feature 0: batch std 2.16 against a running 0.5 (r = 4.3, clipped to 3), d = 0.2; feature 1: r = 1.94 / 0.71,
    # and the batch mean 1.25 lies 6 running stds above the running -3 (d clipped to 5).
    moving_mean, moving_variance = np.array([2.9, -3.0], np.float32), np.array([0.25, 0.5], np.float32)
    layer = layer_with(moving_mean, moving_variance, steps=1, warmup_steps=0)
    expected, r, d = renormalised(X, moving_mean, moving_variance, warm=True)
    assert r[0] == 3 and d[1] == 5 and 1 / 3 < r[1] < 3 and abs(d[0]) < 5  # both clips, both free values, are used
    np.testing.assert_allclose(layer(X, training=True), expected, rtol=1e-5)
    after = layer.moving_mean.numpy().copy(), layer.moving_variance.numpy().copy()
    inference = (X - after[0]) / np.sqrt(after[1] + EPSILON)
    np.testing.assert_allclose(layer(X), inference, rtol=1e-5)
    np.testing.assert_allclose(layer(X, training=False), inference, rtol=1e-5)
    assert int(layer.steps.numpy()) == 2 and np.array_equal(layer.moving_mean.numpy(), after[0])


def renorm_reference(batches, warmup_steps: int, momentum: float, r_max: float = 3.0, d_max: float = 5.0):
    """Batch renormalisation's training calls in NumPy (Ioffe 2017, algorithm 1): each batch normalised by its own
    statistics, corrected by r and d from the running ones once past the warm-up, and the running statistics moved
    towards the batch's own mean and unbiased variance (never the corrected ones). The outputs and the running
    statistics after each call."""
    moving_mean, moving_variance = np.zeros(batches[0].shape[1]), np.ones(batches[0].shape[1])
    outputs, means = [], []
    for step, x in enumerate(batches):
        output, _, _ = renormalised(x, moving_mean, moving_variance, step > warmup_steps, r_max, d_max)
        outputs.append(output)
        moving_mean = moving_mean + momentum * (x.mean(0) - moving_mean)
        moving_variance = moving_variance + momentum * (x.var(0, ddof=1) - moving_variance)
        means.append(moving_mean)
    return outputs, np.array(means), moving_variance


@pytest.mark.backends
def test_past_the_warm_up_the_running_statistics_follow_drifting_data():
    """Batches whose mean drifts from 0 to 2 and whose spread grows from 1 to 2, 20 calls of warm-up then 100 warm
    ones: every output and the running statistics as in NumPy, and the running mean ends within its lag of the data's
    2 (a running mean moved by the corrected statistics stops where the warm-up left it)."""
    rng = np.random.default_rng(0)
    drift = np.linspace(0, 1, 120)[:, None]
    batches = [(2 * d + (1 + d) * rng.normal(size=(64, 2))).astype(np.float32) for d in drift]
    layer = layer_with([0.0, 0.0], [1.0, 1.0], steps=0, warmup_steps=20, momentum=0.05)
    outputs, means, variance = renorm_reference([x.astype(np.float64) for x in batches], 20, 0.05)
    for step, (x, expected) in enumerate(zip(batches, outputs)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x, training=True)), expected, rtol=1e-4,
                                   atol=1e-4, err_msg=f'call {step}')
        np.testing.assert_allclose(layer.moving_mean.numpy(), means[step], rtol=1e-4, atol=1e-5,
                                   err_msg=f'call {step}')
    np.testing.assert_allclose(layer.moving_variance.numpy(), variance, rtol=1e-4)
    assert np.all(layer.moving_mean.numpy() > 1.5) and np.all(means[20] < 0.5), (layer.moving_mean.numpy(), means[20])
    assert np.all(layer.moving_variance.numpy() > 2.5)


def test_no_gradient_flows_through_the_corrections():
    """Against finite differences of the training output with r and d held at this batch's values (Ioffe 2017:
    they are treated as constants); a gradient through them would differ."""
    moving_mean, moving_variance = np.array([2.0, 1.0], np.float32), np.array([2.0, 2.0], np.float32)
    weights = np.array([[1.0, -2.0], [0.5, 1.0], [-1.0, 0.0], [2.0, 3.0]])
    x = tf.Variable(X)
    layer = layer_with(moving_mean, moving_variance, steps=1)
    with tf.GradientTape() as tape:
        output = tf.reduce_sum(layer(x, training=True) * weights)
    gradient = tape.gradient(output, x).numpy()
    _, r, d = renormalised(X.astype(np.float64), moving_mean, moving_variance, warm=True)
    assert np.all((1 / 3 < r) & (r < 3)) and np.all(np.abs(d) < 5)  # unclipped: clipping would hide a gradient

    def held(x):
        mean, variance = x.mean(0), x.var(0, ddof=1)
        centre, spread = mean - d * np.sqrt(variance) / r, variance / r ** 2
        return np.sum((x - centre) / np.sqrt(spread + EPSILON) * weights)

    numeric = np.zeros_like(gradient)
    for index in np.ndindex(X.shape):
        step = np.zeros(X.shape)
        step[index] = 1e-5
        numeric[index] = (held(X + step) - held(X - step)) / 2e-5
    np.testing.assert_allclose(gradient, numeric, rtol=1e-3, atol=1e-4)


def test_numpy_acting_applies_the_running_statistics():
    agent = CrossQ.from_env('Pendulum-v1', seed=0, quiet=True)
    for layer in agent.actor.layers:
        if isinstance(layer, BatchRenorm):
            layer.moving_mean.assign(np.linspace(-1, 1, layer.moving_mean.shape[0]).astype(np.float32))
            layer.moving_variance.assign(np.linspace(0.5, 3, layer.moving_variance.shape[0]).astype(np.float32))
            layer.gamma.assign(np.full(layer.gamma.shape, 1.5, np.float32))
    agent.on_weights_changed()
    assert NumpyForward.supports(agent.actor) and agent.actor_forward.numpy
    observations = agent.envs.reset(seed=3)[0]
    np.testing.assert_allclose(agent.actor_forward(observations)[0], agent.actor(observations), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------ the update
BATCH = ([[1, 2, 0], [0, -1, 0]], [[0.5], [-0.5]], [1, 2], [[0.5, 0.5, 0], [2, 1, 0]], [0.99, 0], [1, 1])
K1, K2 = np.array([[1.0], [0], [0], [1]]), np.array([[0.0], [1], [0], [2]])


def crossq_agent(policy_delay: int = 1) -> CrossQ:
    """log std = -20 makes the policy deterministic (a' = tanh(0.5) =: t) and the tiny fixed alpha drops the entropy
    terms. Critics: one batch renormalisation of (s, a), then Q1 = x^ . (1, 0, 0, 1), Q2 = x^ . (0, 1, 0, 2). Learning
    rate 0."""
    actor = linear(3, np.zeros((3, 2)), bias=[[0.5, -20.0]])
    inputs = keras.Input((4,))
    normalised = BatchRenorm()(inputs)
    heads = [keras.layers.Dense(1), keras.layers.Dense(1)]
    critic = keras.Model(inputs, [head(normalised) for head in heads])
    for head, kernel in zip(heads, (K1, K2)):
        head.set_weights([kernel.astype(np.float32), np.zeros(1, np.float32)])
    agent = CrossQ(create_envs('Pendulum-v1'), actor, critic, alpha=1e-9, policy_delay=policy_delay, quiet=True)
    freeze(agent)
    return agent


def expected_update(weights=(1.0, 1.0)) -> tuple[float, np.ndarray, float]:
    """The paper's equations in NumPy: the critics normalise (s, a) and (s', a') as one batch of four; the target
    bootstraps from the same critics' values at (s', a'); the actor's loss reads the critics outside training, with
    the running statistics that pass moved to (0.01 the joint mean, 1 + 0.01 (joint variance - 1))."""
    s, a, r, s_next, discounts, _ = (np.asarray(column, np.float64) for column in BATCH)
    t = math.tanh(0.5)
    joint = np.concatenate([np.hstack([s, a]), np.hstack([s_next, np.full((2, 1), t)])])
    normalised, _, _ = renormalised(joint, None, None, warm=False)
    q1, q2 = (normalised @ K1)[:, 0], (normalised @ K2)[:, 0]
    targets = r + discounts * np.minimum(q1[2:], q2[2:])
    critic_loss = 0.5 * (np.mean(weights * (q1[:2] - targets) ** 2) + np.mean(weights * (q2[:2] - targets) ** 2))
    moving_mean = 0.01 * joint.mean(0)
    moving_variance = 1 + 0.01 * (joint.var(0, ddof=1) - 1)
    policy = (np.hstack([s, np.full((2, 1), t)]) - moving_mean) / np.sqrt(moving_variance + EPSILON)
    actor_loss = -np.mean(np.minimum(policy @ K1, policy @ K2))
    return critic_loss, q1[:2] - targets, actor_loss


def expected_critic_gradients(gamma: np.ndarray, beta: np.ndarray, weights=(1.0, 1.0)) -> list[np.ndarray]:
    """The gradients of the critic loss of expected_update's case, the batch renormalisation scaling by ``gamma`` and
    shifting by ``beta``: with y held constant (no gradient through the target, though it reads the same critics),
    dL / dQ_i(s_b, a_b) = w_b (Q_i(s_b, a_b) - y_b) / B, and Q_i = (x^ gamma + beta) K_i. In the order of the critic's
    trainable weights: gamma, beta, then each head's kernel and bias."""
    s, a, r, s_next, discounts, _ = (np.asarray(column, np.float64) for column in BATCH)
    joint = np.concatenate([np.hstack([s, a]), np.hstack([s_next, np.full((2, 1), math.tanh(0.5))])])
    normalised, _, _ = renormalised(joint, None, None, warm=False)
    features = normalised * gamma + beta
    q = [(features @ kernel)[:, 0] for kernel in (K1, K2)]
    targets = r + discounts * np.minimum(q[0][2:], q[1][2:])
    slopes = [np.asarray(weights) * (values[:2] - targets) / 2 for values in q]
    d_gamma = sum((slope[:, None] * normalised[:2] * kernel[:, 0]).sum(0) for slope, kernel in zip(slopes, (K1, K2)))
    d_beta = sum(slope.sum() * kernel[:, 0] for slope, kernel in zip(slopes, (K1, K2)))
    heads = [[features[:2].T @ slope[:, None], slope.sum(keepdims=True)] for slope in slopes]
    return [d_gamma, d_beta, *heads[0], *heads[1]]


@pytest.mark.parametrize('weights', [(1.0, 1.0), tuple(WEIGHTS)], ids=['unweighted', 'importance-weighted'])
def test_crossq_update_by_hand(weights):
    """Prioritised replay's importance weights scale each sample's squared errors in the critic loss, not the TD
    errors."""
    agent = crossq_agent()
    metrics, td_errors = agent.train_step(*tensors(*BATCH[:-1], weights))
    critic_loss, errors, actor_loss = expected_update(np.array(weights))
    np.testing.assert_allclose(metrics['critic_loss'], critic_loss, rtol=1e-5)
    np.testing.assert_allclose(td_errors, errors, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics['actor_loss'], actor_loss, rtol=1e-5)


def test_crossq_keeps_no_target_networks():
    agent = CrossQ(create_envs('Pendulum-v1'), quiet=True)  # the generic defaults (Pendulum's preset has 256-256)
    assert set(agent.models) == {'actor', 'critic', 'alpha'} and agent.target_critic is agent.critic
    renorms = [layer for layer in agent.critic.layers if isinstance(layer, BatchRenorm)]
    assert len(renorms) == 6 and renorms[0].momentum == 0.01 and renorms[0].warmup_steps == 100_000
    assert [tuple(output.shape) for output in agent.critic.outputs] == [(None, 1)] * 2
    assert agent.critic.layers[-1].units == 1 and max(layer.units for layer in agent.critic.layers
                                                      if isinstance(layer, keras.layers.Dense)) == 1024


def test_the_actor_and_alpha_step_every_policy_delay_gradient_steps_in_training_mode():
    agent = CrossQ.from_env('Pendulum-v1', seed=0, buffer_initial_size=256, buffer_batch_size=32, gradient_steps=3,
                            update_every=300, policy_delay=3, critic_model='ann-critic-256.cfg', quiet=True)
    actor, alpha = [weight.numpy().copy() for weight in agent.actor.trainable_weights], agent.log_alpha.numpy()
    agent.fit(max_steps=300)  # one update of three gradient steps
    actor_renorms = [layer for layer in agent.actor.layers if isinstance(layer, BatchRenorm)]
    critic_renorms = [layer for layer in agent.critic.layers if isinstance(layer, BatchRenorm)]
    assert [int(layer.steps.numpy()) for layer in actor_renorms] == [1] * 3
    assert [int(layer.steps.numpy()) for layer in critic_renorms] == [3] * 6
    assert all(not np.array_equal(old, new.numpy()) for old, new in zip(actor, agent.actor.trainable_weights))
    assert agent.log_alpha.numpy() != alpha


def test_refused_settings():
    with pytest.raises(ValueError, match='CrossQ has no target networks, so tau does not apply'):
        CrossQ(create_envs('Pendulum-v1'), tau=0.01, quiet=True)
    with pytest.raises(ValueError, match='expected 0 < batch_norm_momentum <= 1, got 0.0'):
        CrossQ(create_envs('Pendulum-v1'), batch_norm_momentum=0.0, quiet=True)
    with pytest.raises(ValueError, match=r'CrossQ supports Box action spaces, got Discrete\(2\)'):
        CrossQ(create_envs('CartPole-v1'), quiet=True)


def test_batch_renormalisation_layers_are_refused_where_nothing_trains_them():
    cfg = str(importlib.resources.files('xagents').joinpath('crossq', 'models', 'ann-actor.cfg'))
    with pytest.raises(ValueError, match=r'\[batchrenorm-1\]: batch renormalisation .* CrossQ'):
        SAC(create_envs('Pendulum-v1'), actor_model=cfg, quiet=True)


def test_crossq_learns_pendulum_with_small_networks():
    """CrossQ's defaults (one gradient step per env step) with RL Zoo's Pendulum settings, on 64-64 networks to keep
    the test short; random play scores -1200 to -1500."""
    agent = CrossQ.from_env('Pendulum-v1', seed=0, actor_model='ann-actor-64.cfg', critic_model='ann-critic-64.cfg',
                            reward_buffer_size=10, quiet=True)
    run = agent.fit(target_reward=-500, max_steps=10_000)
    assert len(run.reward_buffer) == 10 and run.mean_reward >= -500, run.mean_reward
