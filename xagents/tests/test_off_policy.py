"""The off-policy loop, the losses of DQN, SAC (Box and Discrete), DDPG and TD3, noise and CLI errors.

Losses are checked on tiny networks with fixed weights against values worked out by hand in
the comments; optimizers get a learning rate of 0 where a later loss reads a network that an
earlier step of the same update would otherwise have changed.
"""
import math
import subprocess

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from xagents.agent.off_policy import polyak_update
from xagents.ddpg import DDPG
from xagents.ddpg.noise import OrnsteinUhlenbeckActionNoise, parse_noise_type
from xagents.dqn import DQN
from xagents.ppo import PPO
from xagents.sac import SAC
from xagents.td3 import TD3
from xagents.envs.creation import create_envs



def linear(inputs: int, *heads: np.ndarray, bias=None, activation=None) -> tf.keras.Model:
    """A Keras model whose heads are ``x @ kernel (+ bias)``, kernels given."""
    x = tf.keras.Input((inputs,))
    outputs = []
    for i, kernel in enumerate(heads):
        layer = tf.keras.layers.Dense(kernel.shape[1], activation=activation)
        outputs.append(layer(x))
        layer.set_weights([np.asarray(kernel, np.float32),
                           np.zeros(kernel.shape[1], np.float32) if bias is None else np.asarray(bias[i], np.float32)])
    return tf.keras.Model(x, outputs if len(outputs) > 1 else outputs[0])


def freeze(agent) -> None:
    """Learning rate 0: every loss of an update then reads the networks as they were."""
    for optimizer in agent.optimizers.values():
        optimizer.learning_rate.assign(0.0)


def tensors(*arrays):
    return [tf.constant(np.asarray(array, np.float32)) for array in arrays]


# ------------------------------------------------------------------------------- the loop
def test_stored_transitions_are_the_env_dynamics_truncation_bootstraps_termination_does_not():
    """Random CartPole play through the real loop; every sampled transition is replayed on a
    fresh CartPole set to its observation: the next observation must be the true successor
    (the final one at episode ends, never a reset), the discount 0 exactly on termination."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make('CartPole-v1', max_episode_steps=15)] * 2,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = DQN(envs, seed=3, buffer_initial_size=400, buffer_batch_size=32, update_every=2, quiet=True)
    run = agent.fit(max_steps=398)
    assert len(agent.buffer) == 398 and agent.gradient_updates.numpy() == 0  # no learning yet
    batch = agent.buffer.sample(3000)  # with replacement: every stored transition, most likely
    env = gym.make('CartPole-v1').unwrapped
    env.reset(seed=0)
    terminated_seen = 0
    for observation, action, reward, next_observation, discount in zip(
            batch.observations, batch.actions, batch.rewards, batch.next_observations, batch.discounts):
        env.state, env.steps_beyond_terminated = observation.astype(np.float64), None
        expected, expected_reward, terminated, _, _ = env.step(int(action))
        np.testing.assert_allclose(next_observation, expected, rtol=1e-5, atol=1e-6)
        assert reward == expected_reward
        assert discount == (0.0 if terminated else np.float32(0.99))
        terminated_seen += terminated
    assert terminated_seen > 0
    assert 15 in run.reward_buffer  # some episodes were cut at the 15-step limit (and bootstrap)
    envs.close()


def test_polyak_update_by_hand():
    target, source = tf.Variable([1.0, 2.0]), tf.Variable([3.0, -2.0])
    polyak_update([target], [source], 0.25)  # 0.75 * [1, 2] + 0.25 * [3, -2] = [1.5, 1]
    np.testing.assert_allclose(target.numpy(), [1.5, 1.0])
    polyak_update([target], [source], 1.0)
    np.testing.assert_allclose(target.numpy(), [3.0, -2.0])


def test_one_graph_call_runs_every_gradient_step_and_moves_targets_on_schedule():
    """TD3: 3 gradient steps in one call, targets averaged every policy_delay = 2 of them."""
    agent = TD3.from_env('Pendulum-v1', seed=0, buffer_initial_size=256, buffer_batch_size=32,
                         update_every=50, gradient_steps=3, tau=0.5, quiet=True)
    agent.fit(max_steps=250)
    assert agent.gradient_updates.numpy() == 0
    freeze(agent)  # online weights stay put, so one target update gives (target + online) / 2
    for layer in agent.target_critic.weights:
        layer.assign(layer + 1.0)
    before = [w.numpy() for w in agent.target_critic.weights]
    online = [w.numpy() for w in agent.critic.weights]
    run = agent.fit(max_steps=300, total=True)
    assert agent.gradient_updates.numpy() == 3
    assert set(run.metrics) == {'critic_loss', 'actor_loss', 'q'}
    for target, start, source in zip(agent.target_critic.weights, before, online):
        np.testing.assert_allclose(target.numpy(), 0.5 * start + 0.5 * source, rtol=1e-5, atol=1e-6)


def test_update_every_must_be_a_multiple_of_n_envs_and_tau_at_most_1():
    with pytest.raises(ValueError, match='expected update_every to be a multiple of n_envs = 4, got 6'):
        SAC.from_env('Pendulum-v1', n_envs=4, update_every=6)
    with pytest.raises(ValueError, match=r'expected 0 < tau <= 1, got 2'):
        SAC.from_env('Pendulum-v1', tau=2)


def test_box_actions_are_scaled_to_the_env_bounds_and_random_fill_is_uniform():
    agent = SAC.from_env('Pendulum-v1', seed=0, quiet=True)
    np.testing.assert_allclose(agent.env_actions(np.array([[-1.0], [0.0], [0.5], [1.0]])),
                               [[-2.0], [0.0], [1.0], [2.0]])
    agent.fit(max_steps=950)  # all random: actions stored in [-1, 1], spread over it
    actions = agent.buffer.sample(950).actions
    assert actions.min() >= -1 and actions.max() <= 1 and actions.std() > 0.5
    assert agent.gradient_updates.numpy() == 0


# ----------------------------------------------------------------------------------- DQN
def dqn_batch():
    # s = (1, 2, 0, 0), (3, -1, 0, 0); a = 0, 1; r = 1, 0; s' = (2, 0.5, 0, 0), (0, 4, 0, 0)
    # discounts 0.9 and 0 (the second episode terminated); importance weights 1 and 0.5.
    observations, rewards, next_observations, discounts, weights = tensors(
        [[1, 2, 0, 0], [3, -1, 0, 0]], [1, 0], [[2, 0.5, 0, 0], [0, 4, 0, 0]], [0.9, 0], [1, 0.5])
    return observations, tf.constant([0, 1], tf.int64), rewards, next_observations, discounts, weights


@pytest.mark.parametrize('double, expected', [
    # Q(s) = (s0, s1) online, (s1, s0) target. q = Q(s, a) = 1, -1.
    # DQN: y = 1 + 0.9 max(0.5, 2) = 2.8, 0; td = -1.8, -1; huber = 1.3, 0.5; loss = (1.3 + 0.25) / 2
    (False, 0.775),
    # Double: the online net picks a' = 0, 1 and the target rates them 0.5, 0: y = 1.45, 0;
    # td = -0.45, -1; huber = 0.10125, 0.5; loss = (0.10125 + 0.25) / 2
    (True, 0.175625),
])
def test_dqn_loss_by_hand(double, expected):
    envs = create_envs('CartPole-v1')
    identity, swap = np.eye(4, 2), np.array([[0, 1], [1, 0], [0, 0], [0, 0]])
    agent = DQN(envs, linear(4, identity), double=double, buffer_initial_size=100, buffer_batch_size=32,
                quiet=True)
    for weight, value in zip(agent.target_model.weights, [swap, np.zeros(2)]):
        weight.assign(value)
    metrics, td_errors = agent.train_step(*dqn_batch())
    np.testing.assert_allclose(metrics['loss'], expected, rtol=1e-6)
    np.testing.assert_allclose(td_errors, [-0.45, -1] if double else [-1.8, -1], rtol=1e-6)


def test_dueling_q_is_value_plus_centred_advantage():
    envs = create_envs('CartPole-v1')
    # V(s) = s0, A(s) = (s1, s2)
    value, advantage = np.eye(4, 1), np.eye(4, 2, -1)
    agent = DQN(envs, linear(4, value, advantage), dueling=True, buffer_initial_size=100,
                buffer_batch_size=32, quiet=True)
    # s = (1, 2, 4, 0): V = 1, A = (2, 4), Q = 1 + (2, 4) - 3 = (0, 2)
    np.testing.assert_allclose(agent.q_values_np(np.array([[1, 2, 4, 0]], np.float32)), [[0, 2]])
    np.testing.assert_allclose(agent.q_values(agent.model, tf.constant([[1.0, 2, 4, 0]])), [[0, 2]])


def test_epsilon_falls_linearly_then_stays():
    agent = DQN.from_env('CartPole-v1', epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=1000)
    for steps, epsilon in ((0, 1.0), (500, 0.55), (1000, 0.1), (5000, 0.1)):
        agent.steps = steps
        assert agent.epsilon == pytest.approx(epsilon)


def test_n_step_returns_reach_the_batches():
    agent = DQN.from_env('CartPole-v1', seed=0, return_steps=3, buffer_initial_size=500, update_every=1, quiet=True)
    agent.fit(max_steps=400)
    batch = agent.buffer.sample(400)
    gammas = 0.99 ** np.arange(4)
    # gamma^3 inside episodes, a shorter window (or 0 on termination) at their ends
    allowed = np.append(gammas[1:], 0)
    assert np.isclose(batch.discounts[:, None], allowed).any(axis=1).all()
    assert np.mean(np.isclose(batch.discounts, gammas[3])) > 0.7
    assert batch.rewards.max() == pytest.approx(gammas[:3].sum())  # 1 + 0.99 + 0.99^2


def test_prioritised_update_sets_priorities_to_the_td_errors_of_the_sampled_batch():
    """One real update: the priorities of the transitions it sampled become (|TD error| + eps) ** alpha,
    the TD errors recomputed here in NumPy from a copy of the networks taken before the update."""
    agent = DQN.from_env('CartPole-v1', seed=0, prioritized=True, double=True, buffer_initial_size=200,
                         buffer_batch_size=16, update_every=1, gradient_steps=1, update_after=10**9, quiet=True)
    agent.fit(max_steps=200)
    online, target = (tf.keras.models.clone_model(model) for model in (agent.model, agent.target_model))
    online.set_weights(agent.model.get_weights())
    target.set_weights(agent.target_model.get_weights())
    sampled = []
    sample = agent.buffer.sample
    agent.buffer.sample = lambda *args: sampled.append(sample(*args)) or sampled[-1]  # record what update draws
    agent.update()
    (batch,) = sampled
    q = online(batch.observations).numpy()
    next_q, next_online_q = target(batch.next_observations).numpy(), online(batch.next_observations).numpy()
    targets = batch.rewards + batch.discounts * next_q[np.arange(16), next_online_q.argmax(-1)]  # double DQN
    td_errors = q[np.arange(16), batch.actions] - targets
    expected = (np.abs(td_errors) + agent.buffer.epsilon) ** agent.buffer.alpha
    last = {index: value for index, value in zip(batch.indices, expected)}  # a repeated index keeps its last
    np.testing.assert_allclose(agent.buffer.tree[np.array(list(last))], list(last.values()), rtol=1e-4)
    assert len(set(np.round(expected, 4))) > 1  # the TD errors differ: the check is not on a constant


# ----------------------------------------------------------------------------------- SAC
WEIGHTS = np.array([2.0, 0.5])  # importance weights of a two-sample batch (the by-hand tests of SAC, TQC and CrossQ)


def test_sac_box_losses_by_hand():
    """log std = -20 makes the policy deterministic (tanh(0.5) = 0.46211716 =: t) and the tiny
    fixed alpha drops the entropy terms, leaving Q arithmetic: Q1 = s0 + a, Q2 = s1 + 2a."""
    envs = create_envs('Pendulum-v1')
    actor = linear(3, np.zeros((3, 2)), bias=[[0.5, -20.0]])
    critic = linear(4, np.array([[1], [0], [0], [1.0]]), np.array([[0], [1], [0], [2.0]]))
    agent = SAC(envs, actor, critic, alpha=1e-9, buffer_initial_size=256, quiet=True)
    freeze(agent)
    observations, actions, rewards, next_observations, discounts, weights = tensors(
        [[1, 2, 0], [0, -1, 0]], [[0.5], [-0.5]], [1, 2], [[0.5, 0.5, 0], [2, 1, 0]], [0.99, 0], [1, 1])
    metrics, td_errors = agent.train_step(observations, actions, rewards, next_observations, discounts, weights)
    t = math.tanh(0.5)
    # targets: y1 = 1 + 0.99 * min(0.5 + t, 0.5 + 2t) = 1.95249599, y2 = 2 (terminated)
    # Q1(s, a) = 1.5, -0.5; Q2(s, a) = 3, -2: td1 = -0.45249599, -2.5; td2 = 1.04750401, -4
    td1 = np.array([1.5 - (1 + 0.99 * (0.5 + t)), -2.5])
    td2 = np.array([3 - (1 + 0.99 * (0.5 + t)), -4])
    np.testing.assert_allclose(td1, [-0.45249599, -2.5], rtol=1e-7)
    # critic loss = 0.5 * (mean(td1^2) + mean(td2^2)) = 5.88800468
    np.testing.assert_allclose(0.5 * (np.mean(td1 ** 2) + np.mean(td2 ** 2)), 5.88800468, rtol=1e-7)
    np.testing.assert_allclose(metrics['critic_loss'], 5.88800468, rtol=1e-5)
    np.testing.assert_allclose(td_errors, td1, rtol=1e-5)
    # actor loss = -mean(min(Q1, Q2)(s, t)) = -mean(min(1 + t, 2 + 2t), min(t, -1 + 2t)) = -0.69317574
    np.testing.assert_allclose(metrics['actor_loss'], -0.5 * ((1 + t) + (-1 + 2 * t)), atol=1e-5)
    np.testing.assert_allclose(metrics['actor_loss'], -0.69317574, atol=1e-5)
    # prioritised replay's importance weights (2, 0.5) scale each sample's squared errors, not the TD errors
    metrics, weighted_td_errors = agent.train_step(observations, actions, rewards, next_observations, discounts,
                                                   *tensors(WEIGHTS))
    weighted_loss = 0.5 * (np.mean(WEIGHTS * td1 ** 2) + np.mean(WEIGHTS * td2 ** 2))
    np.testing.assert_allclose(metrics['critic_loss'], weighted_loss, rtol=1e-5)
    np.testing.assert_allclose(weighted_td_errors, td1, rtol=1e-5)


def test_squashed_gaussian_log_prob_matches_the_change_of_variables():
    envs = create_envs('Pendulum-v1')
    actor = linear(3, np.zeros((3, 2)), bias=[[0.3, -1.0]])
    agent = SAC(envs, actor, buffer_initial_size=256, quiet=True)
    actions, log_probs = agent.squashed_gaussian(tf.zeros((4, 3)))
    u = np.arctanh(actions.numpy()[:, 0].astype(np.float64))
    std = math.exp(-1.0)
    # log N(u; 0.3, e^-1) - log(1 - tanh(u)^2)
    expected = (-0.5 * ((u - 0.3) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)
                - np.log(1 - np.tanh(u) ** 2))
    np.testing.assert_allclose(log_probs, expected, rtol=1e-4)


def sde_agent(**settings) -> SAC:
    """SAC with gSDE on LunarLanderContinuous (2 action dims), its noise scales all different."""
    agent = SAC.from_env('LunarLanderContinuous-v3', seed=0, use_sde=True, buffer_initial_size=256, quiet=True,
                         **settings)
    log_sigma = agent.actor.sde_log_std
    log_sigma.assign(np.random.default_rng(1).uniform(-2.0, 0.0, log_sigma.shape).astype(np.float32))
    return agent


def test_sde_log_prob_is_the_state_dependent_gaussian_through_tanh():
    """gSDE (Raffin et al. 2021): u = mean(s) + f(s) E with E = sigma * n, so u ~ N(mean, f(s)^2 sigma^2) per
    action; recomputed here with NumPy and SciPy from the actor's outputs."""
    from scipy.stats import norm

    agent = sde_agent()
    observations = np.random.default_rng(2).normal(size=(5, 8)).astype(np.float32)
    noise = np.random.default_rng(3).normal(size=agent.actor.sde_log_std.shape).astype(np.float32)
    actions, log_probs = agent.squashed_gaussian(tf.constant(observations), tf.constant(noise))
    mean, features = (output.numpy().astype(np.float64) for output in agent.actor(observations))
    sigma = np.exp(agent.actor.sde_log_std.numpy().astype(np.float64))
    assert features.shape == (5, agent.actor.sde_log_std.shape[0]) and (features >= 0).all()  # ReLU activations
    u = np.clip(mean, -2, 2) + features @ (sigma * noise)
    std = np.sqrt(features ** 2 @ sigma ** 2 + 1e-6)
    expected = (norm.logpdf(u, np.clip(mean, -2, 2), std) - np.log(1 - np.tanh(u) ** 2)).sum(-1)
    np.testing.assert_allclose(actions, np.tanh(u), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_probs, expected, rtol=1e-4)


def test_sde_expln_sigma_is_stable_baselines3s_in_learning_and_acting():
    """use_expln (RL Zoo's MountainCarContinuous): sigma = exp(log sigma) up to 0, log1p(log sigma) + 1 above
    (Stable-Baselines3's StateDependentNoiseDistribution.get_std), in the log-probabilities and in the matrices
    the envs act with."""
    from scipy.stats import norm

    agent = sde_agent(use_expln=True)
    log_sigma = np.random.default_rng(4).uniform(-1.0, 2.0, agent.actor.sde_log_std.shape).astype(np.float32)
    agent.actor.sde_log_std.assign(log_sigma)
    log_sigma = log_sigma.astype(np.float64)
    sigma = np.where(log_sigma <= 0, np.exp(log_sigma), np.log1p(np.maximum(log_sigma, 0) + 1e-6) + 1)
    assert (log_sigma > 0).any() and (log_sigma <= 0).any()
    observations = np.random.default_rng(2).normal(size=(5, 8)).astype(np.float32)
    noise = np.random.default_rng(3).normal(size=log_sigma.shape).astype(np.float32)
    actions, log_probs = agent.squashed_gaussian(tf.constant(observations), tf.constant(noise))
    mean, features = (output.numpy().astype(np.float64) for output in agent.actor(observations))
    u = np.clip(mean, -2, 2) + features @ (sigma * noise)
    std = np.sqrt(features ** 2 @ sigma ** 2 + 1e-6)
    expected = (norm.logpdf(u, np.clip(mean, -2, 2), std) - np.log(1 - np.tanh(u) ** 2)).sum(-1)
    np.testing.assert_allclose(actions, np.tanh(u), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_probs, expected, rtol=1e-4)
    agent.sde.noise(features[:1].astype(np.float32), agent.actor.sde_log_std.numpy(), np.random.default_rng(0))
    draws = [agent.sde.matrices[0]]
    for seed in range(1, 4000):
        agent.sde.reset()
        agent.sde.noise(features[:1].astype(np.float32), agent.actor.sde_log_std.numpy(), np.random.default_rng(seed))
        draws.append(agent.sde.matrices[0])
    np.testing.assert_allclose(np.std(draws, axis=0), sigma, rtol=0.08)
    with pytest.raises(ValueError, match='use_expln shapes the noise of use_sde: give use_sde too'):
        SAC.from_env('Pendulum-v1', use_expln=True, quiet=True)


def test_sde_features_are_trained_through_the_noise():
    """Stable-Baselines3's SAC learns gSDE's features (``learn_features=True``). The means head here is zero,
    so only the noise ``f(s) E`` ties the actions to the hidden layer: d sum tanh(u) / dW[i, j] =
    sum_b (1 - tanh(u_b)^2) x_bi [h_bj > 0] E_j, worked out with NumPy (zero if the features got no gradient)."""
    x = tf.keras.Input((3,))
    hidden = tf.keras.layers.Dense(4, activation='relu')
    means = tf.keras.layers.Dense(1, kernel_initializer='zeros')
    features = hidden(x)
    agent = SAC(create_envs('Pendulum-v1'), tf.keras.Model(x, [means(features), features]), use_sde=True,
                buffer_initial_size=256, quiet=True)
    observations = np.random.default_rng(6).normal(size=(5, 3)).astype(np.float32)
    noise = np.random.default_rng(7).normal(size=(4, 1)).astype(np.float32)
    with tf.GradientTape() as tape:
        actions, _ = agent.squashed_gaussian(tf.constant(observations), tf.constant(noise))
        total = tf.reduce_sum(actions)
    gradient = tape.gradient(total, hidden.kernel).numpy()
    kernel, bias = (weight.numpy().astype(np.float64) for weight in hidden.weights)
    active = (observations @ kernel + bias > 0).astype(np.float64)  # (5, 4)
    exploration = np.exp(-3.0) * noise[:, 0].astype(np.float64)  # E = sigma n, log_std_init -3
    u = np.maximum(observations @ kernel + bias, 0) @ exploration + means.bias.numpy()[0]
    expected = observations.T @ ((1 - np.tanh(u) ** 2)[:, None] * active * exploration)
    assert np.abs(expected).max() > 1e-3
    np.testing.assert_allclose(gradient, expected, rtol=1e-4, atol=1e-7)


def test_sde_acting_noise_has_the_distribution_the_updates_assume():
    """Many envs in one state: their actions before tanh spread as N(mean, f(s)^2 sigma^2)."""
    agent = sde_agent()
    observation = np.random.default_rng(4).normal(size=(1, 8)).astype(np.float32)
    mean, features = (output.numpy().astype(np.float64) for output in agent.actor(observation))
    u = np.arctanh(agent.explore(np.repeat(observation, 20000, 0)).astype(np.float64))
    sigma = np.exp(agent.actor.sde_log_std.numpy().astype(np.float64))
    np.testing.assert_allclose(u.mean(0), np.clip(mean[0], -2, 2), atol=0.05)
    np.testing.assert_allclose(u.std(0), np.sqrt(features ** 2 @ sigma ** 2)[0], rtol=0.03)


def test_sde_noise_is_held_within_a_collection_or_for_sde_sample_freq_steps():
    observations = np.repeat(np.random.default_rng(5).normal(size=(1, 8)).astype(np.float32), 2, 0)
    agent = sde_agent()
    first = agent.explore(observations)
    assert not np.allclose(first[0], first[1])  # each env its own noise
    np.testing.assert_array_equal(agent.explore(observations), first)  # the same state, the same action
    agent.start_collection()  # after an update: new noise
    assert not np.allclose(agent.explore(observations), first)
    agent = sde_agent(sde_sample_freq=2)
    actions = [agent.explore(observations) for _ in range(5)]
    np.testing.assert_array_equal(actions[0], actions[1])
    assert not np.allclose(actions[1], actions[2])
    np.testing.assert_array_equal(actions[2], actions[3])
    agent.start_collection()  # a collection starts with new noise, sample frequency or not
    assert not np.allclose(agent.explore(observations), actions[4])


def draws_of(agent) -> list[int]:
    """Record the agent's vector step (env steps // n_envs) at each new gSDE noise matrix while it trains."""
    draws, noise, held = [], agent.sde.noise, []

    def recording(*args):
        result = noise(*args)
        if not held or agent.sde.matrices is not held[-1]:
            draws.append(agent.steps // agent.envs.num_envs)
            held.append(agent.sde.matrices)
        return result

    agent.sde.noise = recording
    return draws


@pytest.mark.parametrize('make, collection', [
    (lambda: PPO.from_env('Pendulum-v1', seed=0, n_envs=2, n_steps=10, mini_batches=2, use_sde=True, sde_sample_freq=4,
                          quiet=True), 10),
    (lambda: SAC.from_env('Pendulum-v1', seed=0, use_sde=True, sde_sample_freq=4, buffer_initial_size=20,
                          buffer_batch_size=8, start_steps=0, update_every=10, gradient_steps=1, quiet=True), 10),
])
def test_sde_noise_is_drawn_at_the_start_of_each_collection_then_every_sample_freq_steps(make, collection):
    """As Stable-Baselines3's collect_rollouts: the noise comes from the sigma of the latest update (the one the
    collected log-probabilities use), then is redrawn every sde_sample_freq steps counted from the collection's
    start."""
    agent = make()
    draws = draws_of(agent)
    agent.fit(max_steps=60 * agent.envs.num_envs)
    assert sorted({step % collection for step in draws}) == [0, 4, 8]
    assert len(draws) == 3 * 6


def test_sde_sigma_is_trained_and_checkpointed(workdir):
    paths = [f'{role}.npz' for role in SAC.model_roles]
    agent = SAC.from_env('MountainCarContinuous-v0', seed=0, buffer_initial_size=256, buffer_batch_size=64,
                         update_every=50, gradient_steps=5, checkpoints=paths, quiet=True)
    assert agent.use_sde and agent.log_std_init == -3.67  # RL Zoo's setting for this env
    np.testing.assert_array_equal(agent.actor.sde_log_std.numpy(), np.float32(-3.67))
    agent.fit(max_steps=600)
    assert not np.allclose(agent.actor.sde_log_std.numpy(), -3.67)
    agent.save_models()
    other = SAC.from_env('MountainCarContinuous-v0', seed=1, quiet=True)
    other.load_weights(paths)
    np.testing.assert_array_equal(other.actor.sde_log_std.numpy(), agent.actor.sde_log_std.numpy())


def test_sde_needs_box_actions_and_an_actor_with_features():
    with pytest.raises(ValueError, match='use_sde explores Box actions'):
        SAC.from_env('CartPole-v1', use_sde=True)
    with pytest.raises(ValueError, match=r"SAC's actor: expected outputs policy \(1 units\), features \(the last hidden "
                                         r'activations, for gSDE\), got 1 output\(s\) of size 1'):
        SAC(create_envs('Pendulum-v1'), linear(3, np.zeros((3, 1))), use_sde=True)


def test_discrete_sac_losses_by_hand():
    """pi = (0.25, 0.75) everywhere (logits 0, ln 3); Q1(s) = (s0, s1), Q2(s) = (s1, s0); alpha 0.5."""
    envs = create_envs('CartPole-v1')
    actor = linear(4, np.zeros((4, 2)), bias=[[0.0, math.log(3)]])
    critic = linear(4, np.eye(4, 2), np.array([[0, 1], [1, 0], [0, 0], [0, 0]]))
    agent = SAC(envs, actor, critic, initial_alpha=0.5, target_entropy=0.3, buffer_initial_size=256, quiet=True)
    agent.target_critic.set_weights(agent.critic.get_weights())
    freeze(agent)
    observations, rewards, next_observations, discounts, weights = tensors(
        [[1, 2, 0, 0]], [1], [[3, 1, 0, 0]], [0.5], [1])
    metrics, td_errors = agent.train_step(observations, tf.constant([1], tf.int64), rewards,
                                          next_observations, discounts, weights)
    # min Q_targ(s') = min((3, 1), (1, 3)) = (1, 1); log pi = (-1.386294, -0.287682)
    # V(s') = 0.25 (1 + 0.5 * 1.386294) + 0.75 (1 + 0.5 * 0.287682) = 1.281168; y = 1 + 0.5 V = 1.640584
    # Q1(s, 1) = 2, Q2(s, 1) = 1: td = 0.359416, -0.640584; critic loss = 0.5 (td1^2 + td2^2) = 0.269764
    np.testing.assert_allclose(td_errors, [0.359416], atol=1e-5)
    np.testing.assert_allclose(metrics['critic_loss'], 0.269764, atol=1e-5)
    # actor: sum_a pi (0.5 log pi - min Q(s)) with min Q(s) = (1, 1): -1.281168
    np.testing.assert_allclose(metrics['actor_loss'], -1.281168, atol=1e-5)
    # alpha: -ln(0.5) * (sum pi log pi + 0.3) = 0.693147 * (-0.562335 + 0.3) = -0.181837
    np.testing.assert_allclose(metrics['alpha_loss'], -0.181837, atol=1e-5)
    np.testing.assert_allclose(metrics['entropy'], 0.562335, atol=1e-5)


def test_sac_alpha_moves_towards_the_target_entropy():
    envs = create_envs('CartPole-v1')
    actor = linear(4, np.zeros((4, 2)))  # uniform policy: entropy ln 2 = 0.693
    agent = SAC(envs, actor, target_entropy=0.1, buffer_initial_size=256, quiet=True)
    batch = tensors([[0, 0, 0, 0]], [0], [[0, 0, 0, 0]], [0.9], [1])
    before = agent.log_alpha.numpy()
    agent.train_step(batch[0], tf.constant([0], tf.int64), *batch[1:])
    assert agent.log_alpha.numpy() < before  # entropy above target: alpha shrinks


# ---------------------------------------------------------------------------- DDPG, TD3
def ddpg_batch():
    # s = (1, 0, 0), (2, 0, 0); a = 0.5, -1; r = 1, 0; s' = (0, 0, 0), (1, 0, 0); discounts 0.9
    return tensors([[1, 0, 0], [2, 0, 0]], [[0.5], [-1]], [1, 0], [[0, 0, 0], [1, 0, 0]], [0.9, 0.9], [1, 1])


@pytest.mark.parametrize('critic_l2, expected', [
    # mu(s) = tanh(atanh 0.5) = 0.5 everywhere; Q = s0 + 2a.
    # y = 1 + 0.9 (0 + 1) = 1.9, 0 + 0.9 (1 + 1) = 1.8; Q(s, a) = 2, 0; td = 0.1, -1.8
    # critic loss = mean(0.01, 3.24) = 1.625 (+ 0.01 * (1 + 4) with L2 on the kernel)
    (0.0, 1.625),
    (0.01, 1.675),
])
def test_ddpg_losses_by_hand(critic_l2, expected):
    envs = create_envs('Pendulum-v1')
    actor = linear(3, np.zeros((3, 1)), bias=[[math.atanh(0.5)]], activation='tanh')
    critic = linear(4, np.array([[1], [0], [0], [2.0]]))
    agent = DDPG(envs, actor, critic, critic_l2=critic_l2, buffer_initial_size=256, quiet=True)
    freeze(agent)
    metrics, td_errors = agent.train_step(*ddpg_batch())
    np.testing.assert_allclose(td_errors, [0.1, -1.8], rtol=1e-5)
    np.testing.assert_allclose(metrics['critic_loss'], expected, rtol=1e-5)
    # actor loss = -mean(Q(s, 0.5)) = -mean(1 + 1, 2 + 1) = -2.5
    np.testing.assert_allclose(metrics['actor_loss'], -2.5, rtol=1e-6)


def test_td3_twin_critic_loss_and_delayed_actor_by_hand():
    envs = create_envs('Pendulum-v1')
    actor = linear(3, np.zeros((3, 1)), bias=[[math.atanh(0.5)]], activation='tanh')
    critic = linear(4, np.array([[1], [0], [0], [2.0]]), np.array([[1], [0], [0], [1.0]]))
    agent = TD3(envs, actor, critic, noise_clip=0.0, buffer_initial_size=256, quiet=True)
    freeze(agent)
    # Q1 = s0 + 2a, Q2 = s0 + a, a' = 0.5 (smoothing noise clipped to 0)
    # y = 1 + 0.9 min(1, 0.5) = 1.45, 0.9 min(2, 1.5) = 1.35
    # td1 = 2 - 1.45, 0 - 1.35 = 0.55, -1.35; td2 = 1.5 - 1.45, 1 - 1.35 = 0.05, -0.35
    # critic loss = mean(td1^2) + mean(td2^2) = 1.0625 + 0.0625 = 1.125
    metrics, td_errors = agent.train_step(*ddpg_batch())
    np.testing.assert_allclose(td_errors, [0.55, -1.35], rtol=1e-5)
    np.testing.assert_allclose(metrics['critic_loss'], 1.125, rtol=1e-5)
    assert metrics['actor_loss'] == 0  # first gradient step: the actor waits (policy_delay 2)
    agent.gradient_updates.assign(1)
    metrics, _ = agent.train_step(*ddpg_batch())
    np.testing.assert_allclose(metrics['actor_loss'], -2.5, rtol=1e-6)  # -mean(Q1(s, 0.5))


def test_ddpg_is_td3_with_its_tricks_off():
    assert issubclass(TD3, DDPG) and TD3.train_step is DDPG.train_step
    assert (DDPG.n_critics, DDPG.policy_delay, DDPG.policy_noise_coef) == (1, 1, 0.0)


# ---------------------------------------------------------------------------------- noise
@pytest.mark.parametrize('spec, expected', [
    ('normal_0.1', [('normal', 0.1)]),
    ('adaptive-param_0.2, ou_0.3', [('adaptive-param', 0.2), ('ou', 0.3)]),
    ('none', []),
])
def test_noise_types_parse_as_in_baselines(spec, expected):
    assert parse_noise_type(spec) == expected


@pytest.mark.parametrize('spec, message', [
    ('pink_0.1', "got 'pink_0.1'"),
    ('normal', "got 'normal'"),
    ('normal_x', "expected a number after normal_, got 'x'"),
    ('ou_-1', 'expected a finite ou sigma > 0'),
    ('ou_inf', "expected a finite ou sigma > 0, got 'inf'"),
    ('normal_nan', "expected a finite normal sigma > 0, got 'nan'"),
    ('normal_0.1,normal_0.2', 'expected each noise type once'),
])
def test_bad_noise_types_raise_value_error(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_noise_type(spec)


def test_ou_noise_is_correlated_and_restarts_with_episodes():
    noise = OrnsteinUhlenbeckActionNoise(0.3, np.random.default_rng(0))
    zeros, running = np.zeros((2, 1)), np.zeros(2, bool)
    first = noise(zeros, running)
    second = noise(zeros, running)
    # x1 = 0.3 * 0.1 * n1; x2 = x1 (1 - 0.15 * 0.01) + 0.03 n2: the first term carries over
    rng = np.random.default_rng(0)
    n1, n2 = rng.standard_normal((2, 1)), rng.standard_normal((2, 1))
    np.testing.assert_allclose(first, 0.03 * n1)
    np.testing.assert_allclose(second, 0.03 * n1 * (1 - 0.0015) + 0.03 * n2)
    third = noise(zeros, np.array([True, False]))  # env 0 restarted: its state began at 0
    n3 = rng.standard_normal((2, 1))
    np.testing.assert_allclose(third[0], 0.03 * n3[0])


def test_adaptive_parameter_noise_scale_follows_the_action_distance():
    agent = DDPG.from_env('Pendulum-v1', seed=0, noise_type='adaptive-param_0.2', quiet=True)
    noise, (actor,) = agent.param_noise, agent.actor_forward.numpy  # the NumPy copy of the actor
    observations = np.random.default_rng(0).standard_normal((256, 3)).astype(np.float32)
    noise.stddev = 10.0  # huge weight noise: actions move far, so the scale shrinks
    noise.adapt(actor, observations)
    assert noise.distance > 0.2 and noise.stddev == pytest.approx(10 / 1.01)
    noise.stddev = 1e-6  # no visible change: the scale grows
    noise.adapt(actor, observations)
    assert noise.distance < 0.2 and noise.stddev == pytest.approx(1.01e-6)
    perturbed = noise.perturb(actor)
    kernel, perturbed_kernel = actor.branches[0][0][0], perturbed.branches[0][0][0]
    assert perturbed_kernel.shape == kernel.shape and not np.allclose(perturbed_kernel, kernel)
    agent.fit(max_steps=1100)  # acts through the perturbed actor and adapts without error
    assert agent.param_noise.distance > 0


def test_adaptive_param_noise_needs_a_numpy_actor(xagents_cli):
    envs = create_envs('Pendulum-v1')
    with pytest.raises(ValueError, match=r'takes a \.cfg actor of dense layers \(not images or a network of yours\)'):
        DDPG(envs, linear(3, np.zeros((3, 1)), activation='tanh'), noise_type='adaptive-param_0.2')
    status, _, err = xagents_cli('train', 'ddpg', '--env', 'Pendulum-v1', '--noise-type', 'adaptive-param_0.2',
                                 '--precision', 'bf16')
    assert status == 2 and err == ("xagents train ddpg: error: adaptive-param noise perturbs a float32 NumPy copy of "
                                   "the actor: leave precision='bf16' out with it\n")


# ------------------------------------------------------------------------- checkpoints, play
def test_checkpoints_hold_every_model_and_restore_optimizer_state(workdir):
    paths = [f'{role}.npz' for role in SAC.model_roles]
    agent = SAC.from_env('Pendulum-v1', seed=0, buffer_initial_size=256, update_every=50,
                         gradient_steps=5, checkpoints=paths, quiet=True)
    agent.fit(max_steps=600)
    agent.save_models()
    other = SAC.from_env('Pendulum-v1', seed=1, buffer_initial_size=256, quiet=True)
    other.load_weights(paths)
    for role in SAC.model_roles:
        for saved, loaded in zip(agent.models[role].weights, other.models[role].weights):
            np.testing.assert_array_equal(saved.numpy(), loaded.numpy())
    for role in ('actor', 'critic', 'alpha'):
        assert other.optimizers[role].iterations.numpy() == agent.optimizers[role].iterations.numpy() > 0
    observations = np.zeros((2, 3), np.float32)
    np.testing.assert_allclose(other.act(observations, deterministic=True),
                               agent.act(observations, deterministic=True), rtol=1e-6)
    assert np.isfinite(other.play('Pendulum-v1', max_steps=20, seed=0).mean)


@pytest.mark.parametrize('agent_class, env_id', [
    (DQN, 'CartPole-v1'), (SAC, 'CartPole-v1'), (SAC, 'Pendulum-v1'), (TD3, 'Pendulum-v1'), (DDPG, 'Pendulum-v1'),
])
def test_actions_are_valid_for_the_env_and_deterministic_ones_repeat(agent_class, env_id):
    agent = agent_class.from_env(env_id, n_envs=4, update_every=4, seed=0, quiet=True)
    observations = agent.envs.reset(seed=0)[0]
    for deterministic in (False, True):
        actions = agent.act(observations, deterministic)
        assert all(agent.envs.single_action_space.contains(action) for action in actions)
    np.testing.assert_array_equal(agent.act(observations, True), agent.act(observations, True))
    assert agent_class.model_roles == tuple(agent.models)  # every model is checkpointed


def test_same_seed_same_updates():
    def first_metrics():
        agent = SAC.from_env('Pendulum-v1', seed=5, buffer_initial_size=256, gradient_steps=4, quiet=True)
        return {name: float(value) for name, value in agent.fit(max_steps=300).metrics.items()}

    first = first_metrics()
    assert all(np.isfinite(list(first.values()))) and first == first_metrics()


# ------------------------------------------------------------------------------ CLI errors
BAD_INPUTS = [
    (['dqn', '--env', 'Pendulum-v1'],
     'xagents train dqn: error: DQN supports Discrete action spaces, got Box(-2.0, 2.0, (1,), float32) '
     '(Box actions: PPO, A2C, TRPO, DDPG, TD3, SAC, TQC, CrossQ)'),
    (['td3', '--env', 'CartPole-v1'], 'xagents train td3: error: TD3 supports Box action spaces, got Discrete(2) '
     '(Discrete actions: PPO, A2C, TRPO, ACER, DQN, QRDQN, SAC)'),
    (['sac', '--env', 'Pendulum-v1', '--buffer-max-size', '1000', '--buffer-initial-size', '2000'],
     'xagents train sac: error: expected buffer_initial_size <= buffer_max_size = 1000, got 2000'),
    (['dqn', '--env', 'CartPole-v1', '--buffer-batch-size', '2048'],
     'xagents train dqn: error: expected buffer_batch_size <= buffer_initial_size = 1000, got 2048'),
    (['dqn', '--env', 'CartPole-v1', '--n-envs', '4', '--update-every', '4', '--return-steps', '3', '--buffer-initial-size', '8',
      '--buffer-batch-size', '8'],
     'xagents train dqn: error: expected buffer_initial_size >= return_steps * n_envs = 12 (a complete 3-step window '
     'per env before the first update), got 8'),
    (['sac', '--env', 'CartPole-v1', '--use-sde'],
     "xagents train sac: error: use_sde explores Box actions; this env's actions are discrete"),
    (['ddpg', '--env', 'Pendulum-v1', '--noise-type', 'normal_0.1,pink_0.2'],
     "xagents train ddpg: error: argument --noise-type: expected noise types normal_SIGMA, ou_SIGMA, adaptive-param_SIGMA or none, "
     "comma-separated, got 'pink_0.2' in 'normal_0.1,pink_0.2'"),
]


def test_bad_input_is_one_line_on_stderr_with_status_2(workdir, xagents_command):
    """Through the installed command; the processes run side by side (each loads TensorFlow)."""
    processes = [subprocess.Popen(xagents_command + ['train'] + argv + ['--max-steps', '10'], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for argv, _ in BAD_INPUTS]
    for process, (argv, message) in zip(processes, BAD_INPUTS):
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 2, argv
        assert stderr.splitlines() == [message], argv
        assert 'Traceback' not in stdout


def test_observation_normalization_statistics_scaling_and_checkpoints(tmp_path):
    from xagents import DDPG

    paths = [str(tmp_path / f'{role}.tf') for role in DDPG.model_roles]
    agent = DDPG.from_env('Pendulum-v1', seed=0, normalize_observations=True, buffer_initial_size=256,
                          buffer_batch_size=64, update_every=64, gradient_steps=2, checkpoints=paths, quiet=True)
    seen = []
    step_envs = agent.step_envs

    def recording(actions):  # every observation the agent acted on, before it acts on the next
        seen.append(agent.observations.copy())
        return step_envs(actions)

    agent.step_envs = recording
    agent.fit(max_steps=512)
    seen = np.concatenate(seen)
    stats = agent.observation_stats
    assert stats.count == pytest.approx(len(seen) + 1e-4)
    np.testing.assert_allclose(stats.mean, seen.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(stats.var, seen.var(0), rtol=1e-3, atol=1e-4)
    scaled = agent.normalized(seen)
    np.testing.assert_allclose(scaled, np.clip((seen - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-8), -5, 5),
                               rtol=1e-3, atol=1e-4)
    assert np.abs(scaled.mean(0)).max() < 0.05 and np.abs(scaled.std(0) - 1).max() < 0.05
    # Acting uses the scaled observations: the actor on scaled inputs gives the deterministic action.
    observation = seen[:1]
    expected = agent.env_actions(agent.actor(agent.normalized(observation)).numpy())
    np.testing.assert_allclose(agent.act(observation, deterministic=True), expected, rtol=1e-4, atol=1e-5)
    count = stats.count
    agent.evaluate(2)
    assert stats.count == count  # frozen outside training

    agent.save_models()
    other = DDPG.from_env('Pendulum-v1', normalize_observations=True, quiet=True)
    other.load_weights(paths)
    np.testing.assert_array_equal(other.observation_stats.mean, stats.mean)
    np.testing.assert_array_equal(other.observation_stats.var, stats.var)
    np.testing.assert_allclose(other.act(observation, deterministic=True), expected, rtol=1e-4, atol=1e-5)
    plain = DDPG.from_env('Pendulum-v1', quiet=True, checkpoints=[str(tmp_path / f'p{i}.tf') for i in range(4)])
    plain.save_models()
    with pytest.raises(ValueError, match='expected observation statistics in the actor weights file'):
        other.load_weights([str(tmp_path / f'p{i}.tf') for i in range(4)])


def test_observation_normalization_needs_vector_observations():
    from xagents import DQN

    with pytest.raises(ValueError, match=r'normalize_observations scales vector observations, got images shaped \(84, 84, 4\)'):
        DQN.from_env('PongNoFrameskip-v4', normalize_observations=True, buffer_max_size=1000,
                     buffer_initial_size=100, buffer_batch_size=32, quiet=True)


def test_no_update_before_update_after_steps():
    from xagents import SAC

    agent = SAC.from_env('Pendulum-v1', seed=0, buffer_initial_size=64, buffer_batch_size=32, update_every=50,
                         gradient_steps=5, update_after=300, quiet=True)
    agent.fit(max_steps=250)  # the buffer is full enough from step 64, but updates wait for step 300
    assert agent.steps == 250 and int(agent.gradient_updates) == 0
    agent.fit(max_steps=300, total=True)
    assert int(agent.gradient_updates) == 5


# ------------------------------------------------------- warm-up, replay start, PER minibatches
def chi_square_uniform(values: np.ndarray, low: float, high: float, bins: int = 10) -> float:
    """Pearson's statistic of ``values`` against the uniform distribution on ``[low, high]``."""
    counts = np.histogram(values, bins=bins, range=(low, high))[0]
    expected = len(values) / bins
    return float(((counts - expected) ** 2 / expected).sum())


CHI_SQUARE_999 = 27.88  # 99.9% quantile of chi-square with 9 degrees of freedom


def test_chi_square_tells_uniform_actions_from_a_squashed_gaussian():
    rng = np.random.default_rng(0)
    assert chi_square_uniform(rng.uniform(-1, 1, 2000), -1, 1) < CHI_SQUARE_999
    # An untrained SAC policy acts tanh(N(0, 1)): the statistic the warm-up test uses must reject it.
    assert chi_square_uniform(np.tanh(rng.standard_normal(2000)), -1, 1) > 3 * CHI_SQUARE_999


@pytest.mark.parametrize('agent_class, settings', [
    (SAC, {}),  # start_steps defaults to buffer_initial_size (1000)
    (TD3, {'start_steps': 2000}),
])
def test_actions_are_uniformly_random_until_start_steps(agent_class, settings):
    agent = agent_class.from_env('Pendulum-v1', seed=0, quiet=True, **settings)
    start_steps = settings.get('start_steps', agent.buffer_initial_size)
    explored, sent = [], []
    explore, step = agent.explore, agent.envs.step
    agent.explore = lambda observations: explored.append(agent.steps) or explore(observations)
    agent.envs.step = lambda actions: sent.append(np.array(actions)) or step(actions)
    agent.fit(max_steps=start_steps + 400)
    assert min(explored) == start_steps and len(explored) == 400  # the policy acts from start_steps on
    warm_up = np.concatenate(sent[:start_steps])
    assert warm_up.shape == (start_steps, 1)
    assert chi_square_uniform(warm_up, -2.0, 2.0) < CHI_SQUARE_999  # uniform over Pendulum's [-2, 2]


def test_fit_never_changes_a_hyperparameter():
    """Per-run state must not overwrite a constructor parameter of the same name (start_steps once did)."""
    import inspect

    from xagents.app.flags import constructors

    agent = TD3.from_env('Pendulum-v1', seed=0, quiet=True, start_steps=700, buffer_initial_size=600,
                         buffer_batch_size=64)
    names = {name for function in constructors(TD3, object) for name in inspect.signature(function).parameters}
    before = {name: getattr(agent, name) for name in names if isinstance(getattr(agent, name, None), (int, float))}
    assert {'start_steps', 'buffer_initial_size', 'gamma', 'tau', 'update_every'} <= set(before)
    agent.fit(max_steps=1000)
    agent.fit(max_steps=1200)
    assert {name: getattr(agent, name) for name in before} == before


def test_learning_starts_when_buffer_initial_size_equals_the_capacity():
    """Each episode end keeps a slot, so a full buffer holds fewer transitions than its capacity: the
    start is counted in transitions added (SB3's learning_starts), and DQN then learns CartPole."""
    agent = DQN.from_env('CartPole-v1', seed=0, buffer_max_size=3000, buffer_initial_size=3000, quiet=True)
    agent.fit(max_steps=3072)
    assert len(agent.buffer) < 3000 and agent.gradient_updates.numpy() > 0
    run = agent.fit(target_reward=150, max_steps=20_000, eval_frequency=2500, eval_episodes=5, stop_on='eval')
    assert run.eval_reward >= 150, run.eval_reward


def test_each_prioritised_minibatch_is_a_stratified_sample_of_the_whole_buffer():
    """50 gradient steps over ~5,000 transitions of equal priority: every minibatch must reach from the
    oldest to the newest transitions, not a fiftieth of them each."""
    agent = DQN.from_env('CartPole-v1', seed=0, prioritized=True, buffer_max_size=6000, buffer_initial_size=5000,
                         buffer_batch_size=100, update_every=1, gradient_steps=50, update_after=10**9, quiet=True)
    agent.fit(max_steps=5000)
    assert agent.gradient_updates.numpy() == 0
    priorities = []
    update_priorities = agent.buffer.update_priorities
    agent.buffer.update_priorities = lambda indices, errors: priorities.append(indices) or update_priorities(
        indices, errors)
    agent.update()
    assert agent.gradient_updates.numpy() == 50
    minibatches = priorities[0].reshape(50, 100)  # slot index = time order with one env
    slots = agent.buffer.tree.size
    assert (minibatches.min(1) < 0.05 * slots).all() and (minibatches.max(1) > 0.8 * 5000).all()
    # Stratified: the k-th draw of every minibatch falls in the k-th hundredth of the priority mass.
    assert (np.diff(minibatches, axis=1) >= 0).all()


def test_prioritised_sample_of_several_minibatches_normalises_weights_per_minibatch():
    from xagents.replay.prioritized import PrioritizedReplayBuffer

    buffer = PrioritizedReplayBuffer(1000, 1, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0)
    for t in range(500):
        buffer.add(np.full((1, 2), t), np.zeros(1), np.zeros(1), np.full((1, 2), t + 1), np.zeros(1), np.zeros(1))
    buffer.update_priorities(np.arange(500), np.arange(500) + 1.0)
    batch = buffer.sample(32, 8)
    assert batch.weights.shape == (256,)
    np.testing.assert_allclose(batch.weights.reshape(8, 32).max(1), 1.0)
    times = batch.observations[:, 0].reshape(8, 32)
    assert (times.min(1) < 150).all() and (times.max(1) > 450).all()


# ----------------------------------------------- one real gradient step moves what it should
def weights(model) -> list[np.ndarray]:
    return [w.numpy().copy() for w in model.weights]


def changed(before: list[np.ndarray], model) -> list[bool]:
    return [not np.array_equal(old, new.numpy()) for old, new in zip(before, model.weights)]


def filled(agent_class, env_id='Pendulum-v1', **settings):
    """An agent whose buffer holds 300 random transitions and that has not updated yet."""
    agent = agent_class.from_env(env_id, seed=0, buffer_initial_size=256, buffer_batch_size=32, update_every=50,
                                 gradient_steps=1, update_after=10**9, quiet=True, **settings)
    agent.fit(max_steps=300)
    assert agent.gradient_updates.numpy() == 0
    return agent


def test_td3_critic_steps_leave_the_actor_and_targets_until_the_delayed_step():
    agent = filled(TD3, tau=0.05)  # lr 1e-3 > 0, policy_delay 2
    actor, critic = weights(agent.actor), weights(agent.critic)
    target_actor, target_critic = weights(agent.target_actor), weights(agent.target_critic)
    agent.update()  # gradient step 1: the critics alone
    assert all(changed(critic, agent.critic)) and not any(changed(actor, agent.actor))
    assert not any(changed(target_actor, agent.target_actor) + changed(target_critic, agent.target_critic))
    agent.update()  # gradient step 2: critics, actor, then both targets by Polyak averaging
    assert all(changed(actor, agent.actor))
    for target, old, online in ((agent.target_actor, target_actor, agent.actor),
                                (agent.target_critic, target_critic, agent.critic)):
        for variable, start, source in zip(target.weights, old, online.weights):
            np.testing.assert_allclose(variable.numpy(), 0.95 * start + 0.05 * source.numpy(), rtol=1e-5, atol=1e-7)


def test_sac_step_moves_actor_critic_and_alpha_and_the_target_by_polyak_only():
    for alpha, moves_alpha in ((None, True), (0.2, False)):
        agent = filled(SAC, tau=0.1, alpha=alpha)
        actor, critic, log_alpha = weights(agent.actor), weights(agent.critic), float(agent.log_alpha)
        target = weights(agent.target_critic)
        agent.update()
        assert all(changed(actor, agent.actor)) and all(changed(critic, agent.critic))
        assert (float(agent.log_alpha) != log_alpha) == moves_alpha
        for variable, start, source in zip(agent.target_critic.weights, target, agent.critic.weights):
            np.testing.assert_allclose(variable.numpy(), 0.9 * start + 0.1 * source.numpy(), rtol=1e-5, atol=1e-7)


def test_dqn_target_is_a_hard_copy_every_target_update_interval_gradient_steps():
    agent = filled(DQN, 'CartPole-v1', target_update_interval=3, tau=1.0)
    target = weights(agent.target_model)
    online = []
    for step in range(1, 7):
        previous = weights(agent.model)
        agent.update()
        assert all(changed(previous, agent.model))  # the online network moves every step
        online.append(weights(agent.model))
        expected = online[-1] if step % 3 == 0 else (target if step < 3 else online[2])
        for variable, value in zip(agent.target_model.weights, expected):
            np.testing.assert_array_equal(variable.numpy(), value)


class Pictures(gym.Env):
    """40 x 40 RGB pictures (big enough for the Nature CNN), two actions; no preset names it."""
    observation_space = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 1.0, False, False, {}


def test_dqns_generic_defaults_follow_the_observation_space_and_presets_keep_theirs():
    """No preset: images get the Nature paper's Atari-sized settings, any other observations RL Zoo's for Acrobot and
    LunarLander (learning after 1,000 steps, batch 128, 64 gradient steps every 64, ε to 0.1 over 12,000 steps);
    given values and presets win, and QR-DQN's learning rate follows the space too."""
    from xagents.qrdqn import QRDQN

    def settings(agent):
        return (float(agent.optimizer.learning_rate), agent.buffer_initial_size, agent.buffer_batch_size,
                agent.update_every, agent.gradient_steps, agent.target_update_interval, agent.epsilon_end,
                agent.epsilon_decay_steps)

    vector = DQN.from_env('xagents.envs.unpreset:Own/CartPole-v1')
    assert settings(vector) == (pytest.approx(6.3e-4), 1_000, 128, 64, 64, 250, 0.1, 12_000)
    assert vector.buffer.capacity == 50_000
    discrete = DQN.from_env('Taxi-v4')  # Discrete observations: one-hot vectors
    assert settings(discrete) == settings(vector)
    images = DQN(Pictures(), buffer_max_size=2_000, buffer_initial_size=1_000)
    assert settings(images) == (pytest.approx(1e-4), 1_000, 32, 4, 1, 2_500, 0.05, 250_000)
    given = DQN.from_env('Taxi-v4', lr=1e-3, buffer_batch_size=64, epsilon_decay_steps=50_000)
    assert settings(given)[:3] == (pytest.approx(1e-3), 1_000, 64) and given.epsilon_decay_steps == 50_000
    preset = DQN.from_env('CartPole-v1')
    assert settings(preset) == (pytest.approx(2.3e-3), 1_000, 64, 256, 128, 128, 0.04, 8_000)
    assert float(QRDQN.from_env('Taxi-v4').optimizer.learning_rate) == pytest.approx(6.3e-4)
    assert float(QRDQN(Pictures(), buffer_max_size=2_000, buffer_initial_size=1_000).optimizer.learning_rate) == \
        pytest.approx(5e-5)


def widths(model) -> list[int]:
    """The units of a model's hidden dense layers (ReLU, where the heads are linear or tanh), in order."""
    return [layer.units for layer in model.layers
            if isinstance(layer, tf.keras.layers.Dense) and layer.activation.__name__ == 'relu']


def test_sac_tqc_and_ddpg_build_sb3s_networks_by_default_and_presets_keep_theirs(tmp_path):
    """No preset: SB3's 256-256 actor and critics (each critic its own tower), DDPG's and TD3's 400-300; presets of
    small tasks keep the 64-64 ones they were measured with, a given cfg wins, CrossQ keeps SB3-contrib's sizes, and
    a save of an xagents before 2.1 (TD3: 2.2) that left the networks to the default loads them 64-64, as they were
    built."""
    import json

    from xagents.crossq import CrossQ
    from xagents.tqc import TQC

    own = SAC.from_env('xagents.envs.unpreset:Own/Pendulum-v1')
    assert widths(own.actor) == [256, 256] and widths(own.critic) == [256, 256, 256, 256]
    assert widths(SAC.from_env('xagents.envs.unpreset:Own/CartPole-v1').actor) == [256, 256]  # Discrete actions
    assert widths(TQC.from_env('xagents.envs.unpreset:Own/Pendulum-v1', n_critics=2).critic) == [256, 256] * 2
    for preset in (SAC.from_env('Pendulum-v1'), SAC.from_env('CartPole-v1'), TQC.from_env('Pendulum-v1')):
        assert widths(preset.actor) == [64, 64]
    assert widths(SAC.from_env('Hopper-v5').actor) == [256, 256]
    assert widths(SAC.from_env('xagents.envs.unpreset:Own/Pendulum-v1', actor_model='ann-actor.cfg').actor) == [64, 64]
    assert widths(CrossQ.from_env('xagents.envs.unpreset:Own/Pendulum-v1').critic)[-2:] == [1024, 1024]
    assert widths(DDPG.from_env('xagents.envs.unpreset:Own/Pendulum-v1').actor) == [400, 300]  # SB3's DDPG
    assert widths(DDPG.from_env('Pendulum-v1').actor) == [64, 64]
    assert widths(TD3.from_env('xagents.envs.unpreset:Own/Pendulum-v1').actor) == [400, 300]  # SB3's TD3
    assert widths(TD3.from_env('xagents.envs.unpreset:Own/Pendulum-v1').critic) == [400, 400, 300, 300]  # two towers
    for preset in ('Pendulum-v1', 'BipedalWalker-v3', 'PointReach-v0'):
        assert widths(TD3.from_env(preset).actor) == [64, 64], preset
    for preset in ('LunarLanderContinuous-v3', 'MountainCarContinuous-v0'):  # RL Zoo's
        assert widths(TD3.from_env(preset).actor) == [400, 300], preset

    before = SAC.from_env('xagents.envs.unpreset:Own/Pendulum-v1', actor_model='ann-actor.cfg',
                          critic_model='ann-critic.cfg', seed=0)
    path = before.save(str(tmp_path / 'old'))
    with open(tmp_path / 'old' / 'agent.json') as file:
        manifest = json.load(file)
    manifest['xagents_version'] = '2.0.0'  # what a save of 2.0 with the networks left to the default holds
    del manifest['hyperparameters']['actor_model'], manifest['hyperparameters']['critic_model']
    with open(tmp_path / 'old' / 'agent.json', 'w') as file:
        json.dump(manifest, file)
    loaded = SAC.load(path)
    assert widths(loaded.actor) == [64, 64] and widths(loaded.critic) == [64, 64, 64, 64]
    observations = np.zeros((1, 3), np.float32)
    np.testing.assert_allclose(loaded.actor(observations), before.actor(observations), rtol=1e-6)
    now = SAC.load(own.save(str(tmp_path / 'new')))
    assert widths(now.actor) == [256, 256]
    with pytest.raises(ValueError, match='default before xagents 2.1; .*--actor-model ann-actor.cfg --critic-model'):
        own.restore(path)  # into an agent built with today's default: the message says how to build it

    td3 = TD3.from_env('xagents.envs.unpreset:Own/Pendulum-v1', actor_model='ann-actor.cfg',
                       critic_model='ann-critic.cfg', seed=0)
    td3_path = td3.save(str(tmp_path / 'td3'))
    with open(tmp_path / 'td3' / 'agent.json') as file:
        manifest = json.load(file)
    manifest['xagents_version'] = '2.1.0'  # TD3's default was still 64-64 in 2.1
    del manifest['hyperparameters']['actor_model'], manifest['hyperparameters']['critic_model']
    with open(tmp_path / 'td3' / 'agent.json', 'w') as file:
        json.dump(manifest, file)
    assert widths(TD3.load(td3_path).actor) == [64, 64]
    wide = TD3.from_env('xagents.envs.unpreset:Own/Pendulum-v1')
    assert widths(TD3.load(wide.save(str(tmp_path / 'td3-new'))).actor) == [400, 300]
    with pytest.raises(ValueError, match='default before xagents 2.2; .*--actor-model ann-actor.cfg --critic-model'):
        wide.restore(td3_path)


def test_a_discrete_sac_saved_before_2_3_goes_on_towards_the_entropy_it_trained_for(tmp_path):
    """Discrete SAC's default target entropy became 0.89 log n in 2.3: a save of 2.2 that left it to the default
    resumes towards 0.98 log n, as it trained; a later save, a given value and Box actions keep theirs."""
    import json

    def saved_as(agent, name, version):
        path = agent.save(str(tmp_path / name))
        with open(tmp_path / name / 'agent.json') as file:
            manifest = json.load(file)
        manifest['xagents_version'] = version
        with open(tmp_path / name / 'agent.json', 'w') as file:
            json.dump(manifest, file)
        return path

    cartpole = SAC.from_env('CartPole-v1', seed=0)
    assert cartpole.target_entropy == pytest.approx(0.89 * math.log(2))
    old = SAC.load(saved_as(cartpole, 'old', '2.2.0'))
    assert old.target_entropy == pytest.approx(0.98 * math.log(2))
    assert old.hyperparameters['target_entropy'] == pytest.approx(0.98 * math.log(2))  # a save of it keeps it
    assert SAC.load(saved_as(cartpole, 'new', '2.3.0')).target_entropy == pytest.approx(0.89 * math.log(2))
    given = SAC.from_env('CartPole-v1', target_entropy=0.3)
    assert SAC.load(saved_as(given, 'given', '2.2.0')).target_entropy == pytest.approx(0.3)
    pendulum = SAC.from_env('Pendulum-v1')
    assert SAC.load(saved_as(pendulum, 'box', '2.2.0')).target_entropy == pytest.approx(-1.0)
